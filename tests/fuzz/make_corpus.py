#!/usr/bin/python3
"""Writes the fuzzers' seed corpus: tests/fuzz/corpus/<fuzzer>/<name>.

Every input is written by hand from the RFC layouts (RFC 5044 s4 and s7.1, RFC 6581 s3,
RFC 5041 s4, RFC 5040 s4), independently of core/, so the seeds also check the codecs'
reading of the RFCs; the telemetry snapshots follow their documented layout
(core/telemetry/listener_snapshot.h). Each fuzzer gets a few valid inputs (to reach deep
code at once) and a few invalid ones (one per error path worth starting from). The leading
configuration octets follow each harness's "Input:" comment.

Run from anywhere: /usr/bin/python3 tests/fuzz/make_corpus.py. Stdlib only. The output is
deterministic and committed; rerun after changing a harness's input format.
"""

import json
import pathlib
import shutil
import struct

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE / "corpus"


def be16(v):
    return struct.pack(">H", v)


def be32(v):
    return struct.pack(">I", v)


def be64(v):
    return struct.pack(">Q", v)


# ---- CRC32c (RFC 5044 s4.1, the iSCSI polynomial, reflected 0x82F63B78) ----------------
def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283

# ---- MPA Request/Reply frames (RFC 5044 s7.1, RFC 6581 s3) ---------------------------
REQ_KEY = b"MPA ID Req Frame"
REP_KEY = b"MPA ID Rep Frame"
M, C, R, E = 0x80, 0x40, 0x20, 0x10


def mpa(key, flags, rev, pd, pd_length=None):
    return key + bytes([flags, rev]) + be16(len(pd) if pd_length is None else pd_length) + pd


def ird_ord(p2p=False, rtr_send=False, rtr_write=False, rtr_read=False, ird=0, ord_=0):
    ird_word = (0x8000 if p2p else 0) | (0x4000 if rtr_send else 0) | ird
    ord_word = (0x8000 if rtr_write else 0) | (0x4000 if rtr_read else 0) | ord_
    return be16(ird_word) + be16(ord_word)


def mpa_corpus():
    strict_rfc = b"\x00\x00"  # [limits][pd_limit]: strict, PD limit 512
    lenient = b"\x01\x00"
    linux_limit = b"\x02\x00"  # PD limit 256
    tiny_limit = b"\x04\x02"  # PD limit 2*4 = 8
    enh = ird_ord(p2p=True, rtr_write=True, rtr_read=True, ird=16, ord_=16)
    return {
        "valid_req_rev1_crc": strict_rfc + mpa(REQ_KEY, C, 1, b""),
        "valid_req_rev1_markers_pd": strict_rfc + mpa(REQ_KEY, M | C, 1, b"hello"),
        "valid_req_rev2_enhanced_p2p": strict_rfc + mpa(REQ_KEY, C | E, 2, enh + b"app-data"),
        "valid_rep_rev2_rtr_send": linux_limit
        + mpa(REP_KEY, C | E, 2, ird_ord(p2p=True, rtr_send=True, ird=4, ord_=4)),
        "valid_rep_reject": strict_rfc + mpa(REP_KEY, R, 1, b"go away"),
        "valid_lenient_reserved_bits": lenient + mpa(REP_KEY, C | 0x05, 2, b""),
        "invalid_bad_key": strict_rfc + mpa(b"MPA ID Req Frams", C, 1, b""),
        "invalid_truncated_header": strict_rfc + REQ_KEY + b"\x40",
        "invalid_truncated_pd": strict_rfc + mpa(REQ_KEY, C, 1, b"abc", pd_length=8),
        "invalid_trailing_bytes": strict_rfc + mpa(REQ_KEY, C, 1, b"abc", pd_length=2),
        "invalid_revision_3": strict_rfc + mpa(REQ_KEY, C, 3, b""),
        "invalid_reserved_bits_strict": strict_rfc + mpa(REQ_KEY, C | 0x01, 1, b""),
        "invalid_reject_in_request": strict_rfc + mpa(REQ_KEY, R, 2, b""),
        "invalid_enhanced_rev1": strict_rfc + mpa(REQ_KEY, E, 1, enh),
        "invalid_enhanced_short_pd": strict_rfc + mpa(REQ_KEY, E, 2, b"\x80\x00"),
        "invalid_pd_over_limit": tiny_limit + mpa(REQ_KEY, C, 1, b"123456789"),
        # erdma (erdma_cm.h): revision 129, {be32 cookie, be32 bits} after the header and
        # outside PD_Length; bit 3 of the limits octet accepts it.
        "valid_erdma_rev129_ext": b"\x08\x00" + mpa(REQ_KEY, 0, 129, b"", pd_length=3)
        + be32(0x1234) + be32(1) + b"pd!",
        "invalid_erdma_rev129_not_accepted": strict_rfc + mpa(REQ_KEY, 0, 129, b""),
        # siw's GSO bit (0x08) and Chelsio's FPDU-size bits (0x0c): extensions, kept by a
        # strict receiver.
        "valid_strict_fpdu_size_bits": strict_rfc + mpa(REP_KEY, C | 0x0c, 1, b""),
    }


