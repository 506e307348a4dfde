"""The Terminate checker, on hand-made Terminates (no guest): RFC-conformant ones pass,
each kind of wrong field is named, the kernel siw Terminates we captured are taken apart,
and our own stack (tcp provider, loopback) answers every fault the way the checker requires.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Iterator

import pytest

from rdma_interop.errors import TerminateCause, WireError
from rdma_interop.provider import (
    Access,
    Connection,
    InitialRecv,
    Listener,
    QpCaps,
    find_personality,
    open_provider,
)
from rdma_interop.wire import (
    DdpHeader,
    DdpSegment,
    FpduDecoder,
    FpduEncoder,
    ReadRequest,
    Terminate,
)

from .fault_client import (
    RDMA_INFO,
    FaultClient,
    Observation,
    ReceivedFpdu,
    RequestOptions,
    StreamEnd,
)
from .terminate_check import (
    DDP_TAGGED_BASE_OR_BOUNDS,
    DDP_TAGGED_INVALID_STAG,
    DDP_UNTAGGED_NO_BUFFER,
    MPA_CONNECTION_LOST,
    MPA_CRC_ERROR,
    RDMAP_BASE_OR_BOUNDS,
    RDMAP_INVALID_STAG,
    RULES,
    RequiredTerminate,
    check_terminate,
    judge,
)


def write_segment(stag: int, to: int, payload: bytes) -> bytes:
    return DdpSegment(DdpHeader.rdma_write(stag, to), payload).encode()


def read_request_segment(body: ReadRequest, msn: int = 1) -> bytes:
    return DdpSegment(DdpHeader.read_request(msn), body.encode()).encode()


def send_segment(payload: bytes, msn: int = 1) -> bytes:
    return DdpSegment(DdpHeader.send(msn), payload).encode()


def ulpdu_of(fpdu_hex: str) -> bytes:
    raw = bytes.fromhex(fpdu_hex)
    return raw[2:2 + struct.unpack_from(">H", raw)[0]]


WRITE = write_segment(0x00AB_CD00, 0x1000, b"W" * 16)
SEND = send_segment(RDMA_INFO.pack(0x1000, 0xABCD00, 64), msn=2)
READ = read_request_segment(ReadRequest(0x0123_4500, 0x2000, 16, 0x4E6E_9800, 0x5628_4BD4_B340))

CONFORMANT = [
    pytest.param(RequiredTerminate(DDP_TAGGED_INVALID_STAG, "RFC 5041 s7", WRITE), id="ddp-tagged"),
    pytest.param(RequiredTerminate(DDP_UNTAGGED_NO_BUFFER, "RFC 5041 s7", SEND), id="ddp-untagged"),
    pytest.param(RequiredTerminate(RDMAP_INVALID_STAG, "RFC 5040 s7", READ), id="rdmap-read"),
    pytest.param(RequiredTerminate(MPA_CRC_ERROR, "RFC 5044 s8", SEND, headers=False), id="mpa-crc"),
]


# ---- the required Terminate itself ----------------------------------------------------


def test_required_terminate_lays_out_every_field_by_rfc5040() -> None:
    req = RequiredTerminate(RDMAP_INVALID_STAG, "RFC 5040 s7", READ)
    body = req.body()
    assert body[:4] == bytes([0x01, 0x00, 0xE0, 0x00])  # layer 0 type 1, code 0, M D R
    assert struct.unpack_from(">H", body, 4)[0] == 46  # 18-octet header + 28-octet body
    assert body[6:] == READ  # the DDP header, then the Read Request header: all 46 octets
    ulpdu = req.ulpdu(msn=1)
    assert ulpdu[:18] == bytes.fromhex("4147" "00000000" "00000002" "00000001" "00000000")
    crc = RequiredTerminate(MPA_CRC_ERROR, "RFC 5044 s8", SEND, headers=False).body()
    assert crc == bytes([0x20, 0x02, 0x00, 0x00])


@pytest.mark.parametrize("req", CONFORMANT)
def test_conformant_terminate_has_no_deviation(req: RequiredTerminate) -> None:
    check = check_terminate(req, req.ulpdu(), crc_ok=True)
    assert check.deviations == [] and check.diagnosis == []
    assert check.raw_hex == req.ulpdu().hex() == check.required_hex


@pytest.mark.parametrize("req", CONFORMANT)
def test_our_codec_builds_the_same_terminate_as_the_rfc_layout(req: RequiredTerminate) -> None:
    """Cross-check: rdma_interop.wire (core/wire/terminate.cc) against the layout above."""
    ours = Terminate.for_cause(req.cause, req.offending if req.headers else b"")
    assert ours.encode(msn=1) == req.ulpdu(msn=1)
    assert Terminate.decode(req.ulpdu()) == ours


def test_our_crc_error_maps_to_the_rfc5044_code() -> None:
    """Cross-check: the decoder's answer to a bad CRC is the RFC 5044 s8 cause, and the
    Terminate built for it includes no header (the FPDU cannot be trusted)."""
    fpdu = FaultClient.corrupt_crc(FpduEncoder(crc=True).encode(SEND))
    with pytest.raises(WireError) as caught:
        FpduDecoder(crc=True).feed(fpdu)
    assert caught.value.name == "fpdu_crc_mismatch"
    assert caught.value.terminate == MPA_CRC_ERROR
    ours = Terminate.for_error(caught.value, SEND)
    want = RequiredTerminate(MPA_CRC_ERROR, "RFC 5044 s8", SEND, headers=False)
    assert ours.encode(msn=1) == want.ulpdu()


def test_rules_name_the_rfc_causes() -> None:
    assert RULES["bad_crc"].cause == (2, 0, 0x02)
    assert RULES["write_invalid_stag"].cause == (1, 1, 0x00)
    assert RULES["write_out_of_bounds"].cause == (1, 1, 0x01)
    assert RULES["read_invalid_stag"].cause == (0, 1, 0x00)
    assert RULES["read_out_of_bounds"].cause == (0, 1, 0x01)
    assert RULES["send_without_receive"].cause == (1, 2, 0x02)
    assert RULES["truncated_fpdu"].cause is None
    assert [c for c, _ in RULES["truncated_fpdu"].tolerated] == [MPA_CONNECTION_LOST]
    assert RULES["close_before_rtr"].cause is None and not RULES["close_before_rtr"].tolerated


# ---- one wrong field at a time --------------------------------------------------------


def mutate(ulpdu: bytes, offset: int, value: bytes) -> bytes:
    return ulpdu[:offset] + value + ulpdu[offset + len(value):]


def deviations(req: RequiredTerminate, ulpdu: bytes, **kw: object) -> list[str]:
    return check_terminate(req, ulpdu, **kw).deviations  # type: ignore[arg-type]


def test_each_wrong_field_of_the_terminate_ddp_header_is_named() -> None:
    req = RequiredTerminate(DDP_TAGGED_INVALID_STAG, "RFC 5041 s7", WRITE)
    good = req.ulpdu()
    assert any("control is 0xc147" in d for d in deviations(req, mutate(good, 0, b"\xc1")))
    assert any("QN 0" in d for d in deviations(req, mutate(good, 6, bytes(4))))
    assert any("MSN is 7" in d for d in deviations(req, mutate(good, 10, struct.pack(">I", 7))))
    assert any("MO is 4" in d for d in deviations(req, mutate(good, 14, struct.pack(">I", 4))))
    assert any("RsvdULP" in d for d in deviations(req, mutate(good, 2, b"\x00\x00\x00\x01")))
    assert deviations(req, good, expected_msn=2) == [
        "the Terminate's MSN is 1, the first message on QN 2 has MSN 2 (RFC 5041 s4.4)"]
    assert any("CRC32c" in d for d in deviations(req, good, crc_ok=False))


def test_wrong_cause_and_flags_are_named() -> None:
    req = RequiredTerminate(DDP_TAGGED_INVALID_STAG, "RFC 5041 s7", WRITE)
    good = req.ulpdu()
    code = deviations(req, mutate(good, 19, b"\x01"))
    assert code == ["the Error Code is 0x01, RFC 5041 s7 requires 0x00"]
    layer = deviations(req, mutate(good, 18, b"\x01"))
    assert "the Layer is 0, RFC 5041 s7 requires 1 (DDP)" in layer
    no_m = deviations(req, mutate(good, 20, b"\x40"))
    assert any("the M flag is clear" in d for d in no_m)
    reserved = deviations(req, mutate(good, 21, b"\x01"))
    assert any("reserved bits of the Terminate Control field are set (0x0001" in d
               for d in reserved)
    seg_len = deviations(req, mutate(good, 22, struct.pack(">H", 16)))
    assert any("DDP Segment Length is 16 (the payload alone, without the 14-octet DDP header)"
               in d for d in seg_len)
    stag = deviations(req, mutate(good, 24 + 2, b"\xff\xff\xff\xff"))
    assert stag == ["the terminated DDP header carries STag 0xffffffff, the segment we sent has "
                    "0x00abcd00"]
    trailing = deviations(req, good + b"\x00\x00")
    assert any("2 octets follow the Terminate beyond" in d for d in trailing)
    assert any("malformed" in d for d in deviations(req, good[:20]))


def test_headers_where_the_layout_is_unknown_must_still_be_the_offending_ones() -> None:
    """An MPA error needs no header; one sent anyway must be the segment's own."""
    req = RequiredTerminate(MPA_CRC_ERROR, "RFC 5044 s8", SEND, headers=False)
    with_headers = Terminate.for_cause(MPA_CRC_ERROR, SEND).encode(msn=1)
    assert deviations(req, with_headers) == []
    wrong = mutate(with_headers, 18 + 6 + 10, struct.pack(">I", 9))  # its MSN
    assert deviations(req, wrong) == [
        "the terminated DDP header carries MSN 0x00000009, the segment we sent has 0x00000002"]


