// MPA FPDU framing, RFC 5044 s4: ULPDU_Length (BE), ULPDU, pad to (2 + ULPDU_Length) % 4 == 0,
// CRC32c over everything before it (markers included), least-significant octet first.
// Markers (s4.3): every 512 octets of the direction's stream counted from the first octet of
// the first FPDU; 16 zero bits then FPDUPTR = marker position - ULPDU_Length position, or 0
// when the marker sits exactly at the start of an FPDU (it belongs to the FPDU that follows).
//
// Every expected octet below was derived by hand from those rules (the CRCs with a bitwise
// CRC32c written for the purpose); payloads are position-dependent patterns so a misplaced
// octet cannot hide.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "core/wire/fpdu_decoder.h"
#include "core/wire/fpdu_encoder.h"
#include "fpdu_test_util.h"
#include "wire_test_util.h"

namespace rdma_interop::wire {
namespace {

using testing::Bytes;
using testing::decode_stream;
using testing::decode_whole;
using testing::encode_stream;
using testing::hex;
using testing::pattern;
using testing::StreamBuilder;
using testing::to_hex;

constexpr FpduOptions kCrcNoMarkers{.crc = true, .markers = false};
constexpr FpduOptions kNoCrcNoMarkers{.crc = false, .markers = false};
constexpr FpduOptions kCrcMarkers{.crc = true, .markers = true};
constexpr FpduOptions kNoCrcMarkers{.crc = false, .markers = true};

// An RDMAP Send (DDP untagged, L, QN 0, MSN 1, MO 0) carrying "Hello": 23 octets.
const Bytes kSendHello = hex("41 43 00000000 00000000 00000001 00000000 48 65 6c 6c 6f");

void expect_encodes_to(const FpduOptions& options, const std::vector<Bytes>& ulpdus,
                       const Bytes& wire) {
  FpduEncoder encoder(options);
  EXPECT_EQ(to_hex(encode_stream(encoder, ulpdus)), to_hex(wire));
  EXPECT_EQ(encoder.stream_position(), wire.size());
}

void expect_decodes_to(const FpduOptions& options, const Bytes& wire,
                       const std::vector<Bytes>& ulpdus) {
  FpduDecoder whole(options);
  auto result = decode_whole(whole, wire);
  ASSERT_FALSE(result.error.has_value()) << error_name(*result.error);
  EXPECT_EQ(result.ulpdus, ulpdus);
  EXPECT_EQ(whole.stream_position(), wire.size());
  EXPECT_EQ(whole.fpdus_decoded(), ulpdus.size());
  EXPECT_TRUE(whole.at_boundary());

  FpduDecoder bytewise(options);
  auto one_by_one = decode_stream(bytewise, wire, [] { return 1; });
  ASSERT_FALSE(one_by_one.error.has_value()) << error_name(*one_by_one.error);
  EXPECT_EQ(one_by_one.ulpdus, ulpdus);
}

void expect_vector(const FpduOptions& options, const std::vector<Bytes>& ulpdus,
                   const Bytes& wire) {
  expect_encodes_to(options, ulpdus, wire);
  expect_decodes_to(options, wire, ulpdus);
}

std::optional<WireError> decode_error(const FpduOptions& options, const Bytes& wire) {
  FpduDecoder decoder(options);
  auto result = decode_whole(decoder, wire);
  return result.error;
}

// ---- Single FPDUs, every option combination ---------------------------------------------------

TEST(FpduVectors, CrcOnMarkersOffPadsToFourAndAppendsCrcLeastSignificantFirst) {
  expect_vector(kCrcNoMarkers, {kSendHello},
                hex("00 17 | 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 48 65 6c 6c 6f"
                    "| 00 00 00 | 20 f5 b1 01"));
}

TEST(FpduVectors, CrcOffStillSendsAZeroCrcField) {
  expect_vector(kNoCrcNoMarkers, {kSendHello},
                hex("00 17 | 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 48 65 6c 6c 6f"
                    "| 00 00 00 | 00 00 00 00"));
}

TEST(FpduVectors, MarkersOnFirstFpduStartsWithAZeroMarkerCoveredByTheCrc) {
  expect_vector(kCrcMarkers, {kSendHello},
                hex("00 00 00 00 | 00 17 | 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00"
                    "48 65 6c 6c 6f | 00 00 00 | e3 04 e9 7c"));
}

TEST(FpduVectors, MarkersOnCrcOff) {
  expect_vector(kNoCrcMarkers, {kSendHello},
                hex("00 00 00 00 | 00 17 | 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00"
                    "48 65 6c 6c 6f | 00 00 00 | 00 00 00 00"));
}

TEST(FpduVectors, MinimumUlpduNeedsNoPad) {
  expect_vector(kCrcNoMarkers, {pattern(14, 0xa0), pattern(16, 0xb0)},
                hex("00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad f9 32 c9 7c"
                    "00 10 b0 b1 b2 b3 b4 b5 b6 b7 b8 b9 ba bb bc bd be bf 00 00 ec d4 41 e7"));
}

TEST(FpduVectors, TwoSmallFpdusWithMarkersOnlyTheFirstCarriesAMarker) {
  const std::vector<Bytes> ulpdus = {pattern(14, 0xa0), pattern(16, 0xb0)};
  expect_vector(kCrcMarkers, ulpdus,
                hex("00 00 00 00 00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad 2d fe 7c 82"
                    "00 10 b0 b1 b2 b3 b4 b5 b6 b7 b8 b9 ba bb bc bd be bf 00 00 ec d4 41 e7"));
  expect_vector(kNoCrcMarkers, ulpdus,
                hex("00 00 00 00 00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad 00 00 00 00"
                    "00 10 b0 b1 b2 b3 b4 b5 b6 b7 b8 b9 ba bb bc bd be bf 00 00 00 00 00 00"));
}

// ---- Markers inside and between FPDUs ---------------------------------------------------------

TEST(FpduMarkers, MarkerInTheMiddleOfAnFpduPointsBackToItsLengthField) {
  const Bytes u0 = pattern(600, 0x00);
  const Bytes wire = StreamBuilder()
                         .hex("00 00 00 00")  // marker at 0, FPDUPTR 0
                         .hex("02 58")        // ULPDU_Length 600 at stream octet 4
                         .slice(u0, 0, 506)   // stream octets 6..511
                         .hex("00 00 01 fc")  // marker at 512: 512 - 4 = 508
                         .slice(u0, 506, 94)  // stream octets 516..609
                         .hex("00 00")        // pad: 2 + 600 = 602 -> 604
                         .hex("6a 66 28 1a")  // CRC32c over octets 0..611
                         .get();
  ASSERT_EQ(wire.size(), 616u);
  expect_vector(kCrcMarkers, {u0}, wire);
}

TEST(FpduMarkers, MarkerJustBeforeTheCrcBelongsToThatFpdu) {
  const Bytes u0 = pattern(506, 0x00);
  const Bytes wire = StreamBuilder()
                         .hex("00 00 00 00")  // marker at 0
                         .hex("01 fa")        // ULPDU_Length 506, no pad
                         .slice(u0, 0, 506)   // stream octets 6..511
                         .hex("00 00 01 fc")  // marker at 512 points back 508 octets
                         .hex("29 ec d9 09")  // CRC32c covers that marker too
                         .get();
  expect_vector(kCrcMarkers, {u0}, wire);
}

TEST(FpduMarkers, MarkerExactlyAtAnFpduBoundaryIsZeroAndBelongsToTheNextFpdu) {
  const Bytes u0 = pattern(502, 0x00);
  const Bytes u1 = pattern(20, 0x80);
  const Bytes wire = StreamBuilder()
                         .hex("00 00 00 00")  // marker at 0
                         .hex("01 f6")        // ULPDU_Length 502
                         .slice(u0, 0, 502)
                         .hex("22 8a db 98")  // CRC; the first FPDU ends at octet 512
                         .hex("00 00 00 00")  // marker at 512 starts the second FPDU
                         .hex("00 14")        // ULPDU_Length 20
                         .slice(u1, 0, 20)
                         .hex("00 00")        // pad
                         .hex("39 0d d4 d9")  // CRC over marker, length, ULPDU, pad
                         .get();
  ASSERT_EQ(wire.size(), 544u);
  expect_vector(kCrcMarkers, {u0, u1}, wire);
}

const std::vector<Bytes> kSeveral = {pattern(300, 0x10), pattern(14, 0x20), pattern(700, 0x30),
                                     pattern(100, 0x40), pattern(1200, 0x50)};

// Five FPDUs starting at 0, 312, 332, 1048 and 1156; markers at 0, 512, 1024, 1536, 2048.
Bytes several_fpdus(bool crc) {
  const auto& u = kSeveral;
  auto c = [crc](const char* crc_hex) { return crc ? crc_hex : "00 00 00 00"; };
  return StreamBuilder()
      .hex("00 00 00 00")  // marker at 0, FPDUPTR 0
      .hex("01 2c")        // FPDU 0 at 4: ULPDU_Length 300
      .slice(u[0], 0, 300)
      .hex("00 00")  // pad
      .hex(c("50 5a c5 9f"))
      .hex("00 0e")  // FPDU 1 at 312: ULPDU_Length 14
      .slice(u[1], 0, 14)
      .hex(c("b1 d2 fd 1f"))
      .hex("02 bc")  // FPDU 2 at 332: ULPDU_Length 700
      .slice(u[2], 0, 178)
      .hex("00 00 00 b4")  // marker at 512, FPDUPTR 512 - 332 = 180
      .slice(u[2], 178, 508)
      .hex("00 00 02 b4")  // marker at 1024, FPDUPTR 692
      .slice(u[2], 686, 14)
      .hex("00 00")  // pad
      .hex(c("da f7 85 ac"))
      .hex("00 64")  // FPDU 3 at 1048: ULPDU_Length 100
      .slice(u[3], 0, 100)
      .hex("00 00")  // pad
      .hex(c("b2 c7 18 27"))
      .hex("04 b0")  // FPDU 4 at 1156: ULPDU_Length 1200
      .slice(u[4], 0, 378)
      .hex("00 00 01 7c")  // marker at 1536, FPDUPTR 380
      .slice(u[4], 378, 508)
      .hex("00 00 03 7c")  // marker at 2048, FPDUPTR 892
      .slice(u[4], 886, 314)
      .hex("00 00")  // pad
      .hex(c("95 f3 2a af"))
      .get();
}

TEST(FpduMarkers, SeveralFpdusInARowCrossingMarkerPositionsWithCrc) {
  const Bytes wire = several_fpdus(true);
  ASSERT_EQ(wire.size(), 2372u);
  expect_vector(kCrcMarkers, kSeveral, wire);
}

TEST(FpduMarkers, SeveralFpdusInARowCrossingMarkerPositionsWithoutCrc) {
  expect_vector(kNoCrcMarkers, kSeveral, several_fpdus(false));
}

TEST(FpduMarkers, EncoderSplitsGatherPartsAroundMarkersLikeOnePart) {
  const Bytes u = pattern(600, 0x00);
  const std::span<const std::uint8_t> all(u);
  const std::span<const std::uint8_t> parts[] = {all.first(18), all.subspan(18, 490),
                                                 all.subspan(508)};
  FpduEncoder encoder(kCrcMarkers);
  FpduFrame frame;
  auto length = encoder.encode(parts, frame);
  ASSERT_TRUE(length.has_value()) << error_name(length.error());
  Bytes wire;
  frame.append_to(wire);
  FpduEncoder reference(kCrcMarkers);
  EXPECT_EQ(to_hex(wire), to_hex(encode_stream(reference, {u})));
}

// ---- Encoder promises -------------------------------------------------------------------------

// Octets of the frame's slices that lie inside `buffer` (the encoder must not copy them).
std::size_t octets_pointing_into(const FpduFrame& frame, std::span<const std::uint8_t> buffer) {
  std::size_t inside = 0;
  for (const auto& s : frame.slices()) {
    if (s.empty()) continue;
    const bool starts_inside =
        s.data() >= buffer.data() && s.data() < buffer.data() + buffer.size();
    if (starts_inside) {
      EXPECT_LE(s.data() + s.size(), buffer.data() + buffer.size());
      inside += s.size();
    }
  }
  return inside;
}

// Small leading parts (the DDP/RDMAP header) are copied next to the length field so they
// cost one CRC call; a payload too large to inline is referenced, never copied.
TEST(FpduEncoder, SlicesReferenceTheCallersPayloadAndCopyOnlyTheHeader) {
  for (const FpduOptions& options : {kCrcNoMarkers, kNoCrcNoMarkers, kCrcMarkers, kNoCrcMarkers}) {
    SCOPED_TRACE(options.markers ? "markers" : "no markers");
    const Bytes header = pattern(18, 1);
    const Bytes payload = pattern(1500, 2);
    const std::span<const std::uint8_t> parts[] = {header, payload};
    FpduEncoder encoder(options);
    FpduFrame frame;
    ASSERT_TRUE(encoder.encode(parts, frame).has_value());
    EXPECT_EQ(octets_pointing_into(frame, header), 0u);
    EXPECT_EQ(octets_pointing_into(frame, payload), payload.size());
  }
}

// A small FPDU without markers is built whole in the frame (IBV_SEND_INLINE's idea): one
// slice, the same octets the referencing path would send; with markers, or one octet over
// the inline capacity, the payload is referenced again.
TEST(FpduEncoder, ASmallFpduIsOneSliceOfTheFramesOwnWithTheSameOctets) {
  for (const FpduOptions& options : {kCrcNoMarkers, kNoCrcNoMarkers, kCrcMarkers}) {
    SCOPED_TRACE(options.markers ? "markers" : (options.crc ? "crc" : "no crc"));
    const Bytes header = pattern(18, 1);
    // 2 + 18 + 230 + 2 pad + 4 CRC = 256: the largest that inlines.
    for (std::size_t payload_length :
         {std::size_t{0}, std::size_t{68}, std::size_t{230}, std::size_t{231}}) {
      const Bytes payload = pattern(payload_length, 2);
      const std::span<const std::uint8_t> parts[] = {header, payload};
      FpduEncoder encoder(options);
      FpduFrame frame;
      ASSERT_TRUE(encoder.encode(parts, frame).has_value());
      const bool inlined = !options.markers && payload_length <= 232;
      EXPECT_EQ(frame.slices().size() == 1, inlined) << payload_length;
      if (!payload.empty()) {
        EXPECT_EQ(octets_pointing_into(frame, payload), inlined ? 0u : payload.size());
      }
      Bytes wire;
      frame.append_to(wire);
      Bytes ulpdu = header;
      ulpdu.insert(ulpdu.end(), payload.begin(), payload.end());
      // The decoder (CRC checked) is the judge of the octets; the hand-made vectors above
      // (small FPDUs, so inlined now) check the layout octet by octet.
      FpduDecoder decoder(options);
      const auto decoded = decode_whole(decoder, wire);
      ASSERT_FALSE(decoded.error.has_value()) << error_name(*decoded.error);
      EXPECT_EQ(decoded.ulpdus, std::vector<Bytes>{ulpdu}) << payload_length;
      EXPECT_EQ(encoder.stream_position(), wire.size());
    }
  }
}

TEST(FpduEncoder, UlpduAboveMaxIsRefusedAndLeavesTheStreamPositionAlone) {
  FpduEncoder encoder(FpduOptions{.crc = true, .markers = false, .max_ulpdu = 100});
  FpduFrame frame;
  const Bytes ok = pattern(100);
  const Bytes too_long = pattern(101);
  const std::span<const std::uint8_t> ok_parts[] = {ok};
  const std::span<const std::uint8_t> long_parts[] = {too_long};
  ASSERT_TRUE(encoder.encode(ok_parts, frame).has_value());
  const auto position = encoder.stream_position();
  EXPECT_EQ(position, 108u);  // 2 + 100 + 2 pad + 4 CRC
  auto refused = encoder.encode(long_parts, frame);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), WireError::kFpduUlpduTooLong);
  EXPECT_EQ(encoder.stream_position(), position);
}