# ---- DDP segments with the RDMAP control octet (RFC 5041 s4, RFC 5040 s4) -------------
WRITE, READ_REQ, READ_RESP, SEND, SEND_INV, SEND_SE, SEND_SE_INV, TERMINATE = range(8)


def tagged(opcode, stag, to, last=True, dv=1, rv=1):
    return bytes([0x80 | (0x40 if last else 0) | dv, rv << 6 | opcode]) + be32(stag) + be64(to)


def untagged(opcode, qn, msn, mo=0, last=True, inv_stag=0, dv=1, rv=1):
    ctrl = bytes([(0x40 if last else 0) | dv, rv << 6 | opcode])
    return ctrl + be32(inv_stag) + be32(qn) + be32(msn) + be32(mo)


def read_request_body(sink_stag=0x1234, sink_to=0x1000, size=4096, src_stag=0x5678, src_to=0x2000):
    return be32(sink_stag) + be64(sink_to) + be32(size) + be32(src_stag) + be64(src_to)


def terminate_body(layer, etype, code, seg_len=None, ddp_header=b"", rdmap_header=b"",
                   r_flag=False, reserved=0):
    ctrl = (0x80 if seg_len is not None else 0) | (0x40 if ddp_header else 0) | (0x20 if r_flag else 0)
    out = bytes([layer << 4 | etype, code, ctrl | reserved, 0])
    if seg_len is not None or ddp_header:
        out += be16(seg_len or 0) + ddp_header + rdmap_header
    return out


def ddp_corpus():
    rr_header = untagged(READ_REQ, 1, 7)
    term = terminate_body(1, 2, 0x01, seg_len=20, ddp_header=untagged(SEND, 3, 9))
    return {
        "valid_send": untagged(SEND, 0, 1) + b"hello world",
        "valid_send_zero_length_rtr": untagged(SEND, 0, 1),
        "valid_send_invalidate_se": untagged(SEND_SE_INV, 0, 2, inv_stag=0xABCD) + b"x" * 8,
        "valid_send_middle_segment": untagged(SEND, 0, 3, mo=1024, last=False) + b"y" * 16,
        "valid_rdma_write": tagged(WRITE, 0xDEADBEEF, 0x100000000) + b"payload!",
        "valid_read_response": tagged(READ_RESP, 0x1234, 0x1000, last=False) + b"z" * 32,
        "valid_read_request": rr_header + read_request_body(),
        "valid_terminate": untagged(TERMINATE, 2, 1) + term,
        "valid_reserved_bits_ignored": bytes([0x41 | 0x3C, 0x43 | 0x30]) + untagged(SEND, 0, 1)[2:],
        "invalid_truncated": untagged(SEND, 0, 1)[:9],
        "invalid_ddp_version": untagged(SEND, 0, 1, dv=2),
        "invalid_tagged_ddp_version": tagged(WRITE, 1, 0, dv=0),
        "invalid_rdmap_version": untagged(SEND, 0, 1, rv=2),
        "invalid_reserved_opcode": untagged(9, 0, 1),
        "invalid_send_tagged": tagged(SEND, 1, 0),
        "invalid_write_untagged": untagged(WRITE, 0, 1),
        "invalid_queue_number": untagged(SEND, 3, 1),
        "invalid_read_request_wrong_queue": untagged(READ_REQ, 0, 1) + read_request_body(),
        "invalid_read_request_short": rr_header + read_request_body()[:20],
        "invalid_read_request_not_last": untagged(READ_REQ, 1, 7, last=False) + read_request_body(),
        "invalid_terminate_offset": untagged(TERMINATE, 2, 1, mo=4) + term,
    }