# ---- Terminates kernel siw sent (Linux 6.1.192, captured by test_siw_faults) -----------

#: An RDMA Write to an unregistered STag: FPDU as received.
SIW_WRITE_INVALID_STAG = ("0026414700000000000000020000000100000000110003000010c140fed04500"
                          "00005633fac1e34008dce444")
#: A Send with a bad CRC.
SIW_BAD_CRC = "00164147000000000000000200000001000000000202000075d367ed"
#: An RDMA Read Request naming an unregistered source STag.
SIW_READ_INVALID_STAG = ("00464147000000000000000200000001000000001000070000004141000000000000"
                         "000100000010000000000123450000000000000020000000001" "04e6e98000000"
                         "56284bd4b34091cbad62")


def test_siw_write_terminate_has_flags_in_reserved_bits_and_a_payload_length() -> None:
    offending = write_segment(0xFED0_4500, 0x5633_FAC1_E340, b"W" * 16)
    req = RULES["write_invalid_stag"].expectation(offending).terminate
    assert req is not None
    check = check_terminate(req, ulpdu_of(SIW_WRITE_INVALID_STAG), crc_ok=True)
    assert check.fields is not None and (check.fields.layer, check.fields.etype) == (1, 1)
    d = check.deviations
    assert "reserved bits of the Terminate Control field are set (0x0300 in the 13 bits after " \
           "M/D/R); RFC 5040 s4.8: zero on transmit" in d
    assert any(s.startswith("the M flag is clear") for s in d)
    assert any(s.startswith("the D flag is clear") for s in d)
    assert any("16 octets follow the Terminate beyond what its header-control flags (none)" in s
               for s in d)
    # Read with siw's own bit positions, the header is ours but the length is not.
    assert ("read with M/D from those bits, the DDP Segment Length is 16 (the payload alone, "
            "without the 14-octet DDP header); the offending DDP segment was 30 octets (header "
            "and payload, RFC 5040 s4.8, RFC 5041 s2)") in d
    assert not any("terminated DDP header carries" in s for s in d)
    assert any("bit order reversed" in s for s in check.diagnosis)