TEST(FpduEncoder, GatherPartsAddingUpAboveMaxAreRefused) {
  FpduEncoder encoder(FpduOptions{.crc = true, .markers = false, .max_ulpdu = 100});
  FpduFrame frame;
  const Bytes a = pattern(60), b = pattern(41);
  const std::span<const std::uint8_t> parts[] = {a, b};
  auto refused = encoder.encode(parts, frame);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), WireError::kFpduUlpduTooLong);
  EXPECT_EQ(encoder.stream_position(), 0u);
}

TEST(FpduEncoder, MarkersCapTheUlpduSoEveryFpduPtrFitsSixteenBits) {
  FpduEncoder encoder(kCrcMarkers);
  FpduFrame frame;
  const Bytes at_cap = pattern(kMaxUlpduWithMarkers);
  const Bytes over_cap = pattern(kMaxUlpduWithMarkers + 1);
  const std::span<const std::uint8_t> over_parts[] = {over_cap};
  auto refused = encoder.encode(over_parts, frame);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error(), WireError::kFpduUlpduTooLong);
  const std::span<const std::uint8_t> cap_parts[] = {at_cap};
  EXPECT_TRUE(encoder.encode(cap_parts, frame).has_value());
}

// ---- Decoder errors ---------------------------------------------------------------------------

