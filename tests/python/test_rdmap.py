"""DDP segment headers (RFC 5041 s4), RDMAP (RFC 5040 s4) and Terminate (RFC 5040 s4.8)."""

from __future__ import annotations


import pytest

from rdma_interop.wire import (
    DdpHeader,
    DdpSegment,
    RdmapOpcode,
    ReadRequest,
    Terminate,
    TermLayer,
    WireError,
)

# ---- DDP/RDMAP headers ------------------------------------------------------------------


def test_untagged_send_header_bytes() -> None:
    header = DdpHeader.send(msn=1)
    assert header.encode() == bytes.fromhex(
        "41"  # L | DV 1
        "43"  # RV 1 | opcode Send
        "00000000"  # RsvdULP (Invalidate STag)
        "00000000"  # QN 0
        "00000001"  # MSN
        "00000000"  # MO
    )
    assert header.length == 18


def test_tagged_rdma_write_header_bytes() -> None:
    header = DdpHeader.rdma_write(0x11223344, 0x0102030405060708)
    assert header.encode() == bytes.fromhex("c1" "40" "11223344" "0102030405060708")
    assert header.length == 14 and header.tagged and header.opcode is RdmapOpcode.RDMA_WRITE


@pytest.mark.parametrize(
    "header",
    [
        DdpHeader.send(msn=7, message_offset=4096, last=False),
        DdpHeader.send(msn=8, solicited_event=True),
        DdpHeader.send(msn=9, invalidate_stag=0xABCD),
        DdpHeader.send(msn=10, solicited_event=True, invalidate_stag=0x1234),
        DdpHeader.rdma_write(0xDEADBEEF, 1 << 40, last=False),
        DdpHeader.read_response(0x100, 0x2000),
        DdpHeader.read_request(msn=2),
        DdpHeader.terminate(msn=1),
    ],
    ids=lambda header: header.opcode.name,
)
def test_segment_round_trips(header: DdpHeader) -> None:
    payloads = {
        RdmapOpcode.RDMA_READ_REQUEST: ReadRequest(sink_stag=1, size=8, source_stag=2).encode(),
        RdmapOpcode.TERMINATE: Terminate(TermLayer.LLP, 0, 2).encode_body(),
    }
    segment = DdpSegment(header, payloads.get(header.opcode, b"payload"))
    assert DdpSegment.decode(segment.encode()) == segment


def test_send_builder_picks_the_opcode() -> None:
    assert DdpHeader.send(msn=1).opcode is RdmapOpcode.SEND
    assert DdpHeader.send(msn=1, solicited_event=True).opcode is RdmapOpcode.SEND_WITH_SOLICITED_EVENT
    assert DdpHeader.send(msn=1, invalidate_stag=5).opcode is RdmapOpcode.SEND_WITH_INVALIDATE
    assert (
        DdpHeader.send(msn=1, solicited_event=True, invalidate_stag=5).opcode
        is RdmapOpcode.SEND_WITH_SOLICITED_EVENT_AND_INVALIDATE
    )
    assert DdpHeader.read_request(msn=1).queue_number == RdmapOpcode.RDMA_READ_REQUEST.queue_number == 1
    assert DdpHeader.terminate(msn=1).queue_number == 2
    assert RdmapOpcode.RDMA_READ_RESPONSE.tagged and not RdmapOpcode.SEND.tagged


BAD_SEGMENTS = {
    # RFC 5041 s7.2: DDP untagged buffer error, invalid DDP version.
    "untagged_ddp_version": (DdpHeader.send(msn=1, last=True), {"ddp_version": 2},
                             "ddp_untagged_bad_version", (TermLayer.DDP, 2, 0x06)),
    # RFC 5041 s7.2: DDP tagged buffer error, invalid DDP version.
    "tagged_ddp_version": (DdpHeader.rdma_write(1, 0), {"ddp_version": 0},
                           "ddp_tagged_bad_version", (TermLayer.DDP, 1, 0x04)),
    # RFC 5040 s7: remote operation error, invalid RDMAP version.
    "rdmap_version": (DdpHeader.send(msn=1), {"rdmap_version": 2},
                      "rdmap_bad_version", (TermLayer.RDMAP, 2, 0x05)),
    # RFC 5041 s7.2: invalid QN.
    "queue_number": (DdpHeader.send(msn=1), {"queue_number": 3},
                     "ddp_invalid_queue_number", (TermLayer.DDP, 2, 0x01)),
}


@pytest.mark.parametrize("base,change,name,cause", BAD_SEGMENTS.values(), ids=BAD_SEGMENTS.keys())
def test_bad_segment_gets_the_rfc_terminate(
    base: DdpHeader, change: dict[str, int], name: str, cause: tuple[int, int, int]
) -> None:
    ulpdu = base.replace(**change).encode() + b"payload"
    with pytest.raises(WireError) as caught:
        DdpSegment.decode(ulpdu)
    assert caught.value.name == name
    assert caught.value.terminate == cause


def test_reserved_opcode_is_unexpected_opcode() -> None:
    ulpdu = bytearray(DdpHeader.send(msn=1).encode())
    ulpdu[1] = 0x40 | 0x8  # RV 1, opcode 8 (reserved)
    with pytest.raises(WireError) as caught:
        DdpSegment.decode(ulpdu)
    assert caught.value.name == "rdmap_bad_opcode"
    assert caught.value.terminate == (TermLayer.RDMAP, 2, 0x06)


def test_truncated_segment() -> None:
    with pytest.raises(WireError) as caught:
        DdpSegment.decode(DdpHeader.send(msn=1).encode()[:10])
    assert caught.value.name == "ddp_truncated"