def terminate_corpus():
    send_hdr = untagged(SEND, 0, 5)
    rr_hdr = untagged(READ_REQ, 1, 6)
    write_hdr = tagged(WRITE, 0x77, 0x1000)
    return {
        "valid_llp_crc_error": terminate_body(2, 0, 0x02),
        "valid_ddp_untagged_msn": terminate_body(1, 2, 0x03, seg_len=18, ddp_header=send_hdr),
        "valid_ddp_tagged_invalid_stag": terminate_body(1, 1, 0x00, seg_len=1038, ddp_header=write_hdr),
        "valid_rdmap_read_request": terminate_body(0, 1, 0x00, seg_len=46, ddp_header=rr_hdr,
                                                   rdmap_header=read_request_body(), r_flag=True),
        "valid_siw_send_r_flag": terminate_body(0, 2, 0x06, seg_len=18, ddp_header=send_hdr, r_flag=True),
        "valid_m_only": terminate_body(1, 2, 0x05, seg_len=4000),
        "invalid_truncated": b"\x20\x02\x00",
        "invalid_layer_3": terminate_body(3, 0, 0),
        "invalid_reserved_ctrl_bits": terminate_body(2, 0, 0x02, reserved=0x01),
        "invalid_r_without_d": terminate_body(0, 2, 0x06, r_flag=True),
        "invalid_header_truncated": terminate_body(1, 2, 0x03, seg_len=18, ddp_header=send_hdr)[:15],
        "invalid_rr_body_truncated": terminate_body(0, 1, 0x00, seg_len=46, ddp_header=rr_hdr,
                                                    rdmap_header=read_request_body()[:10], r_flag=True),
        "invalid_trailing_bytes": terminate_body(2, 0, 0x02) + b"\x00\x00",
    }


# ---- FPDU streams (RFC 5044 s4: length, pad, markers every 512 octets, CRC) ------------
def fpdu_stream(ulpdus, crc=True, markers=False, bad_crc=False, marker_ptr_delta=0):
    """Frames ULPDUs into one direction's FPDU stream, which starts at stream octet 0."""
    out = bytearray()

    def marker(ptr):
        return b"\x00\x00" + be16(ptr)

    for ulpdu in ulpdus:
        start = len(out)
        fpdu = bytearray()
        # RFC 5044 s4.3: a marker at the FPDU's first octet points at this FPDU (0).
        length_pos = start + (4 if markers and start % 512 == 0 else 0)
        pad = (4 - (2 + len(ulpdu)) % 4) % 4
        for octet in be16(len(ulpdu)) + ulpdu + b"\x00" * pad:
            pos = start + len(fpdu)
            if markers and pos % 512 == 0:
                fpdu += marker((0 if pos == start else pos - length_pos) + marker_ptr_delta)
            fpdu.append(octet)
        pos = start + len(fpdu)
        if markers and pos % 512 == 0:  # a marker due before the CRC is part of this FPDU
            fpdu += marker(pos - length_pos + marker_ptr_delta)
        value = crc32c(fpdu) if crc else 0
        if bad_crc:
            value ^= 1
        fpdu += struct.pack("<I", value)  # least significant octet first, as siw sends it
        out += fpdu
    return bytes(out)


def fpdu_header(crc, markers, constructed=False, max_class=0, piece_class=7, max_ulpdu=0,
                seed=0, corrupt_at=0, corrupt_xor=0):
    flags = (1 if crc else 0) | (2 if markers else 0) | (4 if constructed else 0)
    flags |= (max_class & 3) << 3 | (piece_class & 7) << 5
    return bytes([flags]) + be16(max_ulpdu) + bytes([seed]) + be16(corrupt_at) + bytes([corrupt_xor])


def fpdu_corpus():
    send = untagged(SEND, 0, 1) + b"hello"
    big = untagged(SEND, 0, 2) + bytes(range(256)) * 3  # crosses markers
    rtr = untagged(SEND, 0, 3)
    write = tagged(WRITE, 0x99, 0x4000) + b"w" * 100
    two = [send, write]
    return {
        "valid_crc_one_fpdu": fpdu_header(True, False) + fpdu_stream([send]),
        "valid_crc_pieces_of_3": fpdu_header(True, False, piece_class=2, seed=7)
        + fpdu_stream(two + [rtr]),
        "valid_nocrc": fpdu_header(False, False, piece_class=4) + fpdu_stream(two, crc=False),
        "valid_markers_crc": fpdu_header(True, True, piece_class=5, seed=3)
        + fpdu_stream([send, big, rtr, big], markers=True),
        "valid_markers_nocrc": fpdu_header(False, True, piece_class=0)
        + fpdu_stream([big, send], crc=False, markers=True),
        "invalid_crc": fpdu_header(True, False) + fpdu_stream([send, write], bad_crc=True),
        "invalid_ulpdu_too_short": fpdu_header(True, False) + fpdu_stream([b"\x41\x43\x00"]),
        "invalid_ulpdu_too_long": fpdu_header(True, False, max_class=2, max_ulpdu=0)
        + fpdu_stream([write]),
        "invalid_marker_pointer": fpdu_header(True, True, piece_class=3)
        + fpdu_stream([big, big], markers=True, marker_ptr_delta=4),
        "invalid_marker_reserved": fpdu_header(False, True)
        + b"\x00\x01\x00\x00" + fpdu_stream([send], crc=False),
        "partial_fpdu": fpdu_header(True, False, piece_class=1) + fpdu_stream([send, big])[:300],
        # Constructed: [fill][length(16)][literal...] records framed by FpduEncoder.
        "constructed_markers_crc": fpdu_header(True, True, constructed=True, piece_class=5)
        + b"\x80" + be16(len(big)) + big + b"\x01" + be16(2000) + b"\xff" + be16(18),
        "constructed_crc_corrupt": fpdu_header(True, False, constructed=True, piece_class=6,
                                              corrupt_at=30, corrupt_xor=0x10)
        + b"\x40" + be16(len(send)) + send + b"\x20" + be16(len(write)) + write,
        "constructed_small_mulpdu": fpdu_header(False, True, constructed=True, max_class=2,
                                               max_ulpdu=100, piece_class=3)
        + b"\x10" + be16(60) + b"\x30" + be16(200) + b"\x50" + be16(118),
    }


