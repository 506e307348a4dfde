"""iWARP wire codecs: MPA Request/Reply frames, FPDU framing, DDP/RDMAP headers, Terminate.

Values are frozen dataclasses that encode to the exact bytes the RFCs define and decode
from them; the parsing, CRC32c and marker work happens in C++ (``rdma_interop._core``).
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

import enum
from dataclasses import dataclass
from typing import ClassVar, Union

from rdma_interop import _core
from rdma_interop.errors import TerminateCause, TermLayer, WireError

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


# ---- MPA Request/Reply frames, RFC 5044 s7.1 and RFC 6581 s3 ---------------------------


class MpaKind(str, enum.Enum):
    """Which key the frame starts with: "MPA ID Req Frame" or "MPA ID Rep Frame"."""

    REQUEST = "request"
    REPLY = "reply"


@dataclass(frozen=True)
class MpaEnhanced:
    """RFC 6581 s3 IRD/ORD words at the front of a revision-2 frame's private data.

    An initiator lists the RTR types it can send; a responder sets the one it chose.
    ``ird`` and ``ord`` are 14-bit RDMA Read queue depths (0..0x3fff).
    """

    peer_to_peer: bool = False
    rtr_send: bool = False  # zero-length Send (FPDU) RTR
    rtr_write: bool = False  # zero-length RDMA Write RTR
    rtr_read: bool = False  # zero-length RDMA Read RTR
    ird: int = 0
    ord: int = 0

    #: Largest IRD/ORD value the 14-bit fields hold.
    MAX_IRD_ORD: ClassVar[int] = _core.MPA_IRD_ORD_MAX

    def _to_core(self) -> _core.MpaEnhancedParams:
        params = _core.MpaEnhancedParams()
        params.peer_to_peer = self.peer_to_peer
        params.rtr_send = self.rtr_send
        params.rtr_write = self.rtr_write
        params.rtr_read = self.rtr_read
        params.ird = self.ird
        params.ord = self.ord
        return params

    @classmethod
    def _from_core(cls, params: _core.MpaEnhancedParams) -> MpaEnhanced:
        return cls(
            peer_to_peer=params.peer_to_peer,
            rtr_send=params.rtr_send,
            rtr_write=params.rtr_write,
            rtr_read=params.rtr_read,
            ird=params.ird,
            ord=params.ord,
        )


@dataclass(frozen=True)
class MpaFrame:
    """An MPA Request or Reply frame.

    ``enhanced`` is present exactly when the frame carries RFC 6581 IRD/ORD words (the
    enhanced flag, revision 2 only); ``private_data`` is the application's part, without
    those words. ``reserved_bits`` are the four low flag bits: zero on a well-formed frame,
    set only to send garbage on purpose or as decoded with ``reject_reserved_bits=False``.
    """

    kind: MpaKind = MpaKind.REQUEST
    markers: bool = False
    crc: bool = False
    reject: bool = False
    revision: int = 1
    private_data: bytes = b""
    enhanced: MpaEnhanced | None = None
    reserved_bits: int = 0

    def __post_init__(self) -> None:
        # Accept "request"/"reply" and any bytes-like private data; store the canonical types.
        object.__setattr__(self, "kind", MpaKind(self.kind))
        object.__setattr__(self, "private_data", bytes(self.private_data))

    # The RFC 6581 fields, None on a frame without IRD/ORD words.
    @property
    def peer_to_peer(self) -> bool | None:
        return None if self.enhanced is None else self.enhanced.peer_to_peer

    @property
    def rtr_send(self) -> bool | None:
        return None if self.enhanced is None else self.enhanced.rtr_send

    @property
    def rtr_write(self) -> bool | None:
        return None if self.enhanced is None else self.enhanced.rtr_write

    @property
    def rtr_read(self) -> bool | None:
        return None if self.enhanced is None else self.enhanced.rtr_read

    @property
    def ird(self) -> int | None:
        return None if self.enhanced is None else self.enhanced.ird

    @property
    def ord(self) -> int | None:
        return None if self.enhanced is None else self.enhanced.ord

    @property
    def pd_length(self) -> int:
        """PD_Length as it goes on the wire: private data plus the IRD/ORD words."""
        return int(_core.mpa_pd_length(self._to_core()))

    def encode(self, *, private_data_limit: int = MPA_MAX_PRIVATE_DATA_RFC) -> bytes:
        """The frame's bytes.

        Raises WireError when a field cannot be represented: IRD/ORD above 14 bits
        (``mpa_ird_ord_out_of_range``), PD_Length above the limit
        (``mpa_private_data_too_long``), IRD/ORD words on a revision-1 frame
        (``mpa_enhanced_needs_revision2``).
        """
        # reserved_bits are written as given: a frame value says exactly what goes out.
        return bytes(
            _core.encode_mpa_frame(
                self._to_core(),
                private_data_limit=private_data_limit,
                reject_reserved_bits=False,
            )
        )

    @classmethod
    def decode(
        cls,
        data: BytesLike,
        *,
        private_data_limit: int = MPA_MAX_PRIVATE_DATA_RFC,
        reject_reserved_bits: bool = True,
    ) -> MpaFrame:
        """Decodes exactly one whole frame (no bytes missing, none extra).

        Raises WireError naming the first wrong field, e.g. ``mpa_bad_key``,
        ``mpa_reserved_bits``, ``mpa_unknown_revision``, ``mpa_private_data_too_long``,
        ``mpa_truncated``, ``mpa_trailing_bytes``.
        """
        core = _core.decode_mpa_frame(
            data,
            private_data_limit=private_data_limit,
            reject_reserved_bits=reject_reserved_bits,
        )
        return cls._from_core(core)

    @staticmethod
    def frame_length(
        header: BytesLike,
        *,
        private_data_limit: int = MPA_MAX_PRIVATE_DATA_RFC,
        reject_reserved_bits: bool = True,
    ) -> int:
        """Total frame length, from its first HEADER_LEN octets (validated); for stream readers."""
        return int(
            _core.mpa_frame_length(
                header,
                private_data_limit=private_data_limit,
                reject_reserved_bits=reject_reserved_bits,
            )
        )

    #: Key, flags, Rev and PD_Length: what frame_length() needs.
    HEADER_LEN: ClassVar[int] = _core.MPA_HEADER_LEN

    def __str__(self) -> str:
        """'MPA Request rev 2 CRC p2p rtr=write,read ird=16 ord=16 pd=12' (from C++)."""
        return repr(self._to_core())

    def _to_core(self) -> _core.MpaFrame:
        core = _core.MpaFrame()
        core.kind = _core.MpaFrameKind.REQUEST if self.kind is MpaKind.REQUEST else _core.MpaFrameKind.REPLY
        core.markers = self.markers
        core.crc = self.crc
        core.reject = self.reject
        core.revision = self.revision
        core.enhanced = None if self.enhanced is None else self.enhanced._to_core()
        core.private_data = self.private_data
        core.reserved_bits = self.reserved_bits
        return core

    @classmethod
    def _from_core(cls, core: _core.MpaFrame) -> MpaFrame:
        return cls(
            kind=MpaKind.REQUEST if core.kind == _core.MpaFrameKind.REQUEST else MpaKind.REPLY,
            markers=core.markers,
            crc=core.crc,
            reject=core.reject,
            revision=core.revision,
            private_data=core.private_data,
            enhanced=None if core.enhanced is None else MpaEnhanced._from_core(core.enhanced),
            reserved_bits=core.reserved_bits,
        )


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
        return bool(_core.opcode_is_tagged(_core.RdmapOpcode(int(self))))

    @property
    def queue_number(self) -> int:
        """The untagged queue (RFC 5040 s5.1) this opcode travels on; untagged opcodes only."""
        return int(_core.opcode_queue_number(_core.RdmapOpcode(int(self))))


@dataclass(frozen=True)
class DdpHeader:
    """A DDP segment header with the RDMAP control octet it carries.

    Tagged segments (14 octets) use ``stag`` and ``tagged_offset``; untagged ones (18
    octets) use ``invalidate_stag``, ``queue_number``, ``msn`` and ``message_offset``.
    The versions are fields so that tests can send wrong ones. The classmethods build the
    header of each RDMAP message so callers do not pick bits by hand.
    """

    tagged: bool = False
    last: bool = True
    opcode: RdmapOpcode = RdmapOpcode.SEND
    ddp_version: int = 1
    rdmap_version: int = 1
    stag: int = 0
    tagged_offset: int = 0
    invalidate_stag: int = 0
    queue_number: int = 0
    msn: int = 0
    message_offset: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "opcode", RdmapOpcode(self.opcode))

    @property
    def length(self) -> int:
        """Octets on the wire: 14 tagged, 18 untagged."""
        return int(self._to_core().length())

    def encode(self) -> bytes:
        return bytes(_core.encode_ddp_header(self._to_core()))

    def __str__(self) -> str:
        return repr(self._to_core())

    @classmethod
    def rdma_write(cls, sink_stag: int, sink_to: int, *, last: bool = True) -> DdpHeader:
        return cls._from_core(_core.rdma_write_header(sink_stag, sink_to, last))

    @classmethod
    def read_response(cls, sink_stag: int, sink_to: int, *, last: bool = True) -> DdpHeader:
        return cls._from_core(_core.read_response_header(sink_stag, sink_to, last))

    @classmethod
    def read_request(cls, msn: int) -> DdpHeader:
        return cls._from_core(_core.read_request_header(msn))

    @classmethod
    def send(
        cls,
        msn: int,
        message_offset: int = 0,
        *,
        last: bool = True,
        solicited_event: bool = False,
        invalidate_stag: int | None = None,
    ) -> DdpHeader:
        """A Send-family header; solicited_event and invalidate_stag pick the opcode."""
        return cls._from_core(
            _core.send_header(msn, message_offset, last, solicited_event, invalidate_stag)
        )

    @classmethod
    def terminate(cls, msn: int) -> DdpHeader:
        return cls._from_core(_core.terminate_header(msn))

    def _to_core(self) -> _core.DdpHeader:
        core = _core.DdpHeader()
        core.tagged = self.tagged
        core.last = self.last
        core.opcode = _core.RdmapOpcode(int(self.opcode))
        core.ddp_version = self.ddp_version
        core.rdmap_version = self.rdmap_version
        core.stag = self.stag
        core.tagged_offset = self.tagged_offset
        core.invalidate_stag = self.invalidate_stag
        core.queue_number = self.queue_number
        core.msn = self.msn
        core.message_offset = self.message_offset
        return core

    @classmethod
    def _from_core(cls, core: _core.DdpHeader) -> DdpHeader:
        return cls(
            tagged=core.tagged,
            last=core.last,
            opcode=RdmapOpcode(int(core.opcode)),
            ddp_version=core.ddp_version,
            rdmap_version=core.rdmap_version,
            stag=core.stag,
            tagged_offset=core.tagged_offset,
            invalidate_stag=core.invalidate_stag,
            queue_number=core.queue_number,
            msn=core.msn,
            message_offset=core.message_offset,
        )


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
        return cls(DdpHeader._from_core(header), payload)


@dataclass(frozen=True)
class ReadRequest:
    """The 28-octet RDMA Read Request body (RFC 5040 s4.4)."""

    sink_stag: int = 0
    sink_tagged_offset: int = 0
    size: int = 0  # zero-length Reads are legal (the RFC 6581 Read RTR is one)
    source_stag: int = 0
    source_tagged_offset: int = 0

    def encode(self) -> bytes:
        core = _core.ReadRequest()
        core.sink_stag = self.sink_stag
        core.sink_tagged_offset = self.sink_tagged_offset
        core.size = self.size
        core.source_stag = self.source_stag
        core.source_tagged_offset = self.source_tagged_offset
        return bytes(_core.encode_read_request(core))

    @classmethod
    def decode(cls, payload: BytesLike) -> ReadRequest:
        """Raises WireError ``rdmap_read_request_bad_length`` unless exactly 28 octets."""
        core = _core.decode_read_request(payload)
        return cls(
            sink_stag=core.sink_stag,
            sink_tagged_offset=core.sink_tagged_offset,
            size=core.size,
            source_stag=core.source_stag,
            source_tagged_offset=core.source_tagged_offset,
        )


# ---- Terminate, RFC 5040 s4.8 -----------------------------------------------------------


@dataclass(frozen=True)
class Terminate:
    """An RDMAP Terminate message: the error's (layer, etype, code) and what it was about.

    ``ddp_segment_length`` (the M flag) is the length of the offending segment;
    ``ddp_header`` (the D flag) its DDP/RDMAP header as it arrived; ``rdmap_header``
    (the R flag) the Read Request body when the offending segment was one.
    """

    layer: TermLayer
    etype: int
    code: int
    ddp_segment_length: int | None = None
    ddp_header: bytes = b""
    rdmap_header_included: bool = False
    rdmap_header: bytes = b""

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", TermLayer(self.layer))
        object.__setattr__(self, "ddp_header", bytes(self.ddp_header))
        object.__setattr__(self, "rdmap_header", bytes(self.rdmap_header))

    @property
    def cause(self) -> TerminateCause:
        return TerminateCause(self.layer, self.etype, self.code)

    def encode(self, msn: int) -> bytes:
        """A whole Terminate ULPDU: untagged DDP header (QN 2, this MSN, MO 0, L) + body."""
        return bytes(_core.encode_terminate(self._to_core(), msn))

    def encode_body(self) -> bytes:
        """The Terminate body alone (what follows the DDP header)."""
        return bytes(_core.encode_terminate_body(self._to_core()))

    @classmethod
    def decode(cls, ulpdu: BytesLike) -> Terminate:
        """Decodes a whole Terminate ULPDU (as ``encode`` produces).

        Raises WireError for malformed bytes, ValueError if the ULPDU is a valid segment
        of another opcode (the caller dispatches on the opcode; see DdpSegment.decode).
        """
        segment = DdpSegment.decode(ulpdu)
        if segment.header.opcode is not RdmapOpcode.TERMINATE:
            raise ValueError(f"not a Terminate ULPDU: opcode {segment.header.opcode.name}")
        return cls.decode_body(segment.payload)

    @classmethod
    def decode_body(cls, body: BytesLike) -> Terminate:
        """Decodes the payload of a Terminate segment; raises WireError."""
        return cls._from_core(_core.decode_terminate_body(body))

    @classmethod
    def for_error(cls, error: WireError, offending_ulpdu: BytesLike = b"") -> Terminate:
        """The Terminate a receiver sends for ``error`` found in ``offending_ulpdu``,
        including the offending headers when their layout is known."""
        return cls._from_core(_core.terminate_for_ulpdu(error.name, offending_ulpdu))

    @classmethod
    def for_cause(cls, cause: tuple[int, int, int], offending_ulpdu: BytesLike = b"") -> Terminate:
        """The Terminate for a placement error the provider found (STag, bounds, rights)."""
        layer, etype, code = cause
        core = _core.TerminateCause()
        core.layer = _core.TermLayer(int(layer))
        core.etype = etype
        core.code = code
        return cls._from_core(_core.terminate_for_cause(core, offending_ulpdu))

    def __str__(self) -> str:
        return repr(self._to_core())

    def _to_core(self) -> _core.TerminateMessage:
        core = _core.TerminateMessage()
        cause = _core.TerminateCause()
        cause.layer = _core.TermLayer(int(self.layer))
        cause.etype = self.etype
        cause.code = self.code
        core.cause = cause
        core.ddp_segment_length = self.ddp_segment_length
        core.ddp_header = self.ddp_header
        core.rdmap_header_included = self.rdmap_header_included
        core.rdmap_header = self.rdmap_header
        return core

    @classmethod
    def _from_core(cls, core: _core.TerminateMessage) -> Terminate:
        return cls(
            layer=TermLayer(int(core.cause.layer)),
            etype=core.cause.etype,
            code=core.cause.code,
            ddp_segment_length=core.ddp_segment_length,
            ddp_header=core.ddp_header,
            rdmap_header_included=core.rdmap_header_included,
            rdmap_header=core.rdmap_header,
        )
