"""The Terminate the RFCs require for a fault we injected, and a field-by-field check of
the Terminate a peer actually sent.

The required (layer, error type, code) come from the RFCs' tables, written out here on
their own (RFC 5040 s7 for RDMAP, RFC 5041 s7 for DDP, RFC 5044 s8 for MPA); our C++
mapping (core/wire/wire_error.cc terminate_for(), core/rdmap/memory_registry.cc) is
cross-checked against them in test_terminate_check.py, not trusted.

The received Terminate is parsed here byte by byte by the RFC 5040 s4.8 layout, not with
our codec (which rejects malformed Terminates, and a finding needs every field):

    DDP untagged header (18): ctrl(2) RsvdULP(4) QN(4) MSN(4) MO(4)   -- QN 2, L set, MO 0
    Terminate Control (4):    Layer(4) EType(4) ErrorCode(8) M D R Reserved(13)
    DDP Segment Length (2):   if M or D
    Terminated DDP Header:    if D; 14 octets tagged, 18 untagged (the T bit tells)
    Terminated RDMA Header:   if R; the 28-octet RDMA Read Request header

A deviation is one sentence saying which field differs, what it holds and what the RFC
requires; the raw octets travel with it (``raw_hex``), so each finding can be reported as
the bytes on the wire.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from rdma_interop.errors import TerminateCause, TermLayer

from .fault_client import Observation, ReceivedFpdu

# ---- RFC error tables (layer, error type, code) ---------------------------------------

#: RFC 5044 s8 (layer 2 = LLP, error type 0 = MPA).
MPA_CONNECTION_LOST = TerminateCause(TermLayer.LLP, 0x0, 0x01)
MPA_CRC_ERROR = TerminateCause(TermLayer.LLP, 0x0, 0x02)
MPA_INVALID_REQUEST_REPLY = TerminateCause(TermLayer.LLP, 0x0, 0x04)
#: RFC 5041 s7 (layer 1 = DDP): tagged buffer errors (type 1), untagged (type 2).
DDP_TAGGED_INVALID_STAG = TerminateCause(TermLayer.DDP, 0x1, 0x00)
DDP_TAGGED_BASE_OR_BOUNDS = TerminateCause(TermLayer.DDP, 0x1, 0x01)
DDP_UNTAGGED_NO_BUFFER = TerminateCause(TermLayer.DDP, 0x2, 0x02)  # invalid MSN, no buffer
#: RFC 5040 s7 (layer 0 = RDMAP): remote protection errors (type 1).
RDMAP_INVALID_STAG = TerminateCause(TermLayer.RDMAP, 0x1, 0x00)
RDMAP_BASE_OR_BOUNDS = TerminateCause(TermLayer.RDMAP, 0x1, 0x01)

# ---- wire layout ---------------------------------------------------------------------

UNTAGGED_HEADER_LEN = 18
TAGGED_HEADER_LEN = 14
READ_REQUEST_BODY_LEN = 28
TERMINATE_CONTROL_LEN = 4
SEGMENT_LENGTH_LEN = 2
#: Header-control bits in octet 2 of the Terminate Control field (RFC 5040 s4.8).
FLAG_M, FLAG_D, FLAG_R = 0x80, 0x40, 0x20
TERMINATE_QN = 2  # RFC 5040 s5.1
OPCODE_READ_REQUEST = 0x1
OPCODE_TERMINATE = 0x7


def _cause_text(layer: int, etype: int, code: int) -> str:
    if layer <= int(TermLayer.LLP):
        return TerminateCause(TermLayer(layer), etype, code).describe()
    return f"layer {layer} (reserved)/type {etype}/code 0x{code:02x}"


@dataclass(frozen=True)
class RequiredTerminate:
    """The Terminate a responder must send about `offending` (the ULPDU as we sent it).

    With `headers`, the offending segment's layout is known and RFC 5040 s4.8 has the
    Terminate carry its DDP Segment Length (M) and DDP header (D), and for an RDMAP-layer
    error on an RDMA Read Request its 28-octet Read Request header too (R). Without
    (MPA errors: the FPDU itself is not trusted), no header is required; any that is
    included must still be the offending segment's.
    """

    cause: TerminateCause
    source: str  # the RFC table entry the cause comes from
    offending: bytes = b""
    headers: bool = True

    @property
    def offending_is_tagged(self) -> bool:
        return bool(self.offending) and bool(self.offending[0] & 0x80)

    @property
    def offending_header_len(self) -> int:
        return TAGGED_HEADER_LEN if self.offending_is_tagged else UNTAGGED_HEADER_LEN

    @property
    def offending_is_read_request(self) -> bool:
        return (bool(self.offending) and not self.offending_is_tagged
                and self.offending[1] & 0x0F == OPCODE_READ_REQUEST)

    @property
    def wants_m(self) -> bool:
        return self.headers and bool(self.offending)

    @property
    def wants_d(self) -> bool:
        return self.wants_m

    @property
    def wants_r(self) -> bool:
        return (self.wants_d and self.cause.layer is TermLayer.RDMAP
                and self.offending_is_read_request)

    def body(self) -> bytes:
        """The RFC-conformant Terminate body (what follows the DDP header)."""
        c = self.cause
        flags = (FLAG_M if self.wants_m else 0) | (FLAG_D if self.wants_d else 0) | (
            FLAG_R if self.wants_r else 0)
        out = bytes([(int(c.layer) << 4) | c.etype, c.code, flags, 0])
        if self.wants_m or self.wants_d:
            out += struct.pack(">H", len(self.offending))
            out += self.offending[: self.offending_header_len]
        if self.wants_r:
            start = UNTAGGED_HEADER_LEN
            out += self.offending[start: start + READ_REQUEST_BODY_LEN]
        return out

    def ulpdu(self, msn: int = 1) -> bytes:
        """The whole RFC-conformant Terminate ULPDU: untagged DDP header (L, DV 1, RV 1,
        opcode 7; QN 2, this MSN, MO 0), then the body."""
        header = bytes([0x41, 0x40 | OPCODE_TERMINATE]) + struct.pack(">IIII", 0, TERMINATE_QN,
                                                                      msn, 0)
        return header + self.body()

    def describe(self) -> str:
        what = ["M", "D"] if self.wants_m else []
        if self.wants_r:
            what.append("R")
        inc = f" with {'/'.join(what)}" if what else " without headers"
        return f"Terminate {self.cause.describe()}{inc} ({self.source})"


@dataclass(frozen=True)
class TerminateFields:
    """A Terminate ULPDU split by the RFC 5040 s4.8 layout (no field validated)."""

    ddp_control: int
    rsvd_ulp: int
    qn: int
    msn: int
    mo: int
    layer: int
    etype: int
    code: int
    m: bool
    d: bool
    r: bool
    reserved: int  # the 13 reserved bits after M/D/R
    after_control: bytes  # every octet after the Terminate Control field

    @classmethod
    def parse(cls, ulpdu: bytes) -> TerminateFields:
        if len(ulpdu) < UNTAGGED_HEADER_LEN + TERMINATE_CONTROL_LEN:
            raise ValueError(f"{len(ulpdu)} octets cannot hold a DDP header and a Terminate "
                             "Control field")
        ctrl, rsvd, qn, msn, mo = struct.unpack_from(">HIIII", ulpdu)
        b0, code, b2, b3 = ulpdu[UNTAGGED_HEADER_LEN:UNTAGGED_HEADER_LEN + 4]
        return cls(ctrl, rsvd, qn, msn, mo, b0 >> 4, b0 & 0x0F, code, bool(b2 & FLAG_M),
                   bool(b2 & FLAG_D), bool(b2 & FLAG_R), ((b2 & 0x1F) << 8) | b3,
                   ulpdu[UNTAGGED_HEADER_LEN + TERMINATE_CONTROL_LEN:])


@dataclass
class TerminateCheck:
    """The outcome of comparing one received Terminate with the required one."""

    required: RequiredTerminate
    raw_hex: str  # the Terminate FPDU (or ULPDU) as received
    deviations: list[str] = field(default_factory=list)
    #: Sentences explaining deviations (a likely cause), not deviations themselves.
    diagnosis: list[str] = field(default_factory=list)
    fields: TerminateFields | None = None

    @property
    def ok(self) -> bool:
        return not self.deviations

    @property
    def required_hex(self) -> str:
        return self.required.ulpdu().hex()


# ---- header comparison -----------------------------------------------------------------


def _header_fields(header: bytes) -> list[tuple[str, bytes]]:
    """A DDP header's fields as (name, octets), tagged or untagged by its T bit."""
    if header[0] & 0x80:
        return [("DDP/RDMAP control", header[0:2]), ("STag", header[2:6]),
                ("TO", header[6:14])]
    return [("DDP/RDMAP control", header[0:2]), ("RsvdULP", header[2:6]), ("QN", header[6:10]),
            ("MSN", header[10:14]), ("MO", header[14:18])]


