"""The wire values' enums as the package's own: which key an MPA frame starts with and the
RDMAP opcode of a DDP segment (core/wire/mpa_frame.h, iwarp_constants.h). The bound
``MpaFrame`` and ``DdpHeader`` hand these out (``frame.kind is MpaKind.REPLY``);
``rdma_interop.wire`` re-exports them. This module imports the extension only inside the
opcode's properties, so the extension's stub can name the classes.
"""

from __future__ import annotations

import enum

__all__ = ["MpaKind", "RdmapOpcode"]


class MpaKind(str, enum.Enum):
    """Which key the frame starts with: "MPA ID Req Frame" or "MPA ID Rep Frame"."""

    REQUEST = "request"
    REPLY = "reply"


class RdmapOpcode(enum.IntEnum):
    """RFC 5040 s4.3 RDMAP opcodes."""

    RDMA_WRITE = 0x0
    RDMA_READ_REQUEST = 0x1
    RDMA_READ_RESPONSE = 0x2
    SEND = 0x3
    SEND_WITH_INVALIDATE = 0x4
    SEND_WITH_SOLICITED_EVENT = 0x5
    SEND_WITH_SOLICITED_EVENT_AND_INVALIDATE = 0x6
    TERMINATE = 0x7

    @property
    def tagged(self) -> bool:
        """True for the opcodes that use the tagged buffer model (Write, Read Response)."""
        from rdma_interop import _core  # the C++ says which (core/wire/ddp_segment.h)

        return bool(_core.opcode_is_tagged(self))

    @property
    def queue_number(self) -> int:
        """The untagged queue (RFC 5040 s5.1) this opcode travels on; untagged opcodes only."""
        from rdma_interop import _core

        return int(_core.opcode_queue_number(self))