# ---- engines: MpaHandshake and RdmapEndpoint ------------------------------------------
def handshake_corpus():
    # [policy octet][decision octet][chunk seed, 16 bits] then the peer's octets.
    # 0x40: revision 2, CRC wanted, peer-to-peer on, PD limit 256; decision bit 0: initiator.
    responder, initiator = b"\x40\x00\x00\x07", b"\x40\x01\x00\x07"
    request = mpa(REQ_KEY, C | E, 2, ird_ord(p2p=True, rtr_write=True, ird=8, ord_=8) + b"fz")
    reply = mpa(REP_KEY, C | E, 2, ird_ord(p2p=True, rtr_read=True, ird=8, ord_=8) + b"ok")
    write_rtr = fpdu_stream([tagged(WRITE, 0, 0)], crc=True)
    read_response = fpdu_stream([tagged(READ_RESP, 0, 0)], crc=True)
    return {
        "valid_responder_write_rtr": responder + request + write_rtr,
        "valid_initiator_read_rtr": initiator + reply + read_response,
        "responder_rev1_request": b"\x00\x00\x00\x01" + mpa(REQ_KEY, C, 1, b"rev1"),
        "responder_garbage": responder + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "initiator_reject": initiator + mpa(REP_KEY, R, 2, b"busy"),
        "responder_wrong_rtr": responder + request + fpdu_stream([untagged(SEND, 0, 1)], crc=True),
        # Decision bits 4-6: a live stack's departures (mpa_policy.h).
        "irdma_responder_without_p2p": b"\x40\x10\x00\x07"
        + mpa(REQ_KEY, C | E, 2, ird_ord(ird=8, ord_=8)),
        "cxgb4_responder_own_type": b"\x40\x20\x00\x07" + request
        + fpdu_stream([tagged(WRITE, 0, 0)], crc=True),
        "erdma_responder_rev129": b"\x00\x50\x00\x07"
        + mpa(REQ_KEY, 0, 129, b"", pd_length=2) + be32(7) + be32(1) + b"fz",
        "erdma_initiator_rev2_reply": b"\x00\x51\x00\x07" + reply,
    }


def endpoint_corpus():
    # [config octet] then ULPDUs, each a 16-bit length and its octets. 0x20: rebase tagged
    # offsets into the harness's regions (STag 1: remote region, 2: local region).
    def ulpdus(*items):
        return b"\x25" + b"".join(be16(len(u)) + u for u in items)
    return {
        "send_then_write": ulpdus(untagged(SEND, 0, 1) + b"x" * 100,
                                  tagged(WRITE, 1, 0x10) + b"y" * 300),
        "read_request_then_responses": ulpdus(
            untagged(READ_REQ, 1, 1) + read_request_body(9, 0, 512, 1, 0),
            tagged(READ_RESP, 2, 0, last=False) + b"z" * 500,
            tagged(READ_RESP, 2, 500) + b"z" * 524),
        "write_past_the_end": ulpdus(tagged(WRITE, 1, 0xff0) + b"w" * 64),
        "send_with_invalidate": ulpdus(untagged(SEND_INV, 0, 1, inv_stag=1) + b"i",
                                       tagged(WRITE, 1, 0) + b"after"),
        "terminate": ulpdus(untagged(TERMINATE, 2, 1) + terminate_body(0, 1, 0)),
        "multi_segment_send": ulpdus(untagged(SEND, 0, 1, mo=0, last=False) + b"a" * 200,
                                     untagged(SEND, 0, 1, mo=200) + b"b" * 100),
    }