_READ_REQUEST_FIELDS = [("sink STag", 0, 4), ("sink TO", 4, 12), ("RDMA Read size", 12, 16),
                        ("source STag", 16, 20), ("source TO", 20, 28)]


def _diff_fields(what: str, got: bytes, want: bytes,
                 fields: Sequence[tuple[str, bytes]] | None = None,
                 want_fields: Sequence[tuple[str, bytes]] | None = None) -> list[str]:
    if got == want:
        return []
    if fields is None or want_fields is None or len(got) != len(want):
        return [f"the {what} is {got.hex()}; the segment we sent has {want.hex()}"]
    out = []
    for (name, g), (_, w) in zip(fields, want_fields):
        if g != w:
            out.append(f"the {what} carries {name} 0x{g.hex()}, the segment we sent has "
                       f"0x{w.hex()}")
    return out


def _read_request_fields(body: bytes) -> list[tuple[str, bytes]]:
    return [(name, body[a:b]) for name, a, b in _READ_REQUEST_FIELDS]


def _check_headers(req: RequiredTerminate, m: bool, d: bool, r: bool, rest: bytes,
                   prefix: str = "") -> list[str]:
    """Checks M/D/R against what the RFC requires, then the octets that follow the
    control field against the offending segment (RFC 5040 s4.8)."""
    out: list[str] = []
    for flag, have, needed, name in (("M", m, req.wants_m, "DDP Segment Length"),
                                     ("D", d, req.wants_d, "terminated DDP header"),
                                     ("R", r, req.wants_r, "terminated RDMA Read Request header")):
        if needed and not have:
            out.append(f"{prefix}the {flag} flag is clear: RFC 5040 s4.8 requires the "
                       f"{name} of the offending segment for this error")
    if r and not d:
        out.append(f"{prefix}R is set without D: the RDMA header only follows a DDP header")
    if (m or d or r) and not req.offending:
        out.append(f"{prefix}header-control flags are set for an error whose segment layout "
                   "is unknown")
    pos = 0
    if m or d:
        if len(rest) < SEGMENT_LENGTH_LEN:
            return out + [f"{prefix}M/D set but the DDP Segment Length field is missing"]
        seg_len = struct.unpack_from(">H", rest)[0]
        pos = SEGMENT_LENGTH_LEN
        if m and req.offending and seg_len != len(req.offending):
            hl = req.offending_header_len
            why = ""
            if seg_len == len(req.offending) - hl:
                why = f" (the payload alone, without the {hl}-octet DDP header)"
            out.append(f"{prefix}the DDP Segment Length is {seg_len}{why}; the offending DDP "
                       f"segment was {len(req.offending)} octets (header and payload, RFC 5040 "
                       "s4.8, RFC 5041 s2)")
        if not m and seg_len != 0:
            out.append(f"{prefix}M is clear but the DDP Segment Length field holds {seg_len}")
    if d:
        if len(rest) <= pos:
            return out + [f"{prefix}D set but no DDP header follows"]
        hl = TAGGED_HEADER_LEN if rest[pos] & 0x80 else UNTAGGED_HEADER_LEN
        header = rest[pos:pos + hl]
        pos += hl
        if len(header) < hl:
            return out + [f"{prefix}the terminated DDP header is cut short ({len(header)} of "
                          f"{hl} octets)"]
        if req.offending:
            want = req.offending[: req.offending_header_len]
            if len(want) != len(header):
                out.append(f"{prefix}the terminated DDP header is {len(header)} octets "
                           f"({header.hex()}); the offending segment's is {len(want)} "
                           f"({want.hex()})")
            else:
                out += [prefix + s for s in _diff_fields(
                    "terminated DDP header", header, want, _header_fields(header),
                    _header_fields(want))]
    if r:
        body = rest[pos:pos + READ_REQUEST_BODY_LEN]
        pos += len(body)
        if len(body) < READ_REQUEST_BODY_LEN:
            out.append(f"{prefix}R is set but only {len(body)} of the 28 octets of an RDMA Read "
                       "Request header follow" + ("" if req.offending_is_read_request else
                                                   " (and the offending segment is no Read "
                                                   "Request)"))
        elif req.offending_is_read_request:
            want = req.offending[UNTAGGED_HEADER_LEN:UNTAGGED_HEADER_LEN + READ_REQUEST_BODY_LEN]
            out += [prefix + s for s in _diff_fields(
                "terminated RDMA Read Request header", body, want, _read_request_fields(body),
                _read_request_fields(want))]
        else:
            out.append(f"{prefix}R is set for a segment that is no RDMA Read Request")
    if pos < len(rest):
        flags = "".join(f for f, on in (("M", m), ("D", d), ("R", r)) if on) or "none"
        out.append(f"{prefix}{len(rest) - pos} octets follow the Terminate beyond what its "
                   f"header-control flags ({flags}) announce: {rest[pos:].hex()}")
    return out