def test_siw_crc_terminate_swaps_layer_and_error_type() -> None:
    req = RULES["bad_crc"].expectation().terminate
    assert req is not None
    check = check_terminate(req, ulpdu_of(SIW_BAD_CRC), crc_ok=True)
    assert check.deviations == ["the Layer is 0, RFC 5044 s8 requires 2 (LLP)",
                                "the Error Type is 2, RFC 5044 s8 requires 0"]
    assert check.diagnosis and "nibbles swapped" in check.diagnosis[0]


def test_siw_read_terminate_rebuilds_a_wrong_read_request() -> None:
    offending = read_request_segment(
        ReadRequest(0x0123_4500, 0x2000, 16, 0x4E6E_9800, 0x5628_4BD4_B340), msn=1)
    req = RULES["read_invalid_stag"].expectation(offending).terminate
    assert req is not None
    check = check_terminate(req, ulpdu_of(SIW_READ_INVALID_STAG), crc_ok=True)
    d = check.deviations
    assert "the Layer is 1, RFC 5040 s7 requires 0 (RDMAP)" in d
    assert "the Error Type is 0, RFC 5040 s7 requires 1" in d
    prefix = "read with M/D/R from those bits, "
    assert (prefix + "the DDP Segment Length is 0; the offending DDP segment was 46 octets "
            "(header and payload, RFC 5040 s4.8, RFC 5041 s2)") in d
    assert (prefix + "the terminated DDP header carries MSN 0x00000010, the segment we sent "
            "has 0x00000001") in d  # the Read size where the MSN belongs
    assert not any("Read Request header carries" in s for s in d)  # the body itself is right


