"""rdma_interop: an iWARP interop toolkit.

Submodules:
    rdma_interop.wire    MPA, FPDU, DDP and RDMAP codecs (C++ underneath).
    rdma_interop.errors  WireError, the one exception every codec raises.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
