"""MPA Request/Reply frames (RFC 5044 s7.1, RFC 6581 s3) through rdma_interop.wire."""

from __future__ import annotations

import pytest

from rdma_interop.wire import (
    MPA_MAX_PRIVATE_DATA_LINUX,
    MpaEnhanced,
    MpaFrame,
    MpaKind,
    TermLayer,
    WireError,
)

REQ_KEY = b"MPA ID Req Frame"
REP_KEY = b"MPA ID Rep Frame"


def header(key: bytes = REQ_KEY, flags: int = 0x40, rev: int = 1, pd_length: int = 0) -> bytes:
    """Key, flags octet, Rev and PD_Length, written by hand."""
    return key + bytes([flags, rev]) + pd_length.to_bytes(2, "big")


def v2_request(**enhanced: bool | int) -> MpaFrame:
    return MpaFrame(
        MpaKind.REQUEST, crc=True, revision=2, enhanced=MpaEnhanced(**enhanced), private_data=b"app"
    )


# ---- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [MpaKind.REQUEST, MpaKind.REPLY])
@pytest.mark.parametrize("markers", [False, True])
@pytest.mark.parametrize("crc", [False, True])
def test_rev1_frame_round_trips(kind: MpaKind, markers: bool, crc: bool) -> None:
    frame = MpaFrame(kind, markers=markers, crc=crc, revision=1, private_data=b"rev one")
    assert MpaFrame.decode(frame.encode()) == frame


def test_rev1_reject_reply_round_trips() -> None:
    reply = MpaFrame(MpaKind.REPLY, reject=True, revision=1, private_data=b"go away")
    data = reply.encode()
    assert data == header(REP_KEY, flags=0x20, rev=1, pd_length=7) + b"go away"
    assert MpaFrame.decode(data) == reply


@pytest.mark.parametrize(
    "rtr",
    [
        {"rtr_send": True},
        {"rtr_write": True},
        {"rtr_read": True},
        {"rtr_send": True, "rtr_write": True, "rtr_read": True},
        {},
    ],
    ids=["send", "write", "read", "all", "none"],
)
@pytest.mark.parametrize("kind", [MpaKind.REQUEST, MpaKind.REPLY])
def test_rev2_enhanced_frame_round_trips_with_each_rtr_type(kind: MpaKind, rtr: dict[str, bool]) -> None:
    frame = MpaFrame(
        kind,
        crc=True,
        revision=2,
        enhanced=MpaEnhanced(peer_to_peer=True, ird=0x3FFF, ord=7, **rtr),
        private_data=b"\x00\x01\x02 private",
    )
    decoded = MpaFrame.decode(frame.encode())
    assert decoded == frame
    assert decoded.peer_to_peer is True
    assert decoded.rtr_send is rtr.get("rtr_send", False)
    assert decoded.rtr_write is rtr.get("rtr_write", False)
    assert decoded.rtr_read is rtr.get("rtr_read", False)
    assert (decoded.ird, decoded.ord) == (0x3FFF, 7)


def test_rev2_frame_without_enhanced_flag_round_trips_and_has_no_ird_ord() -> None:
    frame = MpaFrame(MpaKind.REQUEST, crc=True, revision=2, private_data=b"plain v2")
    decoded = MpaFrame.decode(frame.encode())
    assert decoded == frame
    assert decoded.enhanced is None
    assert decoded.ird is None and decoded.ord is None and decoded.rtr_write is None


def test_kind_and_private_data_accept_plain_python_values() -> None:
    frame = MpaFrame("reply", private_data=bytearray(b"pd"))  # type: ignore[arg-type]
    assert frame.kind is MpaKind.REPLY
    assert frame.private_data == b"pd" and type(frame.private_data) is bytes


def test_frame_prints_one_line_summary() -> None:
    text = str(v2_request(peer_to_peer=True, rtr_write=True, ird=16, ord=16))
    assert "rev 2" in text and "ird=16" in text and "ord=16" in text


# ---- byte-exact against RFC 6581 s3 -----------------------------------------------------


def test_rev2_request_matches_rfc6581_layout_byte_for_byte() -> None:
    request = MpaFrame(
        MpaKind.REQUEST,
        crc=True,
        revision=2,
        enhanced=MpaEnhanced(peer_to_peer=True, rtr_send=True, rtr_write=True, rtr_read=True, ird=4, ord=8),
        private_data=b"pd",
    )
    expected = bytes.fromhex(
        "4d504120494420526571204672616d65"  # "MPA ID Req Frame"
        "50"  # C (0x40) | enhanced (0x10)
        "02"  # Rev 2
        "0006"  # PD_Length: IRD/ORD words (4) + "pd" (2)
        "c004"  # IRD word: A peer-to-peer 0x8000 | B send RTR 0x4000 | IRD 4
        "c008"  # ORD word: C write RTR 0x8000 | D read RTR 0x4000 | ORD 8
        "7064"  # "pd"
    )
    assert request.encode() == expected
    assert MpaFrame.decode(expected) == request
    assert request.pd_length == 6