# ---- judging the whole answer ---------------------------------------------------------


def fpdu(ulpdu: bytes) -> ReceivedFpdu:
    raw = FpduEncoder(crc=True).encode(ulpdu)
    return ReceivedFpdu(raw, ulpdu, True, DdpSegment.decode(ulpdu), None, 0.1)


def obs(*fpdus: ReceivedFpdu, end: str | None = "fin") -> Observation:
    return Observation(list(fpdus), None if end is None else StreamEnd(end, 0.2), 1.0)  # type: ignore[arg-type]


def test_judge_wants_the_terminate_then_the_close() -> None:
    exp = RULES["write_invalid_stag"].expectation(WRITE)
    assert exp.terminate is not None
    good = fpdu(exp.terminate.ulpdu())
    assert judge(exp, obs(good)).conforms
    missing = judge(exp, obs())
    assert not missing.conforms and "no Terminate before the close" in missing.deviations[0]
    late = judge(exp, obs(good, fpdu(send_segment(b"x"))))
    assert any("followed the Terminate" in d for d in late.deviations)
    open_ = judge(exp, obs(good, end=None))
    assert any("kept the connection open" in d for d in open_.deviations)
    silent = judge(exp, obs(end=None))
    assert not silent.answered and not silent.conforms


def test_judge_of_a_close_answer_checks_any_terminate_sent() -> None:
    exp = RULES["truncated_fpdu"].expectation()
    assert judge(exp, obs()).conforms
    lost = RequiredTerminate(MPA_CONNECTION_LOST, "RFC 5044 s8", headers=False)
    assert judge(exp, obs(fpdu(lost.ulpdu()))).conforms
    other = RequiredTerminate(MPA_CRC_ERROR, "RFC 5044 s8", headers=False)
    assert any("where the RFCs require none" in d
               for d in judge(exp, obs(fpdu(other.ulpdu()))).deviations)
    swapped = bytearray(lost.ulpdu())
    swapped[18] = 0x02  # layer and type nibbles swapped, as siw sends them
    found = judge(exp, obs(fpdu(bytes(swapped))))
    assert found.deviations[:2] == ["the Layer is 0, RFC 5044 s8 requires 2 (LLP)",
                                    "the Error Type is 2, RFC 5044 s8 requires 0"]
    before_rtr = RULES["close_before_rtr"].expectation()
    assert any("instead of closing" in d
               for d in judge(before_rtr, obs(fpdu(send_segment(b"x")))).deviations)