TEST(FpduDecodeErrors, CrcMismatchInTheCrcFieldOrInTheUlpdu) {
  Bytes wire =
      hex("00 17 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 48 65 6c 6c 6f"
          "00 00 00 20 f5 b1 01");
  Bytes bad_crc = wire;
  bad_crc.back() ^= 0x01;
  EXPECT_EQ(decode_error(kCrcNoMarkers, bad_crc), WireError::kFpduCrcMismatch);
  Bytes bad_payload = wire;
  bad_payload[20] ^= 0x80;
  EXPECT_EQ(decode_error(kCrcNoMarkers, bad_payload), WireError::kFpduCrcMismatch);
  // The CRC is over octets in wire order, so a byte-swapped CRC is a mismatch too.
  Bytes swapped = wire;
  std::reverse(swapped.end() - 4, swapped.end());
  EXPECT_EQ(decode_error(kCrcNoMarkers, swapped), WireError::kFpduCrcMismatch);
}

TEST(FpduDecodeErrors, CrcOffIgnoresWhateverIsInTheCrcField) {
  const Bytes wire = hex("00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad de ad be ef");
  FpduDecoder decoder(kNoCrcNoMarkers);
  auto result = decode_whole(decoder, wire);
  ASSERT_FALSE(result.error.has_value()) << error_name(*result.error);
  EXPECT_EQ(result.ulpdus, std::vector<Bytes>{pattern(14, 0xa0)});
}