def test_rev2_reply_choosing_write_rtr_matches_rfc6581_layout() -> None:
    reply = MpaFrame(
        MpaKind.REPLY,
        markers=True,
        crc=True,
        revision=2,
        enhanced=MpaEnhanced(peer_to_peer=True, rtr_write=True, ird=16, ord=0x3FFF),
    )
    expected = bytes.fromhex("4d504120494420526570204672616d65" "d0" "02" "0004" "8010" "bfff")
    assert reply.encode() == expected
    assert MpaFrame.decode(expected) == reply


def test_frame_length_reads_the_header_only() -> None:
    data = v2_request(peer_to_peer=True, rtr_read=True).encode()
    assert MpaFrame.frame_length(data[: MpaFrame.HEADER_LEN]) == len(data)


# ---- decode errors: one defect each, each with its own name -----------------------------

DECODE_ERRORS = {
    "bad_key": (b"MPA ID Xxx Frame" + bytes([0x40, 1, 0, 0]), "mpa_bad_key"),
    "reserved_bits": (header(flags=0x41), "mpa_reserved_bits"),
    "reject_in_request": (header(flags=0x60), "mpa_reject_in_request"),
    "revision_0": (header(rev=0), "mpa_unknown_revision"),
    "revision_3": (header(rev=3), "mpa_unknown_revision"),
    "pd_over_rfc_limit": (header(pd_length=513) + bytes(513), "mpa_private_data_too_long"),
    "header_truncated": (header()[:19], "mpa_truncated"),
    "private_data_truncated": (header(pd_length=10) + b"short", "mpa_truncated"),
    "trailing_bytes": (header(pd_length=2) + b"pd" + b"extra", "mpa_trailing_bytes"),
    "enhanced_on_rev1": (header(flags=0x50, rev=1, pd_length=4) + bytes(4), "mpa_enhanced_needs_revision_2"),
    "enhanced_without_ird_ord": (header(flags=0x50, rev=2, pd_length=2) + b"pd", "mpa_enhanced_params_truncated"),
}


@pytest.mark.parametrize("data,name", DECODE_ERRORS.values(), ids=DECODE_ERRORS.keys())
def test_malformed_frame_raises_wire_error_naming_the_defect(data: bytes, name: str) -> None:
    with pytest.raises(WireError) as caught:
        MpaFrame.decode(data)
    error = caught.value
    assert error.name == name
    assert isinstance(error, ValueError)
    assert error.message and name in str(error)
    # RFC 5044 s8 / RFC 6581 s5: a bad Request/Reply is answered with MPA code 0x04.
    assert error.terminate == (TermLayer.LLP, 0, 0x04)


def test_linux_private_data_limit_is_a_decode_option() -> None:
    data = header(pd_length=300) + bytes(300)
    assert len(MpaFrame.decode(data).private_data) == 300
    with pytest.raises(WireError) as caught:
        MpaFrame.decode(data, private_data_limit=MPA_MAX_PRIVATE_DATA_LINUX)
    assert caught.value.name == "mpa_private_data_too_long"


def test_lenient_receiver_keeps_reserved_bits() -> None:
    frame = MpaFrame.decode(header(flags=0x43), reject_reserved_bits=False)
    assert frame.reserved_bits == 0x03 and frame.crc
    assert frame.encode() == header(flags=0x43)


def test_frame_length_rejects_a_bad_header() -> None:
    with pytest.raises(WireError) as caught:
        MpaFrame.frame_length(header(rev=9))
    assert caught.value.name == "mpa_unknown_revision"


# ---- encode errors ----------------------------------------------------------------------


def test_encoding_ird_over_14_bits_fails() -> None:
    with pytest.raises(WireError) as caught:
        v2_request(ird=0x4000).encode()
    assert caught.value.name == "mpa_ird_ord_out_of_range"


def test_encoding_enhanced_params_on_rev1_frame_fails() -> None:
    frame = MpaFrame(MpaKind.REQUEST, revision=1, enhanced=MpaEnhanced(rtr_write=True))
    with pytest.raises(WireError) as caught:
        frame.encode()
    assert caught.value.name == "mpa_enhanced_needs_revision_2"


def test_encoding_private_data_over_limit_fails() -> None:
    frame = MpaFrame(private_data=bytes(257))
    assert len(frame.encode()) == 20 + 257
    with pytest.raises(WireError) as caught:
        frame.encode(private_data_limit=MPA_MAX_PRIVATE_DATA_LINUX)
    assert caught.value.name == "mpa_private_data_too_long"


def test_enhanced_words_count_against_the_private_data_limit() -> None:
    frame = v2_request(rtr_write=True)
    frame = MpaFrame(frame.kind, crc=True, revision=2, enhanced=frame.enhanced, private_data=bytes(510))
    with pytest.raises(WireError) as caught:
        frame.encode()
    assert caught.value.name == "mpa_private_data_too_long"