def credit_corpus():
    # [window][initial][control][queue depth] then one-octet operations (credit_window_fuzzer.cc):
    # 0 message (length, octets), 1 post data receive, 2 post control receive, 3 send,
    # 4 standalone update, 5 send completion (next octet: 0 data, 1 control).
    def header(control=False, returned=0, grant=0):
        return bytes([0x10 | (0x01 if control else 0), returned]) + be16(grant)
    def message(octets):
        return b"\x00" + bytes([len(octets)]) + octets
    config = bytes([7, 4, 1, 10])
    return {
        "send_and_grant": config + b"\x03\x03" + message(header(grant=2) + b"hello")
                          + b"\x05\x00\x01\x01\x04",
        "standalone_update": config + message(header(control=True, grant=3)) + b"\x02\x03",
        "overrun": config + message(header() + b"x") * 9,
        "bad_version": config + message(b"\x20\x00\x00\x01"),
        "control_with_payload": config + message(header(control=True) + b"p"),
    }


def peer_channel_corpus():
    # [window][control][queue depth][queue limit][reserve][flags] then one-octet operations
    # (peer_channel_fuzzer.cc): 0 a peer message (length, octets), 1 send (length), 2 reply,
    # 3 hold, 4 release, 5 a send completes (flushed bit), 6 flush, 7 refuse the next post,
    # 8 closed or failed, 9 a receive completes in error, 10 delivered, 11 send with a tagged
    # write (length, write length / 97).
    def header(control=False, returned=0, grant=0):
        return bytes([0x10 | (0x01 if control else 0), returned]) + be16(grant)
    def message(octets):
        return b"\x00" + bytes([len(octets)]) + octets
    # window 4, 1 control receive, queue depth 6, limit 4, reserve 1; the peer's window 4
    config = bytes([3, 0, 1, 4, 1, 6])
    return {
        "request_reply": config + message(header() + b"q") + b"\x02\x00\x05\x00\x06",
        "send_until_try_again": config + b"\x01\x08" * 10 + message(header(grant=3)) + b"\x06",
        "hold_then_release": config + message(header() + b"a") + b"\x03\x00\x06\x04\x00\x06",
        "liar_grant": config + message(header(grant=0x4000)),
        "liar_return": config + message(header(returned=9)),
        "overrun": config + message(header() + b"x") * 6,
        "control_with_payload": config + message(header(control=True) + b"p"),
        "refused_post": config + b"\x07\x01\x04",
        "peer_closes_with_held": config + message(header() + b"a") + b"\x03\x00\x08\x00\x04\x00",
        "rogue_ignores_credits": bytes([3, 0, 1, 4, 1, 7]) + b"\x01\x04" * 8,
        "writes_until_queued": config + b"\x0b\x08\x0a" * 4 + b"\x05\x00\x06",
        "refused_write": config + b"\x07\x0b\x08\x0a\x06",
    }


def stream_session_corpus():
    # [side][no regions] then one-octet operations (stream_session_fuzzer.cc): 0 a peer
    # message (u16 length, octets), 1 a peer frame from fields (type, flags, stream, u16[, data]),
    # 2 open, 3 accept, 4 send (u16 length: bit 0 urgent, bit 1 borrowed first), 5 recv,
    # 6 shutdown, 7 close, 8 link blocked/ready, 9 end.
    def frame(ftype, stream, body, flags=0):
        return bytes([ftype, flags, 0, 0]) + be32(stream) + be32(len(body)) + body
    def message(octets):
        return b"\x00" + be16(len(octets)) + octets
    open_2 = frame(1, 2, be16(0) + be16(0) + be32(65536))  # the connector's peer opens 2
    return {
        "open_accept_echo": b"\x00\x00" + message(open_2) + b"\x03\x00"
            + message(frame(4, 2, b"hello")) + b"\x05\x03\x00\x10\x00"
            + b"\x04\x03\x00\x05",
        "open_send_large": b"\x00\x00\x02\x00\x04\x03\x10\x00"
            + message(frame(2, 1, be32(65536))) + b"\x04\x03\x10\x00",
        "sink_and_placed": b"\x01\x00" + message(frame(1, 1, be16(0) + be16(0) + be32(65536)))
            + b"\x03\x00" + message(frame(4, 1, b"x" * 600, flags=2))
            + message(frame(7, 1, be32(100))) + b"\x05\x03\x04\x00\x00",
        "window_liar": b"\x00\x00\x02\x00" + message(frame(5, 1, be32(0) + be32(99))),
        "urgent": b"\x01\x00" + message(frame(1, 1, be16(0) + be16(0) + be32(65536)))
            + b"\x03\x00" + message(frame(8, 1, be32(0) + be32(0) + b"!"))
            + b"\x05\x03\x00\x01\x01",
        "half_close_then_end": b"\x00\x00\x02\x00\x06\x03\x09",
        # Opened, accepted, a SINK: a 1026-octet send (bit 1) goes by a borrowed Write.
        "borrowed_write": b"\x00\x00\x02\x00" + message(frame(2, 1, be32(65536)))
            + message(frame(6, 1, be32(1) + be32(0) + be32(0) + be32(0) + be32(4096)))
            + b"\x04\x00" + be16(1026),
        # The same, until the 4096-octet sink is full: the next large send waits for the reader.
        "reader_waits": b"\x00\x00\x02\x00" + message(frame(2, 1, be32(65536)))
            + message(frame(6, 1, be32(1) + be32(0) + be32(0) + be32(0) + be32(4096)))
            + (b"\x04\x00" + be16(1026)) * 5,
    }


