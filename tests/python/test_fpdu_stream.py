"""FPDU framing (RFC 5044 s4-s6): encoder, streaming decoder, CRC32c and markers."""

from __future__ import annotations

import random
import threading

import pytest

from rdma_interop.wire import (
    DdpHeader,
    DdpSegment,
    FpduDecoder,
    FpduEncoder,
    TermLayer,
    WireError,
    crc32c,
)

OPTIONS = [
    pytest.param(True, False, id="crc"),
    pytest.param(False, False, id="no-crc"),
    pytest.param(True, True, id="crc+markers"),
    pytest.param(False, True, id="markers"),
]


def ulpdus(count: int, seed: int = 7) -> list[bytes]:
    """Send ULPDUs of assorted lengths, so pads of 0..3 octets and markers all occur."""
    rng = random.Random(seed)
    return [
        DdpSegment(DdpHeader.send(msn=i + 1), rng.randbytes(rng.randrange(0, 700))).encode()
        for i in range(count)
    ]


def stream_of(messages: list[bytes], crc: bool, markers: bool) -> bytes:
    encoder = FpduEncoder(crc=crc, markers=markers)
    return b"".join(encoder.encode(m) for m in messages)


def test_crc32c_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_fpdu_without_markers_is_length_ulpdu_pad_crc() -> None:
    ulpdu = DdpSegment(DdpHeader.send(msn=1), b"payload").encode()  # 25 octets
    fpdu = FpduEncoder(crc=True).encode(ulpdu)
    assert fpdu[:2] == len(ulpdu).to_bytes(2, "big")
    assert fpdu[2:27] == ulpdu
    assert fpdu[27:28] == b"\x00"  # pad to a multiple of 4: 2 + 25 + 1
    # RFC 5044 s4.1: the CRC covers length, ULPDU and pad; siw sends it LSB first.
    assert fpdu[28:] == crc32c(fpdu[:28]).to_bytes(4, "little")


def test_fpdu_without_crc_carries_a_zero_crc_field() -> None:
    fpdu = FpduEncoder(crc=False).encode(DdpSegment(DdpHeader.send(msn=1)).encode())
    assert fpdu[-4:] == bytes(4)


def test_encoder_joins_gather_parts() -> None:
    header = DdpHeader.send(msn=3).encode()
    assert FpduEncoder().encode(header, b"abc") == FpduEncoder().encode(header + b"abc")


def test_encoder_keeps_stream_position_across_calls() -> None:
    encoder = FpduEncoder(markers=True)
    total = sum(len(encoder.encode(m)) for m in ulpdus(10))
    assert encoder.stream_position == total


@pytest.mark.parametrize("crc,markers", OPTIONS)
def test_stream_fed_one_octet_at_a_time_round_trips(crc: bool, markers: bool) -> None:
    messages = ulpdus(12)
    stream = stream_of(messages, crc, markers)
    decoder = FpduDecoder(crc=crc, markers=markers)
    received: list[bytes] = []
    for i in range(len(stream)):
        received += decoder.feed(stream[i : i + 1])
    assert received == messages
    assert decoder.at_boundary
    assert decoder.fpdus_decoded == len(messages)
    assert decoder.stream_position == len(stream)


@pytest.mark.parametrize("crc,markers", OPTIONS)
def test_stream_in_random_pieces_round_trips(crc: bool, markers: bool) -> None:
    messages = ulpdus(40, seed=11)
    stream = stream_of(messages, crc, markers)
    rng = random.Random(3)
    decoder = FpduDecoder(crc=crc, markers=markers)
    received: list[bytes] = []
    position = 0
    while position < len(stream):
        size = rng.randrange(1, 1500)
        received += decoder.feed(memoryview(stream)[position : position + size])
        position += size
    assert received == messages


def test_markers_lengthen_the_stream_by_one_marker_per_512_octets() -> None:
    messages = ulpdus(20)
    plain = stream_of(messages, True, False)
    marked = stream_of(messages, True, True)
    markers = len(marked) - len(plain)
    assert markers % 4 == 0
    # Markers start at stream offset 0 and repeat every 512 octets (RFC 5044 s4.3).
    assert markers // 4 == (len(marked) + 511) // 512


