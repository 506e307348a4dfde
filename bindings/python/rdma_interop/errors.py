"""The one exception the wire codecs raise, and the Terminate cause it carries.

Every way wire bytes can be wrong has a stable name (C++ ``error_name``, e.g.
``"mpa_bad_key"``), a sentence for a human (C++ ``describe``) and the RDMAP Terminate
(layer, error type, error code) the receiver answers with (RFC 5040 s4.8, RFC 5041 s7,
RFC 5044 s8, RFC 6581 s5). ``WireError`` carries all three, so a test can check exactly
which field was found wrong and what goes back on the wire::

    try:
        MpaFrame.decode(data)
    except WireError as e:
        assert e.name == "mpa_bad_key"
        assert e.terminate == (TermLayer.LLP, 0, 4)

This module is pure Python and imports nothing from the extension module, which builds
its exceptions from it.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["TermLayer", "TerminateCause", "WireError"]


class TermLayer(enum.IntEnum):
    """The layer that found the error (RFC 5040 s4.8 Terminate Control)."""

    RDMAP = 0x0
    DDP = 0x1
    LLP = 0x2  # MPA


class TerminateCause(NamedTuple):
    """(layer, error type, error code) of an RDMAP Terminate; compares equal to a tuple."""

    layer: TermLayer
    etype: int
    code: int

    def describe(self) -> str:
        """'RDMAP/remote protection/invalid STag' style text."""
        from rdma_interop import _core  # the C++ names every (layer, etype, code)

        return str(_core.describe_cause(int(self.layer), self.etype, self.code))


class WireError(ValueError):
    """Wire bytes (or a value to encode) break the protocol.

    Attributes:
        name: stable identifier of the error, e.g. ``"mpa_bad_key"``.
        message: one sentence for a human.
        terminate: the Terminate cause the receiver of such bytes sends.
        ulpdus: set by ``FpduDecoder.feed``: the ULPDUs that input completed before the
            error (empty otherwise).
    """

    name: str
    message: str
    terminate: TerminateCause
    ulpdus: tuple[bytes, ...]

    def __init__(self, name: str, message: str, terminate: tuple[int, int, int]) -> None:
        layer, etype, code = terminate
        cause = TerminateCause(TermLayer(layer), etype, code)
        super().__init__(name, message, tuple(cause))
        self.name = name
        self.message = message
        self.terminate = cause
        self.ulpdus = ()

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"
