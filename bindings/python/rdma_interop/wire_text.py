"""Frames as a reader of a report wants them: hex dumps, MPA Request/Reply headers and
Terminates field by field, with the RFCs' names.

Pure Python (no _core): the lab report runs on a control machine that has only this
package's source. It never refuses what it is given, a malformed frame included (a finding
needs every field): what does not fit the layout is shown as octets. The cause names are
those of core/wire/wire_error.cc (describe(TerminateCause)); tests/python checks that the
two agree for every layer, type and code.
"""

from __future__ import annotations

import struct

__all__ = ["cause_text", "decode_mpa_frame", "decode_terminate", "hex_dump", "looks_like_mpa"]

_LAYERS = {0: "RDMAP", 1: "DDP", 2: "MPA"}
_ETYPES = {0: {0: "local catastrophic", 1: "remote protection", 2: "remote operation"},
           1: {0: "local catastrophic", 1: "tagged buffer", 2: "untagged buffer"},
           2: {0: "MPA"}}
# RFC 5040 s7 (RDMAP), RFC 5041 s7 (DDP), RFC 5044 s8 and RFC 6581 s5 (MPA).
_RDMAP_CODES = {0x00: "invalid STag", 0x01: "base or bounds violation",
                0x02: "access rights violation", 0x03: "STag not associated with RDMAP stream",
                0x04: "tagged offset wrap", 0x05: "invalid RDMAP version",
                0x06: "unexpected opcode", 0x07: "catastrophic error, localized to stream",
                0x08: "catastrophic error, global", 0x09: "STag cannot be invalidated",
                0xFF: "unspecified error"}
_DDP_TAGGED_CODES = {0x00: "invalid STag", 0x01: "base or bounds violation",
                     0x02: "STag not associated with DDP stream", 0x03: "tagged offset wrap",
                     0x04: "invalid DDP version"}
_DDP_UNTAGGED_CODES = {0x01: "invalid queue number", 0x02: "invalid MSN, no buffer available",
                       0x03: "invalid MSN, MSN range not valid", 0x04: "invalid message offset",
                       0x05: "message too long for receive buffer", 0x06: "invalid DDP version"}
_MPA_CODES = {0x01: "TCP connection lost", 0x02: "received CRC error",
              0x03: "marker and ULPDU length mismatch", 0x04: "invalid MPA Request or Reply",
              0x05: "local catastrophic error", 0x06: "insufficient IRD resources",
              0x07: "no matching RTR model"}
_OPCODES = {0x0: "RDMA Write", 0x1: "RDMA Read Request", 0x2: "RDMA Read Response",
            0x3: "Send", 0x4: "Send with Invalidate", 0x5: "Send with SE",
            0x6: "Send with SE and Invalidate", 0x7: "Terminate"}
MPA_REQUEST_KEY = b"MPA ID Req Frame"
MPA_REPLY_KEY = b"MPA ID Rep Frame"

Field = tuple[str, str, str]  # name, value, meaning


def cause_text(layer: int, etype: int, code: int) -> str:
    """'RDMAP/remote protection/invalid STag (0/1/0x00)', as the C++ describe() says it."""
    code_name = "unknown code"
    if layer == 0:
        code_name = "catastrophic" if etype == 0 else _RDMAP_CODES.get(code, code_name)
    elif layer == 1:
        if etype == 0:
            code_name = "catastrophic"
        elif etype == 1:
            code_name = _DDP_TAGGED_CODES.get(code, code_name)
        elif etype == 2:
            code_name = _DDP_UNTAGGED_CODES.get(code, code_name)
    elif layer == 2:
        code_name = _MPA_CODES.get(code, code_name)
    return (f"{_LAYERS.get(layer, 'unknown layer')}/"
            f"{_ETYPES.get(layer, {}).get(etype, 'unknown type')}/{code_name} "
            f"({layer}/{etype}/0x{code:02x})")


def hex_dump(data: bytes) -> str:
    """16 octets a line: offset, hex in two groups of 8, the printable ASCII."""
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        left = " ".join(f"{b:02x}" for b in chunk[:8])
        right = " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk)
        lines.append(f"{off:04x}  {left:<23}  {right:<23}  |{text}|")
    return "\n".join(lines)


def looks_like_mpa(data: bytes) -> bool:
    return data[:16] in (MPA_REQUEST_KEY, MPA_REPLY_KEY)