TEST(FpduDecodeErrors, CrcMismatchWhenAMarkerOctetIsAltered) {
  // The CRC covers the marker: change the marker and keep everything else.
  Bytes wire = several_fpdus(true);
  wire[514] = 0x02;  // marker at 512 now says FPDUPTR 0x02b4 instead of 0x00b4
  auto error = decode_error(kCrcMarkers, wire);
  ASSERT_TRUE(error.has_value());
  // Either check may fire first; both are errors the peer caused.
  EXPECT_TRUE(*error == WireError::kFpduMarkerPointerMismatch ||
              *error == WireError::kFpduCrcMismatch)
      << error_name(*error);
}

TEST(FpduDecodeErrors, MarkerWithReservedBitsSet) {
  Bytes wire = hex("00 00 00 00 00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad 00 00 00 00");
  wire[0] = 0x80;
  EXPECT_EQ(decode_error(kNoCrcMarkers, wire), WireError::kFpduMarkerReservedBits);
  wire[0] = 0x00;
  wire[1] = 0x01;
  EXPECT_EQ(decode_error(kNoCrcMarkers, wire), WireError::kFpduMarkerReservedBits);
}

TEST(FpduDecodeErrors, MarkerAtStreamStartThatDoesNotSayZero) {
  const Bytes wire = hex("00 00 00 04 00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad 00 00 00 00");
  EXPECT_EQ(decode_error(kNoCrcMarkers, wire), WireError::kFpduMarkerPointerMismatch);
}