def test_corrupted_crc_raises_wire_error_with_llp_crc_terminate() -> None:
    fpdu = bytearray(FpduEncoder(crc=True).encode(DdpSegment(DdpHeader.send(msn=1), b"data").encode()))
    fpdu[5] ^= 0x01
    decoder = FpduDecoder(crc=True)
    with pytest.raises(WireError) as caught:
        decoder.feed(fpdu)
    assert caught.value.name == "fpdu_crc_mismatch"
    assert caught.value.terminate == (2, 0, 2)
    assert caught.value.terminate.layer is TermLayer.LLP


def test_decoder_stays_failed_after_an_error() -> None:
    fpdu = bytearray(FpduEncoder(crc=True).encode(DdpSegment(DdpHeader.send(msn=1)).encode()))
    fpdu[-1] ^= 0xFF
    decoder = FpduDecoder(crc=True)
    with pytest.raises(WireError):
        decoder.feed(fpdu)
    with pytest.raises(WireError) as caught:
        decoder.feed(FpduEncoder(crc=True).encode(DdpSegment(DdpHeader.send(msn=1)).encode()))
    assert caught.value.name == "fpdu_stream_failed"
    assert decoder.error is not None and decoder.error.name == "fpdu_crc_mismatch"


def test_ulpdus_completed_before_the_error_ride_on_the_exception() -> None:
    good = DdpSegment(DdpHeader.send(msn=1), b"good").encode()
    encoder = FpduEncoder(crc=True)
    stream = bytearray(encoder.encode(good) + encoder.encode(good))
    stream[-1] ^= 0xFF  # second FPDU's CRC
    with pytest.raises(WireError) as caught:
        FpduDecoder(crc=True).feed(stream)
    assert caught.value.ulpdus == (good,)


def test_crc_is_not_checked_when_not_negotiated() -> None:
    ulpdu = DdpSegment(DdpHeader.send(msn=1), b"data").encode()
    fpdu = bytearray(FpduEncoder(crc=False).encode(ulpdu))
    fpdu[-1] ^= 0xFF
    assert FpduDecoder(crc=False).feed(fpdu) == [ulpdu]


def test_corrupted_marker_reserved_bits_are_an_error() -> None:
    stream = bytearray(stream_of(ulpdus(3), True, True))
    stream[0] = 0x01  # the marker at stream offset 0: reserved high 16 bits
    with pytest.raises(WireError) as caught:
        FpduDecoder(crc=True, markers=True).feed(stream)
    assert caught.value.name == "fpdu_marker_reserved_bits"


def test_marker_pointing_elsewhere_is_an_error() -> None:
    stream = bytearray(stream_of(ulpdus(3), False, True))
    stream[3] ^= 0x04  # FPDUPTR of the marker at offset 0
    with pytest.raises(WireError) as caught:
        FpduDecoder(crc=False, markers=True).feed(stream)
    assert caught.value.name == "fpdu_marker_pointer_mismatch"
    assert caught.value.terminate == (2, 0, 3)


def test_ulpdu_too_short_for_a_ddp_header_is_an_error() -> None:
    with pytest.raises(WireError) as caught:
        FpduDecoder(crc=False).feed(b"\x00\x04abcd\x00\x00" + bytes(4))
    assert caught.value.name == "fpdu_ulpdu_too_short"


def test_ulpdu_over_mulpdu_fails_on_both_sides() -> None:
    ulpdu = DdpSegment(DdpHeader.send(msn=1), bytes(100)).encode()
    encoder = FpduEncoder(max_ulpdu=64)
    with pytest.raises(WireError) as caught:
        encoder.encode(ulpdu)
    assert caught.value.name == "fpdu_ulpdu_too_long"
    assert encoder.stream_position == 0
    with pytest.raises(WireError) as caught:
        FpduDecoder(max_ulpdu=64).feed(FpduEncoder().encode(ulpdu))
    assert caught.value.name == "fpdu_ulpdu_too_long"


def test_large_streams_decode_on_several_threads_at_once() -> None:
    """Exercises the GIL-released path (inputs over 4 KiB) from concurrent threads."""
    messages = [DdpSegment(DdpHeader.send(msn=i), bytes([i % 256]) * 60000).encode() for i in range(1, 17)]
    stream = stream_of(messages, True, True)
    results: dict[int, list[bytes]] = {}

    def decode(slot: int) -> None:
        results[slot] = FpduDecoder(crc=True, markers=True).feed(stream)

    threads = [threading.Thread(target=decode, args=(slot,)) for slot in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[slot] == messages for slot in range(4))
