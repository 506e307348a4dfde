"""iWARP wire codecs: MPA Request/Reply frames, FPDU framing, DDP/RDMAP headers, Terminate.

The values are the C++ value types themselves (core/wire/, bound once by
``rdma_interop._core``: fields by position or keyword, read-only, ==, hash, repr,
``replace()``); they encode to the exact bytes the RFCs define and decode from them, and the
parsing, CRC32c and marker work happens in C++. This module re-exports them and adds what
Python alone needs: the FPDU stream objects and ``DdpSegment``, a header with its payload.
Every malformed input raises :class:`WireError`, whose ``.name`` says which field was
wrong and whose ``.terminate`` is the protocol's answer.

MPA connection setup (RFC 5044 s7.1, RFC 6581 s3)::

    request = MpaFrame(MpaKind.REQUEST, crc=True, revision=2,
                       enhanced=MpaEnhanced(peer_to_peer=True, rtr_write=True, ird=16, ord=16),
                       private_data=b"hello")
    assert MpaFrame.decode(request.encode()) == request

Full-duplex data (RFC 5044 s4-s6, RFC 5041, RFC 5040)::

    tx = FpduEncoder(crc=True, markers=False)
    rx = FpduDecoder(crc=True, markers=False)
    ulpdu = DdpSegment(DdpHeader.send(msn=1), b"payload").encode()
    assert rx.feed(tx.encode(ulpdu)) == [ulpdu]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from rdma_interop import _core
from rdma_interop._core import DdpHeader, MpaEnhanced, MpaFrame, ReadRequest, Terminate
from rdma_interop.errors import TerminateCause, TermLayer, WireError
from rdma_interop.wire_enums import MpaKind, RdmapOpcode

__all__ = [
    "BytesLike",
    "DdpHeader",
    "DdpSegment",
    "FpduDecoder",
    "FpduEncoder",
    "MPA_MAX_PRIVATE_DATA_LINUX",
    "MPA_MAX_PRIVATE_DATA_RFC",
    "MpaEnhanced",
    "MpaFrame",
    "MpaKind",
    "RdmapOpcode",
    "ReadRequest",
    "TermLayer",
    "Terminate",
    "TerminateCause",
    "WIRE_ERROR_NAMES",
    "WireError",
    "crc32c",
]

#: Anything with the buffer protocol that holds plain octets.
BytesLike = Union[bytes, bytearray, memoryview]

#: RFC 5044 s7.1: PD_Length MUST NOT exceed 512.
MPA_MAX_PRIVATE_DATA_RFC: int = _core.MPA_MAX_PRIVATE_DATA_RFC
#: Linux siw and cxgb4 accept at most 256 octets (RDMA_MAX_PRIVATE_DATA).
MPA_MAX_PRIVATE_DATA_LINUX: int = _core.MPA_MAX_PRIVATE_DATA_LINUX

#: Every WireError.name the codecs can raise, in the C++ declaration order.
WIRE_ERROR_NAMES: tuple[str, ...] = tuple(_core.wire_error_names())


def crc32c(data: BytesLike) -> int:
    """CRC32c (RFC 5044 s4.1, the iSCSI polynomial): ``crc32c(b"123456789") == 0xE3069283``."""
    return int(_core.crc32c(data))


# MpaKind, MpaEnhanced and MpaFrame (RFC 5044 s7.1, RFC 6581 s3): bindings/mpa_bindings.cc.


# ---- FPDU framing, RFC 5044 s4-s6 ------------------------------------------------------


class FpduEncoder:
    """Frames ULPDUs as FPDUs for one direction of one connection, in order.

    Adds ULPDU_Length, pad, CRC32c (zero when ``crc`` is off) and, with ``markers``, a
    marker every 512 octets of the stream, so it keeps the stream position across calls.
    ``max_ulpdu`` is the MULPDU (default: 65535, or the largest that fits with markers).
    """

    def __init__(self, *, crc: bool = True, markers: bool = False, max_ulpdu: int | None = None) -> None:
        self.crc = crc
        self.markers = markers
        self._core = _core.FpduEncoder(crc=crc, markers=markers, max_ulpdu=max_ulpdu)

    def encode(self, *parts: BytesLike) -> bytes:
        """One FPDU framing the concatenated parts (e.g. a DDP header, then the payload).

        Raises WireError ``fpdu_ulpdu_too_long`` above the MULPDU (the stream is unchanged).
        """
        return bytes(self._core.encode(parts))

    @property
    def stream_position(self) -> int:
        """Octets of this direction's stream produced so far."""
        return int(self._core.stream_position)


class FpduDecoder:
    """A streaming FPDU receiver: feed it the byte stream in pieces of any size.

    It removes and checks markers, checks pad and CRC, and returns each complete ULPDU.
    Bad input raises WireError (``fpdu_crc_mismatch`` carries the Terminate cause
    (LLP, 0, 2)); the ULPDUs completed earlier in the same ``feed`` are in the
    exception's ``ulpdus``. After an error the decoder stays failed: every later ``feed``
    raises ``fpdu_stream_failed``.
    """

    def __init__(self, *, crc: bool = True, markers: bool = False, max_ulpdu: int | None = None) -> None:
        self.crc = crc
        self.markers = markers
        self._core = _core.FpduDecoder(crc=crc, markers=markers, max_ulpdu=max_ulpdu)
        self._error: WireError | None = None

    def feed(self, data: BytesLike) -> list[bytes]:
        """The ULPDUs these stream bytes complete, in order (often none, sometimes many)."""
        try:
            return list(self._core.feed(data))
        except WireError as error:
            if self._error is None:
                self._error = error
            raise

    @property
    def error(self) -> WireError | None:
        """The error that failed the stream, or None while it is healthy."""
        return self._error

    @property
    def stream_position(self) -> int:
        return int(self._core.stream_position)

    @property
    def fpdus_decoded(self) -> int:
        return int(self._core.fpdus_decoded)

    @property
    def at_boundary(self) -> bool:
        """True between FPDUs: where a clean close may happen."""
        return bool(self._core.at_boundary)


# ---- DDP (RFC 5041 s4) and RDMAP (RFC 5040 s4) headers ---------------------------------
# RdmapOpcode, DdpHeader, ReadRequest and Terminate (RFC 5040 s4.8): bindings/rdmap_bindings.cc.


@dataclass(frozen=True)
class DdpSegment:
    """One ULPDU: the DDP/RDMAP header and its payload (what an FPDU frames)."""

    header: DdpHeader
    payload: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "payload", bytes(self.payload))

    def encode(self) -> bytes:
        return self.header.encode() + self.payload

    @classmethod
    def decode(cls, ulpdu: BytesLike) -> DdpSegment:
        """Parses and validates one ULPDU as a receiver must before placing data.

        Raises WireError with the Terminate the standard prescribes, e.g.
        ``ddp_untagged_bad_version``, ``ddp_invalid_queue_number``, ``rdmap_bad_opcode``.
        """
        header, payload = _core.decode_ddp_segment(ulpdu)
        return cls(header, payload)