TEST(FpduDecodeErrors, MarkerInsideAnFpduPointingElsewhere) {
  Bytes wire = several_fpdus(false);
  wire[514] = 0x00;
  wire[515] = 0xb0;  // 176 instead of 180
  EXPECT_EQ(decode_error(kNoCrcMarkers, wire), WireError::kFpduMarkerPointerMismatch);
}

TEST(FpduMarkers, ReceiverTreatsTheTwoLowFpduPtrBitsAsZero) {
  // RFC 5044 s4.3: the low two bits are zero on transmit and treated as zero on receipt.
  Bytes wire = several_fpdus(false);
  wire[515] = 0xb7;  // 180 | 3
  FpduDecoder decoder(kNoCrcMarkers);
  auto result = decode_whole(decoder, wire);
  ASSERT_FALSE(result.error.has_value()) << error_name(*result.error);
  EXPECT_EQ(result.ulpdus, kSeveral);
}

TEST(FpduDecodeErrors, MarkerAtAnFpduBoundaryPointingBackToThePreviousFpdu) {
  const Bytes u0 = pattern(502, 0x00);
  const Bytes u1 = pattern(20, 0x80);
  const Bytes wire = StreamBuilder()
                         .hex("00 00 00 00 01 f6")
                         .slice(u0, 0, 502)
                         .hex("00 00 00 00")
                         .hex("00 00 01 fc")  // must be 0: the marker belongs to the next FPDU
                         .hex("00 14")
                         .slice(u1, 0, 20)
                         .hex("00 00 00 00 00 00")
                         .get();
  EXPECT_EQ(decode_error(kNoCrcMarkers, wire), WireError::kFpduMarkerPointerMismatch);
}