# ---- our own stack as the responder (tcp provider on loopback) -------------------------


@pytest.fixture()
def our_responder() -> Iterator[Callable[[int], tuple[FaultClient, Connection]]]:
    """Connects a FaultClient to our tcp provider's responder (siw personality) with
    `recvs` receives posted; yields (client, responder connection)."""
    provider = open_provider("tcp")
    siw = find_personality("siw")
    made: list[tuple[FaultClient, Connection, Listener]] = []

    def connect(recvs: int) -> tuple[FaultClient, Connection]:
        listener = provider.listen("tcp://127.0.0.1:0", siw.mpa)
        host, port = listener.local_address.rsplit(":", 1)
        caps = QpCaps(initial_recvs=tuple(InitialRecv(bytearray(16), wr_id=i)
                                          for i in range(recvs)))
        accepted: list[Connection] = []

        def accept() -> None:
            pending = listener.next_request(timeout_ms=5000)
            assert pending is not None
            accepted.append(pending.accept(b"", caps))

        thread = threading.Thread(target=accept)
        thread.start()
        client = FaultClient.connect(host, int(port), settle_s=0.0)
        client.handshake(RequestOptions())
        thread.join(10)
        assert accepted, "our responder did not accept"
        made.append((client, accepted[0], listener))
        return client, accepted[0]

    yield connect
    for client, conn, listener in made:
        client.close()
        conn.disconnect(timeout_ms=200)
        listener.close()


def test_our_responder_answers_every_fault_as_the_rfcs_require(
        our_responder: Callable[[int], tuple[FaultClient, Connection]]) -> None:
    """Each fault the kernel cases inject, against our own stack: the checker must find
    nothing, which shows the checker and our Terminates agree (and both read the RFCs)."""
    cases: list[tuple[str, Callable[[FaultClient, int, int], bytes]]] = [
        ("write_invalid_stag", lambda c, stag, to: c.write_ulpdu(stag + 0x100, to, b"W" * 16)),
        ("write_out_of_bounds", lambda c, stag, to: c.write_ulpdu(stag, to + 56, b"W" * 16)),
        ("read_invalid_stag", lambda c, stag, to: c.read_request_ulpdu(
            ReadRequest(0x1234500, 0x2000, 16, stag + 0x100, to))),
        ("read_out_of_bounds", lambda c, stag, to: c.read_request_ulpdu(
            ReadRequest(0x1234500, 0x2000, 128, stag, to))),
        ("send_without_receive", lambda c, stag, to: c.send_ulpdu(RDMA_INFO.pack(to, stag, 64))),
        ("bad_crc", lambda c, stag, to: c.send_ulpdu(RDMA_INFO.pack(to, stag, 64))),
    ]
    failures = []
    for name, make in cases:
        client, conn = our_responder(0)
        mr = conn.register(bytearray(64), Access.LOCAL_WRITE | Access.REMOTE_READ
                           | Access.REMOTE_WRITE)
        offending = make(client, mr.stag, mr.tagged_offset)
        wire = client.fpdu(offending)
        client.send_raw(client.corrupt_crc(wire) if name == "bad_crc" else wire)
        verdict = judge(RULES[name].expectation(offending), client.observe(5.0, linger_s=1.0))
        if not verdict.conforms:
            failures.append(f"{name}: {verdict.observed}: {verdict.deviations}")
    assert failures == []


def test_cause_constants_are_plain_tuples() -> None:
    assert isinstance(DDP_TAGGED_BASE_OR_BOUNDS, TerminateCause)
    assert RDMAP_BASE_OR_BOUNDS == (0, 1, 1)