def credit_params_corpus():
    # The MPA private data as the peer sent it (credit_params_fuzzer.cc): magic "RICR",
    # version, control receives, receive window, initial receives, reply reserve, max message.
    def params(window=16, initial=16, control=2, max_message=4100, magic=b"RICR", version=1,
               reply_reserve=0):
        return magic + bytes([version, control]) + be16(window) + be16(initial) + be16(reply_reserve) \
            + be32(max_message)
    return {
        "valid_defaults": params(),
        "valid_with_app_data": params(window=64, initial=8, control=4) + b"node2",
        "valid_extremes": params(window=0xFFFF, initial=0xFFFF, control=0xFF, max_message=0xFFFFFFFF),
        "valid_smallest": params(window=1, initial=0, control=1, max_message=4),
        "valid_reply_reserve": params(reply_reserve=1),
        "valid_reply_reserve_over_window": params(reply_reserve=0xBEEF),
        "invalid_short": params()[:15],
        "invalid_magic": params(magic=b"RICX"),
        "invalid_version": params(version=2),
        "invalid_no_control": params(control=0),
        "invalid_no_window": params(window=0, initial=0),
        "invalid_initial_over_window": params(window=4, initial=5),
        "invalid_max_message_below_header": params(max_message=3),
        "mpa_style_app_data": b"hello from a peer without credits",
    }


def probe_answer_corpus():
    # What an address answered rdma-probe's MPA Request (probe_answer_fuzzer.cc): the first
    # octet picks where the answer is cut for the part-way classification.
    rep2 = mpa(REP_KEY, E, 2, ird_ord(p2p=True, rtr_write=True, ird=16, ord_=16) + b"siw")
    return {
        "reply_rev2_p2p": b"\x20" + rep2,
        "reply_rev1_crc": b"\x05" + mpa(REP_KEY, C, 1, b"rev1-only"),
        "reject_backlog_full": b"\x10" + mpa(REP_KEY, R, 2, b"rdma-interop:backlog-full"),
        "reply_reserved_echoed": b"\x03" + mpa(REP_KEY, E | 0x0F, 2, ird_ord(ird=16, ord_=16)),
        "reply_then_fpdu": b"\x30" + rep2 + b"\x00\x12" + b"\x00" * 20,
        "request_key": b"\x08" + mpa(REQ_KEY, E, 2, ird_ord(ird=1, ord_=1)),
        "bad_revision": b"\x01" + mpa(REP_KEY, 0, 7, b""),
        # erdma's revision 129: 8 octets {cookie, bits} after the header, outside PD_Length.
        "reply_erdma_rev129": b"\x18" + mpa(REP_KEY, 0, 129, b"", pd_length=5) + be32(0x51)
        + be32(1) + b"erdma",
        "pd_too_long": b"\x14" + mpa(REP_KEY, 0, 1, b"", pd_length=600),
        "http_400": b"\x04" + b"HTTP/1.0 400 Bad request syntax\r\n\r\n",
        "http_09_page": b"\x02" + b"<!DOCTYPE HTML>\n<html lang=\"en\">",
        "ssh_banner": b"\x00" + b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
        "tls_alert": b"\x01" + bytes([0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46]),
        "half_key": b"\x07" + REP_KEY[:9],
    }