TEST(FpduDecodeErrors, UlpduTooShortToHoldADdpHeader) {
  EXPECT_EQ(decode_error(kNoCrcNoMarkers,
                         hex("00 0d a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac 00 00 00 00 00")),
            WireError::kFpduUlpduTooShort);
  EXPECT_EQ(decode_error(kNoCrcNoMarkers, hex("00 00 00 00 00 00 00 00")),
            WireError::kFpduUlpduTooShort);
  EXPECT_EQ(decode_error(kNoCrcMarkers, hex("00 00 00 00 00 00 00 00 00 00 00 00")),
            WireError::kFpduUlpduTooShort);
}

TEST(FpduDecodeErrors, UlpduAboveTheConfiguredMaximumIsRefusedFromItsLengthField) {
  const FpduOptions small{.crc = false, .markers = false, .max_ulpdu = 100};
  Bytes at_max = hex("00 64");
  const Bytes body = pattern(100);
  at_max.insert(at_max.end(), body.begin(), body.end());
  at_max.insert(at_max.end(), 6, 0);  // pad 2, CRC 4
  FpduDecoder ok(small);
  auto result = decode_whole(ok, at_max);
  ASSERT_FALSE(result.error.has_value()) << error_name(*result.error);
  EXPECT_EQ(result.ulpdus.size(), 1u);

  // 101 octets announced; the decoder must not wait for them to refuse.
  Bytes over = hex("00 65");
  over.insert(over.end(), 20, 0);
  EXPECT_EQ(decode_error(small, over), WireError::kFpduUlpduTooLong);
}

TEST(FpduDecodeErrors, MarkersCapTheUlpduLength) {
  // 0xfc00 = kMaxUlpduWithMarkers + 1.
  EXPECT_EQ(decode_error(kCrcMarkers, hex("00 00 00 00 fc 00 00 00 00 00")),
            WireError::kFpduUlpduTooLong);
}

TEST(FpduDecodeErrors, FailedDecoderStaysFailed) {
  const Bytes good = hex("00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad f9 32 c9 7c");
  Bytes bad = good;
  bad[5] ^= 0xff;
  FpduDecoder decoder(kCrcNoMarkers);
  auto first = decode_whole(decoder, bad);
  ASSERT_TRUE(first.error.has_value());
  EXPECT_EQ(*first.error, WireError::kFpduCrcMismatch);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto again = decoder.step(good);
    ASSERT_FALSE(again.has_value());
    EXPECT_EQ(again.error(), WireError::kFpduStreamFailed);
  }
  EXPECT_FALSE(decoder.at_boundary());
}

// ---- Decoder bookkeeping and zero copy --------------------------------------------------------

TEST(FpduDecoder, ReportsBoundariesAndProgress) {
  const Bytes wire = several_fpdus(true);
  FpduDecoder decoder(kCrcMarkers);
  EXPECT_TRUE(decoder.at_boundary());
  auto head = decode_whole(decoder, std::span(wire).first(100));
  ASSERT_FALSE(head.error.has_value());
  EXPECT_TRUE(head.ulpdus.empty());
  EXPECT_FALSE(decoder.at_boundary());
  EXPECT_EQ(decoder.stream_position(), 100u);
  auto rest = decode_whole(decoder, std::span(wire).subspan(100));
  ASSERT_FALSE(rest.error.has_value()) << error_name(*rest.error);
  EXPECT_EQ(rest.ulpdus, kSeveral);
  EXPECT_EQ(decoder.fpdus_decoded(), kSeveral.size());
  EXPECT_EQ(decoder.stream_position(), wire.size());
  EXPECT_TRUE(decoder.at_boundary());
}

TEST(FpduDecoder, StepStopsAfterEachCompleteFpdu) {
  const Bytes wire =
      hex("00 0e a0 a1 a2 a3 a4 a5 a6 a7 a8 a9 aa ab ac ad f9 32 c9 7c"
          "00 10 b0 b1 b2 b3 b4 b5 b6 b7 b8 b9 ba bb bc bd be bf 00 00 ec d4 41 e7");
  FpduDecoder decoder(kCrcNoMarkers);
  auto first = decoder.step(wire);
  ASSERT_TRUE(first.has_value()) << error_name(first.error());
  ASSERT_TRUE(first->ulpdu.has_value());
  EXPECT_EQ(first->consumed, 20u);
  EXPECT_EQ(Bytes(first->ulpdu->begin(), first->ulpdu->end()), pattern(14, 0xa0));
}