def decode_mpa_frame(data: bytes) -> list[Field]:
    """An MPA Request or Reply (RFC 5044 s7.1; RFC 6581 s3's IRD/ORD words)."""
    out: list[Field] = []
    if len(data) < 20:
        return [("frame", data.hex(), f"{len(data)} octets: shorter than an MPA header (20)")]
    key = data[:16]
    kind = {MPA_REQUEST_KEY: "Request", MPA_REPLY_KEY: "Reply"}.get(key, "unknown key")
    out.append(("Key", key.decode("ascii", "replace"), f"MPA {kind}"))
    flags = data[16]
    names = [n for n, bit in (("M", 0x80), ("C", 0x40), ("R", 0x20), ("enhanced", 0x10))
             if flags & bit]
    out.append(("flags", f"0x{flags:02x}", ", ".join(names) or "none"))
    if flags & 0x0F:
        out.append(("reserved bits", f"0x{flags & 0x0F:x}",
                    "set (RFC 5044 s7.1: zero when sending)"))
    rev = data[17]
    out.append(("Rev", str(rev), {1: "revision 1", 2: "revision 2 (RFC 6581)",
                                  129: "erdma's revision 129"}.get(rev, "unknown revision")))
    (pd_len,) = struct.unpack_from(">H", data, 18)
    pd = data[20:]
    out.append(("PD_Length", str(pd_len), f"{len(pd)} octets follow"))
    if rev == 2 and flags & 0x10 and len(pd) >= 4:
        ird, ord_ = struct.unpack_from(">HH", pd)
        rtr = [n for n, on in (("Send", ird & 0x4000), ("Write", ord_ & 0x8000),
                               ("Read", ord_ & 0x4000)) if on]
        out.append(("IRD", str(ird & 0x3FFF), "peer-to-peer" if ird & 0x8000 else
                    "not peer-to-peer"))
        out.append(("ORD", str(ord_ & 0x3FFF), "RTR " + "/".join(rtr) if rtr else "no RTR type"))
        pd = pd[4:]
    if pd:
        out.append(("private data", pd[:64].hex() + ("..." if len(pd) > 64 else ""),
                    repr(pd[:64].decode("ascii", "replace"))))
    return out


def _ddp_header(header: bytes) -> str:
    if not header:
        return ""
    if header[0] & 0x80 and len(header) >= 14:
        stag, to = struct.unpack_from(">IQ", header, 2)
        return f"tagged: ctrl {header[:2].hex()}, STag 0x{stag:08x}, TO 0x{to:x}"
    if len(header) >= 18:
        _, qn, msn, mo = struct.unpack_from(">IIII", header, 2)
        return (f"untagged: ctrl {header[:2].hex()} ({_OPCODES.get(header[1] & 0x0F, '?')}), "
                f"QN {qn}, MSN {msn}, MO {mo}")
    return f"{len(header)} octets: {header.hex()}"


def decode_terminate(data: bytes) -> list[Field]:
    """A Terminate, FPDU (with its MPA length, pad and CRC) or bare ULPDU, by the RFC 5040
    s4.8 layout. Fields that do not fit are shown as octets, never refused."""
    out: list[Field] = []
    ulpdu = data
    length = struct.unpack_from(">H", data)[0] if len(data) >= 2 else 0
    # An FPDU: its length fits, and what follows is an RDMAP control naming a Terminate.
    if len(data) >= 4 and 2 + length <= len(data) and data[3] & 0x0F == 0x7:
        ulpdu = data[2:2 + length]
        out.append(("ULPDU_Length", str(length), "MPA framing (RFC 5044 s4)"))
        rest = data[2 + length:]
        pad = (4 - (2 + length) % 4) % 4
        if len(rest) >= pad + 4:
            out.append(("CRC32c", rest[pad:pad + 4].hex(), f"after {pad} pad octet(s)"))
        elif rest:
            out.append(("trailer", rest.hex(), "pad, no CRC"))
    if len(ulpdu) < 22:
        out.append(("octets", ulpdu.hex(), f"{len(ulpdu)} octets: too short for a Terminate"))
        return out
    c0, c1 = ulpdu[0], ulpdu[1]
    ctrl = [f"T={c0 >> 7}", f"L={c0 >> 6 & 1}", f"DV={c0 & 3}", f"RV={c1 >> 6}",
            f"opcode {c1 & 0x0F} ({_OPCODES.get(c1 & 0x0F, 'reserved')})"]
    out.append(("DDP/RDMAP control", ulpdu[:2].hex(), ", ".join(ctrl)))
    rsvd, qn, msn, mo = struct.unpack_from(">IIII", ulpdu, 2)
    out.append(("QN / MSN / MO", f"{qn} / {msn} / {mo}",
                "RFC 5040 s5.1: QN 2, one segment at MO 0" + (
                    f"; RsvdULP 0x{rsvd:08x}" if rsvd else "")))
    t0, code, t2, t3 = ulpdu[18:22]
    layer, etype = t0 >> 4, t0 & 0x0F
    out.append(("Layer / EType / Code", f"{layer} / {etype} / 0x{code:02x}",
                cause_text(layer, etype, code)))
    m, d, r = bool(t2 & 0x80), bool(t2 & 0x40), bool(t2 & 0x20)
    reserved = ((t2 & 0x1F) << 8) | t3
    out.append(("M / D / R", f"{int(m)} / {int(d)} / {int(r)}",
                "header-control flags" + (f"; reserved bits 0x{reserved:04x} set (RFC 5040 "
                                          "s4.8: zero)" if reserved else "")))
    rest = ulpdu[22:]
    if m or d:
        if len(rest) >= 2:
            (seg_len,) = struct.unpack_from(">H", rest)
            out.append(("DDP Segment Length", str(seg_len), "of the offending segment"))
            rest = rest[2:]
    if d and rest:
        hl = 14 if rest[0] & 0x80 else 18
        out.append(("terminated DDP header", rest[:hl].hex(), _ddp_header(rest[:hl])))
        rest = rest[hl:]
    if r and rest:
        out.append(("terminated RDMA Read Request header", rest[:28].hex(), "28 octets"))
        rest = rest[28:]
    if rest:
        out.append(("following octets", rest.hex(),
                    f"{len(rest)} octet(s) beyond what M/D/R announce"))
    return out