# ---- the check ------------------------------------------------------------------------


def check_terminate(required: RequiredTerminate, ulpdu: bytes, *, raw_fpdu: bytes = b"",
                    crc_ok: bool | None = None, expected_msn: int = 1) -> TerminateCheck:
    """Compares a received Terminate ULPDU with `required`, field by field.

    `raw_fpdu` (the FPDU as it arrived) is what `raw_hex` reports when given; `crc_ok`
    False adds a CRC deviation; `expected_msn` is the MSN the Terminate queue (QN 2) must
    carry: 1 for the first Terminate on the stream (RFC 5041 s4.4)."""
    check = TerminateCheck(required, (raw_fpdu or ulpdu).hex())
    dev = check.deviations
    if crc_ok is False:
        dev.append("the Terminate FPDU's CRC32c does not match its contents (RFC 5044 s4.1)")
    try:
        t = TerminateFields.parse(ulpdu)
    except ValueError as e:
        dev.append(f"the Terminate is malformed: {e}")
        return check
    check.fields = t

    # The Terminate's own DDP header (RFC 5040 s4.8, s5.1; RFC 5041 s4.2, s4.4).
    ctrl_want = 0x4140 | OPCODE_TERMINATE
    if t.ddp_control != ctrl_want:
        dev.append(f"the Terminate's DDP/RDMAP control is 0x{t.ddp_control:04x}, RFC 5040 s4.8 "
                   f"needs 0x{ctrl_want:04x} (untagged, L set, DDP and RDMAP version 1, "
                   "opcode Terminate, reserved bits zero)")
    if t.rsvd_ulp != 0:
        dev.append(f"the Terminate's RsvdULP field is 0x{t.rsvd_ulp:08x}, not zero")
    if t.qn != TERMINATE_QN:
        dev.append(f"the Terminate travels on QN {t.qn}, RFC 5040 s5.1 puts it on QN 2")
    if t.msn != expected_msn:
        dev.append(f"the Terminate's MSN is {t.msn}, the first message on QN 2 has MSN "
                   f"{expected_msn} (RFC 5041 s4.4)")
    if t.mo != 0:
        dev.append(f"the Terminate's MO is {t.mo}, it must be one segment at MO 0")

    # Layer, error type, code (RFC 5040 s7, RFC 5041 s7, RFC 5044 s8).
    want = required.cause
    got_text = _cause_text(t.layer, t.etype, t.code)
    if t.layer != int(want.layer):
        dev.append(f"the Layer is {t.layer}, {required.source} requires {int(want.layer)} "
                   f"({want.layer.name})")
    if t.etype != want.etype:
        dev.append(f"the Error Type is {t.etype}, {required.source} requires {want.etype}")
    if t.code != want.code:
        dev.append(f"the Error Code is 0x{t.code:02x}, {required.source} requires "
                   f"0x{want.code:02x}")
    if (t.layer, t.etype) != (int(want.layer), want.etype):
        if (t.etype, t.layer) == (int(want.layer), want.etype):
            check.diagnosis.append(
                f"octet 0 is 0x{(t.layer << 4) | t.etype:02x}: the required layer "
                f"{int(want.layer)} and type {want.etype} with the two nibbles swapped; read "
                f"by RFC 5040 s4.8 it names {got_text}")
        else:
            check.diagnosis.append(f"read by RFC 5040 s4.8 it names {got_text}")

    # Header-control bits and the headers they announce.
    if t.reserved:
        dev.append(f"reserved bits of the Terminate Control field are set (0x{t.reserved:04x} "
                   "in the 13 bits after M/D/R); RFC 5040 s4.8: zero on transmit")
    dev += _check_headers(required, t.m, t.d, t.r, t.after_control)

    # A common mistake: M/D/R at the low end of octet 2 (little-endian bitfields). Say so,
    # and check what follows as if those bits were the flags, to report its contents too.
    mirrored = t.reserved >> 8 & 0x07
    if mirrored and not (t.m or t.d or t.r) and t.reserved & ~0x0700 == 0:
        m, d, r = bool(mirrored & 1), bool(mirrored & 2), bool(mirrored & 4)
        names = "/".join(n for n, on in (("M", m), ("D", d), ("R", r)) if on)
        check.diagnosis.append(
            f"octet 2 is 0x{mirrored:02x}: {names} encoded at bits 0x01/0x02/0x04 instead of "
            "0x80/0x40/0x20 (bit order reversed within the octet)")
        dev += _check_headers(required, m, d, r, t.after_control,
                              prefix=f"read with {names} from those bits, ")
    return check