TEST(FpduDecoder, WholeFpduWithoutMarkersIsHandedOutAsAViewIntoTheInput) {
  for (const FpduOptions& options : {kCrcNoMarkers, kNoCrcNoMarkers}) {
    SCOPED_TRACE(options.crc ? "crc" : "no crc");
    FpduEncoder encoder(options);
    const Bytes ulpdu = pattern(1000, 3);
    const Bytes wire = encode_stream(encoder, {ulpdu});
    FpduDecoder decoder(options);
    auto step = decoder.step(wire);
    ASSERT_TRUE(step.has_value()) << error_name(step.error());
    ASSERT_TRUE(step->ulpdu.has_value());
    EXPECT_EQ(step->ulpdu->data(), wire.data() + 2);
    EXPECT_EQ(step->ulpdu->size(), ulpdu.size());
  }
}

// ---- Direct placement -------------------------------------------------------------------------

// One FPDU whose ULPDU is `ulpdu`, and a decoder fed its first `head` octets.
struct HalfRead {
  Bytes wire;
  FpduDecoder decoder{kCrcNoMarkers};
};

HalfRead fed_up_to(const Bytes& ulpdu, std::size_t head) {
  HalfRead h;
  FpduEncoder encoder(kCrcNoMarkers);
  h.wire = encode_stream(encoder, {ulpdu});
  auto step = h.decoder.step(std::span<const std::uint8_t>(h.wire).first(head));
  EXPECT_TRUE(step.has_value());
  EXPECT_EQ(step->consumed, head);
  EXPECT_FALSE(step->ulpdu.has_value());
  return h;
}

TEST(FpduPlacement, OctetsPlacedByTheCallerAreCheckedByTheCrcAndNamedInTheUlpdu) {
  const Bytes ulpdu = pattern(40000, 3);  // 2 + 40000 + pad 2 + CRC 4 on the wire
  HalfRead h = fed_up_to(ulpdu, 1000);
  auto u = h.decoder.ulpdu_in_progress();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->received, 998u);
  EXPECT_EQ(u->length, 40000u);
  EXPECT_EQ(Bytes(u->head.begin(), u->head.end()), Bytes(ulpdu.begin(), ulpdu.begin() + 998));

  // Two reads straight to the place, then the rest (the last octets, pad, CRC) as usual.
  const std::span<const std::uint8_t> wire(h.wire);
  h.decoder.place(wire.subspan(1000, 20000));
  u = h.decoder.ulpdu_in_progress();
  ASSERT_TRUE(u.has_value());
  EXPECT_EQ(u->received, 20998u);
  EXPECT_EQ(u->head.size(), 998u) << "the placed octets are not the decoder's";
  h.decoder.place(wire.subspan(21000, 18000));
  auto step = h.decoder.step(wire.subspan(39000));
  ASSERT_TRUE(step.has_value()) << error_name(step.error());
  ASSERT_TRUE(step->ulpdu.has_value());
  EXPECT_EQ(step->placed.offset, 998u);
  EXPECT_EQ(step->placed.length, 38000u);
  ASSERT_EQ(step->ulpdu->size(), 40000u);
  EXPECT_TRUE(std::equal(step->ulpdu->begin(), step->ulpdu->begin() + 998, ulpdu.begin()));
  EXPECT_TRUE(std::equal(step->ulpdu->begin() + 38998, step->ulpdu->end(),
                         ulpdu.begin() + 38998));
  EXPECT_TRUE(h.decoder.at_boundary());
  EXPECT_EQ(h.decoder.stream_position(), h.wire.size());
}

TEST(FpduPlacement, ACorruptOctetThatWasPlacedFailsTheCrc) {
  const Bytes ulpdu = pattern(20000, 9);
  HalfRead h = fed_up_to(ulpdu, 100);
  h.wire[5000] ^= 0x10;
  const std::span<const std::uint8_t> wire(h.wire);
  ASSERT_TRUE(h.decoder.ulpdu_in_progress().has_value());
  h.decoder.place(wire.subspan(100, ulpdu.size() + 2 - 100));
  auto step = h.decoder.step(wire.subspan(ulpdu.size() + 2));
  ASSERT_FALSE(step.has_value());
  EXPECT_EQ(step.error(), WireError::kFpduCrcMismatch);
}