# ---- RDMA Read Request --------------------------------------------------------------------


def test_read_request_round_trips_byte_exact() -> None:
    request = ReadRequest(
        sink_stag=0x01020304,
        sink_tagged_offset=0x1112131415161718,
        size=0x21222324,
        source_stag=0x31323334,
        source_tagged_offset=0x4142434445464748,
    )
    data = request.encode()
    assert data == bytes.fromhex("01020304" "1112131415161718" "21222324" "31323334" "4142434445464748")
    assert ReadRequest.decode(data) == request


def test_read_request_of_wrong_length_is_an_error() -> None:
    with pytest.raises(WireError) as caught:
        ReadRequest.decode(bytes(27))
    assert caught.value.name == "rdmap_read_request_bad_length"


# ---- Terminate ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "layer,etype,code",
    [
        (TermLayer.LLP, 0, 0x02),  # MPA CRC error
        (TermLayer.LLP, 0, 0x04),  # invalid MPA Request/Reply
        (TermLayer.LLP, 0, 0x07),  # RFC 6581: no matching RTR
        (TermLayer.DDP, 1, 0x00),  # tagged: invalid STag
        (TermLayer.DDP, 2, 0x02),  # untagged: no buffer
        (TermLayer.RDMAP, 1, 0x02),  # remote protection: access rights
        (TermLayer.RDMAP, 2, 0xFF),  # remote operation: unspecified
    ],
)
def test_terminate_round_trips(layer: TermLayer, etype: int, code: int) -> None:
    terminate = Terminate(layer, etype, code)
    ulpdu = terminate.encode(msn=42)
    segment = DdpSegment.decode(ulpdu)
    assert segment.header.opcode is RdmapOpcode.TERMINATE
    assert (segment.header.queue_number, segment.header.msn, segment.header.last) == (2, 42, True)
    assert Terminate.decode(ulpdu) == terminate
    assert terminate.encode_body()[:2] == bytes([int(layer) << 4 | etype, code])


def test_terminate_with_offending_ddp_header_round_trips() -> None:
    offending = DdpHeader.send(msn=5).encode()
    terminate = Terminate(TermLayer.DDP, 2, 0x02, ddp_segment_length=len(offending) + 100, ddp_header=offending)
    assert Terminate.decode(terminate.encode(msn=1)) == terminate


def test_terminate_with_read_request_header_round_trips() -> None:
    header = DdpHeader.read_request(msn=3).encode()
    body = ReadRequest(sink_stag=1, size=4096, source_stag=2).encode()
    terminate = Terminate(
        TermLayer.RDMAP,
        1,
        0x00,
        ddp_segment_length=len(header) + len(body),
        ddp_header=header,
        rdmap_header_included=True,
        rdmap_header=body,
    )
    assert Terminate.decode(terminate.encode(msn=1)) == terminate


def test_terminate_for_an_error_carries_its_cause_and_the_offending_header() -> None:
    bad = DdpHeader.send(msn=1).replace(queue_number=3).encode() + b"x"
    with pytest.raises(WireError) as caught:
        DdpSegment.decode(bad)
    terminate = Terminate.for_error(caught.value, bad)
    assert terminate.cause == caught.value.terminate == (TermLayer.DDP, 2, 0x01)
    assert terminate.ddp_header == bad[:18]
    assert Terminate.decode(terminate.encode(msn=1)) == terminate


def test_terminate_for_a_version_error_echoes_no_header() -> None:
    """The layout of a segment with a bad version is unknown, so (as siw) nothing is echoed."""
    bad = DdpHeader.send(msn=1).replace(ddp_version=2).encode() + b"x"
    with pytest.raises(WireError) as caught:
        DdpSegment.decode(bad)
    terminate = Terminate.for_error(caught.value, bad)
    assert terminate.cause == (TermLayer.DDP, 2, 0x06)
    assert terminate.ddp_header == b"" and terminate.ddp_segment_length is None


def test_terminate_for_a_placement_error() -> None:
    offending = DdpSegment(DdpHeader.rdma_write(0x99, 0), b"data").encode()
    terminate = Terminate.for_cause((TermLayer.DDP, 1, 0x00), offending)
    assert terminate.cause == (TermLayer.DDP, 1, 0x00)
    assert terminate.ddp_header == offending[:14]


def test_cause_describes_itself() -> None:
    assert "CRC" in Terminate(TermLayer.LLP, 0, 0x02).cause.describe()


def test_decoding_a_non_terminate_ulpdu_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="not a Terminate"):
        Terminate.decode(DdpSegment(DdpHeader.send(msn=1)).encode())


BAD_TERMINATE_BODIES = {
    "truncated": (bytes.fromhex("2002"), "terminate_truncated"),
    "bad_layer": (bytes.fromhex("30020000"), "terminate_bad_layer"),
    "reserved_bits": (bytes.fromhex("20020100"), "terminate_reserved_bits"),
    "d_flag_without_header": (bytes.fromhex("20024000" "0012"), "terminate_truncated"),
    "r_flag_without_d_flag": (bytes.fromhex("20022000"), "terminate_header_length_mismatch"),
    "bytes_after_the_last_header": (bytes.fromhex("20020000" "ff"), "terminate_header_length_mismatch"),
}


@pytest.mark.parametrize("body,name", BAD_TERMINATE_BODIES.values(), ids=BAD_TERMINATE_BODIES.keys())
def test_malformed_terminate_body_is_an_error(body: bytes, name: str) -> None:
    with pytest.raises(WireError) as caught:
        Terminate.decode_body(body)
    assert caught.value.name == name