# ---- judging the whole answer to a fault ----------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """What the RFCs require of the responder after one fault."""

    #: The Terminate it must send, or None when closing the connection is the answer.
    terminate: RequiredTerminate | None
    #: Terminates it may send although none is required (checked like a required one).
    tolerated: tuple[RequiredTerminate, ...] = ()
    #: One line for the matrix's "expected" field.
    summary: str = ""


@dataclass
class Verdict:
    """The responder's answer to a fault, judged."""

    deviations: list[str] = field(default_factory=list)
    checks: list[TerminateCheck] = field(default_factory=list)
    observed: str = ""
    #: False when nothing at all came back and the stream stayed open: not observable.
    answered: bool = True

    @property
    def conforms(self) -> bool:
        return self.answered and not self.deviations


@dataclass(frozen=True)
class FaultRule:
    """What the RFCs require of a responder for one kind of fault."""

    answer: str  # one line, for the matrix's "expected" field
    cause: TerminateCause | None  # the Terminate required, or None: closing is the answer
    source: str = ""
    headers: bool = True
    #: Terminates allowed (not required) when `cause` is None, with their sources.
    tolerated: tuple[tuple[TerminateCause, str], ...] = ()

    def expectation(self, offending: bytes = b"") -> Expectation:
        """The expectation for this fault in `offending` (the ULPDU as we sent it)."""
        required = None
        if self.cause is not None:
            required = RequiredTerminate(self.cause, self.source, offending, self.headers)
        tolerated = tuple(RequiredTerminate(c, src, b"", headers=False)
                          for c, src in self.tolerated)
        return Expectation(required, tolerated, self.answer)