TEST(FpduPlacement, NothingToPlaceWithMarkersInThePadOrAfterOctetsCameThroughStep) {
  const Bytes ulpdu = pattern(4001, 1);  // 2 + 4001 + pad 1 + CRC 4
  HalfRead h = fed_up_to(ulpdu, 500);
  const std::span<const std::uint8_t> wire(h.wire);
  h.decoder.place(wire.subspan(500, 100));
  ASSERT_TRUE(h.decoder.step(wire.subspan(600, 100)).has_value());
  EXPECT_FALSE(h.decoder.ulpdu_in_progress().has_value())
      << "a second range would leave the ULPDU with two holes";
  auto step = h.decoder.step(wire.subspan(700));
  ASSERT_TRUE(step.has_value() && step->ulpdu.has_value());
  EXPECT_EQ(step->placed.offset, 498u);
  EXPECT_EQ(step->placed.length, 100u);

  HalfRead in_pad = fed_up_to(ulpdu, 4003);  // the ULPDU's octets all here, the pad not
  EXPECT_FALSE(in_pad.decoder.ulpdu_in_progress().has_value()) << "in the pad";
  HalfRead before_pad = fed_up_to(ulpdu, 4002);
  EXPECT_TRUE(before_pad.decoder.ulpdu_in_progress().has_value()) << "one octet to come";

  FpduOptions markers = kCrcNoMarkers;
  markers.markers = true;
  FpduDecoder with_markers(markers);
  FpduEncoder encoder(markers);
  const Bytes marked = encode_stream(encoder, {ulpdu});
  ASSERT_TRUE(with_markers.step(std::span<const std::uint8_t>(marked).first(600)).has_value());
  EXPECT_FALSE(with_markers.ulpdu_in_progress().has_value())
      << "with markers the payload's octets are not contiguous on the wire";
}

TEST(FpduPlacement, PlacingMoreThanTheUlpduHoldsFailsTheDecoder) {
  HalfRead h = fed_up_to(pattern(20000, 6), 100);
  const Bytes too_much(20000, 0);  // 19902 of the ULPDU are to come
  h.decoder.place(too_much);
  EXPECT_FALSE(h.decoder.ulpdu_in_progress().has_value());
  auto step = h.decoder.step(std::span<const std::uint8_t>(h.wire).subspan(100));
  ASSERT_FALSE(step.has_value());
  EXPECT_EQ(step.error(), WireError::kFpduStreamFailed);
}

TEST(FpduPlacement, TheNextUlpduIsReadFromOctetsLookedAtOnlyAtABoundary) {
  const Bytes ulpdu = pattern(30000, 4);
  FpduEncoder encoder(kCrcNoMarkers);
  const Bytes wire = encode_stream(encoder, {ulpdu});
  const std::span<const std::uint8_t> peeked = std::span<const std::uint8_t>(wire).first(16);
  FpduDecoder decoder(kCrcNoMarkers);
  auto next = decoder.next_ulpdu(peeked);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->length, 30000u);
  EXPECT_EQ(next->received, 14u);
  EXPECT_EQ(Bytes(next->head.begin(), next->head.end()), Bytes(ulpdu.begin(), ulpdu.begin() + 14));
  EXPECT_FALSE(decoder.next_ulpdu(peeked.first(1)).has_value()) << "no length field yet";
  const Bytes too_short = hex("00 05 00 00 00 00 00 00");
  EXPECT_FALSE(decoder.next_ulpdu(too_short).has_value()) << "a length step() would refuse";

  // The octets looked at, then read: the decoder is inside that ULPDU, ready to place.
  ASSERT_TRUE(decoder.step(peeked).has_value());
  EXPECT_FALSE(decoder.next_ulpdu(peeked).has_value()) << "not at a boundary";
  auto inside = decoder.ulpdu_in_progress();
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(inside->received, 14u);
  EXPECT_EQ(inside->length, 30000u);

  FpduOptions markers = kCrcNoMarkers;
  markers.markers = true;
  EXPECT_FALSE(FpduDecoder(markers).next_ulpdu(peeked).has_value());
}

}  // namespace
}  // namespace rdma_interop::wire