def telemetry_snapshot_corpus():
    # A run-directory snapshot file as a publisher writes it (core/telemetry/
    # listener_snapshot.h and connection_snapshot.h; telemetry_snapshot_fuzzer.cc takes the
    # whole input as the file). Written from the documented layout with json.dumps, not by
    # core/, and then the ways a hostile writer of the directory bends it.
    backlog = ["backlog", "pending", "high_water", "requests", "accepted", "rejected_by_app",
               "pending_expired", "pending_aborted", "overflow_rejected", "overflow_waiting",
               "overflow_dropped", "half_open", "half_open_limit", "half_open_opened",
               "half_open_completed", "half_open_expired", "half_open_aborted",
               "half_open_evicted"]
    credit = ["credits", "control_credits", "data_slots_in_use", "control_slots_in_use",
              "credits_granted_total", "sent", "updates_sent", "stalls_no_credit",
              "stalls_no_slot", "update_stalls", "posted", "granted", "pending_grant",
              "control_posted", "control_return_pending", "granted_total", "received",
              "updates_received"]

    def listener(address="127.0.0.1:7174", overflow="drop", **counters):
        c = {name: i for i, name in enumerate(backlog)}
        c.update(counters)
        return {"local_address": address, "scheme": "tcp", "overflow": overflow, "counters": c}

    def connection(peer="node2", state="connected", **figures):
        c = {"local_address": "198.18.0.1:40122", "peer_address": "198.18.0.2:7300",
             "scheme": "tcp", "peer": peer, "state": state, "queued": 3, "queue_limit": 64,
             "held": 1, "refused": 12, "credit": {name: i for i, name in enumerate(credit)}}
        c.update(figures)
        return c

    def snapshot(listeners=None, connections=None, **fields):
        doc = {"schema": "rdma-interop/telemetry/1", "pid": 4242, "process": "rdma-probe",
               "sequence": 17, "monotonic_ns": 123456789, "wall_ms": 1718000000000,
               "listeners": [listener()] if listeners is None else listeners}
        if connections is not None:
            doc["connections"] = connections
        doc.update(fields)
        return json.dumps(doc).encode()

    return {
        "valid_listeners": snapshot(listeners=[listener(), listener("[::1]:7175", "reject"),
                                               listener("0.0.0.0:7176", None)]),
        "valid_connections": snapshot(listeners=[], connections=[connection(),
                                                                 connection("node3", "failed")]),
        "valid_no_connections_key": snapshot(),
        "valid_extremes": snapshot(pid=2147483647, sequence=18446744073709551615,
                                   monotonic_ns=9223372036854775807, wall_ms=0),
        "valid_unknown_keys": snapshot(added_later={"x": [1, 2]}),
        "hostile_escapes_in_names": snapshot(
            process="evil\x1b[2J\n127.0.0.1:1 forged\u009b31m\\x",
            listeners=[listener("127.0.0.1:7174\r\x07\u202e")],
            connections=[connection(peer="\x1b]0;title\x07", state="\u2028\x00")]),
        "hostile_pid_wraps_to_1": snapshot(pid=4294967297),
        "hostile_pid_negative": snapshot(pid=-1),
        "hostile_pid_float": snapshot(pid=1.0),
        "hostile_sequence_negative": snapshot(sequence=-1),
        "hostile_time_past_int64": snapshot(monotonic_ns=9223372036854775808),
        "hostile_counter_past_32_bits": snapshot(listeners=[listener(backlog=1 << 33)]),
        "hostile_connection_negative": snapshot(connections=[connection(queued=-1)]),
        "invalid_overflow_policy": snapshot(listeners=[listener(overflow="maybe")]),
        "invalid_schema": snapshot(schema="someone-else/1"),
        "invalid_torn": snapshot()[:60],
        "invalid_package_json": b'{"name": "web", "version": "1.0.0", "scripts": {}}\n',
        "invalid_deep_nesting": b"[" * 2000,
        # Raw control and non-UTF-8 octets inside a string: not JSON, whatever they spell.
        "invalid_raw_escape_in_string": snapshot().replace(b'"rdma-probe"', b'"rdma\x1b[2J"'),
        "invalid_raw_non_utf8": snapshot().replace(b'"rdma-probe"', b'"rdma\xff\xc0\x80"'),
    }


def mesh_setup_corpus():
    # mesh_setup_fuzzer.cc: octet 0 = which of the node's peers a, b, x, z are connected
    # (bits 0..3), then the MPA private data: 16 octets of credit parameters, the caller's name.
    creds = b"RICR" + bytes([1, 2]) + be16(16) + be16(16) + be16(0) + be32(4100)
    return {
        "accept_a": b"\x00" + creds + b"a",
        "accept_b_a_connected": b"\x01" + creds + b"b",
        "refuse_a_already_connected": b"\x01" + creds + b"a",
        "refuse_later_named_peer": b"\x00" + creds + b"z",
        "refuse_stranger": b"\x00" + creds + b"node9",
        "refuse_empty_name": b"\x00" + creds,
        "refuse_short_private_data": b"\x00" + creds[:7],
        "hostile_not_utf8": b"\x00" + creds + b"\xff\xfe",
        "hostile_escape_sequence": b"\x00" + creds + b"\x1b[2J\nforged row",
        "hostile_c1_csi": b"\x00" + creds + b"\xc2\x9b31m",
        "hostile_name_a_with_nul": b"\x00" + creds + b"a\x00",
    }