#: Every fault the kernel cases inject, by name.
RULES: dict[str, FaultRule] = {
    "close_before_rtr": FaultRule(
        "close, with no FPDU: a responder sends nothing before the initiator's first FPDU, "
        "the RTR (RFC 5044 s7.1, RFC 6581 s3)", None),
    "bad_crc": FaultRule(
        "Terminate MPA/CRC error (2/0/0x02), no headers (the FPDU is not trusted), then close",
        MPA_CRC_ERROR, "RFC 5044 s8", headers=False),
    "truncated_fpdu": FaultRule(
        "close (the stream ended inside an FPDU); a Terminate, if any, MPA/TCP connection "
        "lost (2/0/0x01)", None, tolerated=((MPA_CONNECTION_LOST, "RFC 5044 s8"),)),
    "write_invalid_stag": FaultRule(
        "Terminate DDP/tagged buffer/invalid STag (1/1/0x00) with M, D, then close",
        DDP_TAGGED_INVALID_STAG, "RFC 5041 s7"),
    "write_out_of_bounds": FaultRule(
        "Terminate DDP/tagged buffer/base or bounds (1/1/0x01) with M, D, then close",
        DDP_TAGGED_BASE_OR_BOUNDS, "RFC 5041 s7"),
    "read_invalid_stag": FaultRule(
        "Terminate RDMAP/remote protection/invalid STag (0/1/0x00) with M, D, R, then close",
        RDMAP_INVALID_STAG, "RFC 5040 s7"),
    "read_out_of_bounds": FaultRule(
        "Terminate RDMAP/remote protection/base or bounds (0/1/0x01) with M, D, R, then close",
        RDMAP_BASE_OR_BOUNDS, "RFC 5040 s7"),
    "send_without_receive": FaultRule(
        "Terminate DDP/untagged buffer/no buffer available (1/2/0x02) with M, D, then close",
        DDP_UNTAGGED_NO_BUFFER, "RFC 5041 s7"),
}