def stream_upgrade_corpus():
    # The peer's octets after [options][cut seed] (stream_upgrade_fuzzer.cc), laid out from
    # core/stream/upgrade.h's diagrams: OFFER = magic, version, flags, reserved, client id,
    # nonce, providers length, providers; ANSWER = magic, version, status, server id, nonce,
    # URI length, URI. The harness's client offers nonce 0x0102030405060708, "tcp,verbs".
    magic = b"RDMASTRM"
    nonce = 0x0102030405060708

    def offer(providers=b"tcp,verbs", version=1, flags=0, reserved=0, length=None):
        return magic + bytes([version, flags]) + be16(reserved) + bytes(range(0x10, 0x20)) \
            + be64(nonce) + be16(len(providers) if length is None else length) + providers

    def answer(uri=b"tcp://198.18.0.1:41234", status=0, version=1, nonce_=nonce, length=None):
        return magic + bytes([version, status]) + bytes(range(0xA0, 0xB0)) + be64(nonce_) \
            + be16(len(uri) if length is None else length) + uri

    accept, close, app_first, early = 1, 2, 4, 8
    return {
        "offer_upgrade": bytes([accept, 0]) + offer(),
        "offer_upgrade_bytewise": bytes([accept, 1]) + offer() + b"after",
        "offer_declined": bytes([0, 3]) + offer(),
        "offer_no_common_provider": bytes([accept, 4]) + offer(b"ib,iwarp"),
        "offer_empty_list": bytes([accept, 5]) + offer(b""),
        "offer_flags": bytes([accept, 6]) + offer(flags=0x80),
        "offer_bad_list": bytes([accept, 7]) + offer(b"tcp,,verbs"),
        "offer_bad_version": bytes([accept, 8]) + offer(version=2),
        "offer_reserved": bytes([accept, 9]) + offer(reserved=1),
        "offer_too_long": bytes([accept, 10]) + offer(length=0x0101),
        "offer_cut_by_close": bytes([accept | close, 11]) + offer()[:30],
        "offer_cut_by_time": bytes([accept, 12]) + offer()[:12],
        "answer_upgrade": bytes([0, 13]) + answer(),
        "answer_upgrade_verbs": bytes([0, 14]) + answer(b"verbs://[fd00::1]:41235"),
        "answer_decline_then_data": bytes([0, 15]) + answer(b"", status=1) + b"220 ready\r\n",
        "answer_decline_with_uri": bytes([0, 16]) + answer(status=1),
        "answer_bad_status": bytes([0, 17]) + answer(status=2),
        "answer_wrong_nonce": bytes([0, 18]) + answer(nonce_=7),
        "answer_not_offered": bytes([0, 19]) + answer(b"ib://h:1"),
        "answer_bad_uri": bytes([0, 20]) + answer(b"tcp://h h"),
        "answer_too_long": bytes([0, 21]) + answer(length=0x0201),
        "answer_cut_by_close": bytes([close, 22]) + answer()[:40],
        "magic_prefix_then_other": bytes([accept, 23]) + b"RDMASTRX-data",
        "magic_prefix_closed": bytes([accept | close, 24]) + b"RDM",
        "http_request": bytes([accept, 25]) + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "smtp_banner_early": bytes([early, 26]) + b"220 mail.example ESMTP\r\n",
        "ssh_banner": bytes([0, 27]) + b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n",
        "application_first": bytes([app_first, 28]) + b"hello",
        "silent": bytes([accept, 29]),
    }


def main():
    sets = {
        "mesh_setup_fuzzer": mesh_setup_corpus(),
        "stream_upgrade_fuzzer": stream_upgrade_corpus(),
        "probe_answer_fuzzer": probe_answer_corpus(),
        "telemetry_snapshot_fuzzer": telemetry_snapshot_corpus(),
        "credit_params_fuzzer": credit_params_corpus(),
        "credit_window_fuzzer": credit_corpus(),
        "peer_channel_fuzzer": peer_channel_corpus(),
        "stream_session_fuzzer": stream_session_corpus(),
        "mpa_handshake_fuzzer": handshake_corpus(),
        "rdmap_endpoint_fuzzer": endpoint_corpus(),
        "mpa_frame_fuzzer": mpa_corpus(),
        "fpdu_stream_fuzzer": fpdu_corpus(),
        "ddp_rdmap_fuzzer": ddp_corpus(),
        "terminate_fuzzer": terminate_corpus(),
    }
    for fuzzer, inputs in sets.items():
        directory = CORPUS / fuzzer
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        for name, data in sorted(inputs.items()):
            (directory / name).write_bytes(data)
        print(f"{fuzzer}: {len(inputs)} inputs in {directory.relative_to(HERE.parent.parent)}")


if __name__ == "__main__":
    main()