def judge(expectation: Expectation, obs: Observation) -> Verdict:
    """Judges everything that came back after the fault (`obs`): the Terminate (if one is
    required or sent), anything sent after it, and the close."""
    v = Verdict(observed=obs.describe())
    if not obs.fpdus and obs.end is None:
        v.answered = False
        return v
    terminates = [f for f in obs.fpdus if f.is_terminate]
    if terminates:
        first = terminates[0]
        required = expectation.terminate
        if required is None:
            required = _closest_tolerated(expectation.tolerated, first)
            if required is None:
                v.deviations.append("the responder sent a Terminate where the RFCs require none: "
                                    f"{first.raw.hex()}")
        if required is not None:
            check = check_terminate(required, first.ulpdu, raw_fpdu=first.raw,
                                    crc_ok=first.crc_ok)
            v.checks.append(check)
            v.deviations += check.deviations
        after = obs.fpdus[obs.fpdus.index(first) + 1:]
        if after:
            v.deviations.append(f"{len(after)} FPDU(s) followed the Terminate, which must be the "
                                "last message on the stream (RFC 5040 s5.4): "
                                + ", ".join(f.describe() for f in after))
    elif expectation.terminate is not None:
        v.deviations.append("no Terminate before the close: RFC 5040 s4.8 and the error tables "
                            f"ask for {expectation.terminate.describe()}")
    others = [f for f in obs.fpdus if not f.is_terminate]
    if not terminates and others and expectation.terminate is None:
        v.deviations.append("the responder answered the fault with FPDUs instead of closing: "
                            + ", ".join(f.describe() for f in others))
    if obs.end is None:
        v.deviations.append(f"the responder kept the connection open {obs.waited_s:.1f} s after "
                            "the error (after a Terminate the stream is closed, RFC 5040 s5.4, "
                            "s6.2)")
    return v


def _closest_tolerated(tolerated: Sequence[RequiredTerminate],
                       fpdu: ReceivedFpdu) -> RequiredTerminate | None:
    """The tolerated Terminate whose cause the received one names (by the RFC layout)."""
    try:
        t = TerminateFields.parse(fpdu.ulpdu)
    except ValueError:
        return tolerated[0] if tolerated else None
    for req in tolerated:
        # Also by the swapped nibbles: then check_terminate says exactly what is wrong.
        if t.code == req.cause.code and {(t.layer, t.etype), (t.etype, t.layer)} & {
                (int(req.cause.layer), req.cause.etype)}:
            return req
    return None
