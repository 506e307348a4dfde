// MPA Request/Reply frames, RFC 5044 s7.1 and RFC 6581 s3. Expected octets are written out
// from the RFC layout:
//   0..15 key | 16 flags M=80 C=40 R=20 E=10 res=0f | 17 Rev | 18..19 PD_Length (BE)
//   20.. [IRD word: 8000 p2p, 4000 Send RTR, 3fff IRD][ORD word: 8000 Write RTR,
//         4000 Read RTR, 3fff ORD] private data      (PD_Length counts the IRD/ORD words)
#include "core/wire/mpa_frame.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "wire_test_util.h"

namespace rdma_interop::wire {
namespace {

using testing::ascii;
using testing::Bytes;
using testing::hex;
using testing::to_hex;

// "MPA ID Req Frame" and "MPA ID Rep Frame" in ASCII.
constexpr const char* kReqKey = "4d 50 41 20 49 44 20 52 65 71 20 46 72 61 6d 65";
constexpr const char* kRepKey = "4d 50 41 20 49 44 20 52 65 70 20 46 72 61 6d 65";

Bytes frame_bytes(const char* key, const std::string& rest) {
  return hex(std::string(key) + rest);
}

MpaFrame request(std::uint8_t rev) {
  MpaFrame f;
  f.kind = MpaFrameKind::kRequest;
  f.revision = rev;
  return f;
}
MpaFrame reply(std::uint8_t rev) {
  MpaFrame f = request(rev);
  f.kind = MpaFrameKind::kReply;
  return f;
}
MpaFrame enhanced(MpaFrame f, MpaEnhancedParams p) {
  f.enhanced = p;
  return f;
}

struct MpaVector {
  std::string name;
  MpaFrame frame;
  Bytes wire;
};

// Encodes to exactly `wire`, decodes back to exactly `frame`, and the stream helpers agree.
void expect_vector(const MpaVector& v, const MpaLimits& limits = {}) {
  SCOPED_TRACE(v.name);
  auto encoded = encode_mpa_frame(v.frame, limits);
  ASSERT_TRUE(encoded.has_value()) << error_name(encoded.error());
  EXPECT_EQ(to_hex(*encoded), to_hex(v.wire));

  auto decoded = decode_mpa_frame(v.wire, limits);
  ASSERT_TRUE(decoded.has_value()) << error_name(decoded.error());
  EXPECT_EQ(*decoded, v.frame) << to_string(*decoded);

  EXPECT_EQ(mpa_pd_length(v.frame), v.wire.size() - mpa_header_length(v.frame));
  auto length = mpa_frame_length(std::span(v.wire).first(kMpaHeaderLen), limits);
  ASSERT_TRUE(length.has_value()) << error_name(length.error());
  EXPECT_EQ(*length, v.wire.size());
}

void expect_decode_error(const Bytes& wire, WireError want, const MpaLimits& limits = {}) {
  auto decoded = decode_mpa_frame(wire, limits);
  ASSERT_FALSE(decoded.has_value()) << "decoded " << to_string(*decoded);
  EXPECT_EQ(error_name(decoded.error()), error_name(want));
}

void expect_encode_error(const MpaFrame& frame, WireError want, const MpaLimits& limits = {}) {
  auto encoded = encode_mpa_frame(frame, limits);
  ASSERT_FALSE(encoded.has_value()) << "encoded " << to_hex(*encoded);
  EXPECT_EQ(error_name(encoded.error()), error_name(want));
}

// ---- Revision 1 (RFC 5044) -----------------------------------------------------------------

TEST(MpaFrameVectors, Revision1RequestWithEveryMarkerAndCrcCombination) {
  for (int m = 0; m < 2; ++m) {
    for (int c = 0; c < 2; ++c) {
      MpaFrame f = request(1);
      f.markers = m;
      f.crc = c;
      const int flags = (m ? 0x80 : 0) | (c ? 0x40 : 0);
      char flags_hex[8];
      std::snprintf(flags_hex, sizeof flags_hex, " %02x", flags);
      expect_vector({"rev1 request flags" + std::string(flags_hex), f,
                     frame_bytes(kReqKey, std::string(flags_hex) + " 01 00 00")});
    }
  }
}

TEST(MpaFrameVectors, Revision1ReplyWithCrcAndPrivateData) {
  MpaFrame f = reply(1);
  f.crc = true;
  f.private_data = ascii("hello");
  expect_vector({"rev1 reply", f, frame_bytes(kRepKey, " 40 01 00 05 68 65 6c 6c 6f")});
}

TEST(MpaFrameVectors, Revision1ReplyRejectsWithPrivateData) {
  MpaFrame f = reply(1);
  f.reject = true;
  f.private_data = ascii("busy");
  expect_vector({"rev1 reject", f, frame_bytes(kRepKey, " 20 01 00 04 62 75 73 79")});
}

TEST(MpaFrameVectors, Revision1ReplyRejectsWithMarkersAndCrcFlags) {
  MpaFrame f = reply(1);
  f.markers = true;
  f.crc = true;
  f.reject = true;
  expect_vector({"rev1 reject with M and C", f, frame_bytes(kRepKey, " e0 01 00 00")});
}

// ---- Revision 2 (RFC 6581) -----------------------------------------------------------------

TEST(MpaFrameVectors, Revision2WithoutEnhancedFlagCarriesNoIrdOrdWords) {
  MpaFrame f = request(2);
  f.crc = true;
  f.private_data = ascii("ab");
  expect_vector({"rev2 plain", f, frame_bytes(kReqKey, " 40 02 00 02 61 62")});
}

TEST(MpaFrameVectors, Revision2RequestOffersEachRtrTypeAlone) {
  MpaEnhancedParams send{.peer_to_peer = true, .rtr_send = true, .ird = 1, .ord = 1};
  MpaEnhancedParams write{.peer_to_peer = true, .rtr_write = true, .ird = 1, .ord = 1};
  MpaEnhancedParams read{.peer_to_peer = true, .rtr_read = true, .ird = 1, .ord = 1};
  MpaFrame base = request(2);
  base.crc = true;
  expect_vector(
      {"send rtr", enhanced(base, send), frame_bytes(kReqKey, " 50 02 00 04 c0 01 00 01")});
  expect_vector(
      {"write rtr", enhanced(base, write), frame_bytes(kReqKey, " 50 02 00 04 80 01 80 01")});
  expect_vector(
      {"read rtr", enhanced(base, read), frame_bytes(kReqKey, " 50 02 00 04 80 01 40 01")});
}

TEST(MpaFrameVectors, Revision2RequestOffersRtrTypesCombined) {
  MpaFrame base = request(2);
  base.crc = true;
  MpaEnhancedParams write_read{
      .peer_to_peer = true, .rtr_write = true, .rtr_read = true, .ird = 16, .ord = 16};
  expect_vector(
      {"write+read", enhanced(base, write_read), frame_bytes(kReqKey, " 50 02 00 04 80 10 c0 10")});
  MpaEnhancedParams all{.peer_to_peer = true,
                        .rtr_send = true,
                        .rtr_write = true,
                        .rtr_read = true,
                        .ird = 4,
                        .ord = 8};
  expect_vector(
      {"send+write+read", enhanced(base, all), frame_bytes(kReqKey, " 50 02 00 04 c0 04 c0 08")});
  MpaEnhancedParams send_read{
      .peer_to_peer = true, .rtr_send = true, .rtr_read = true, .ird = 2, .ord = 3};
  expect_vector(
      {"send+read", enhanced(base, send_read), frame_bytes(kReqKey, " 50 02 00 04 c0 02 40 03")});
}

TEST(MpaFrameVectors, Revision2WithoutPeerToPeerHasNoRtrBits) {
  MpaFrame f = enhanced(request(2), MpaEnhancedParams{.ird = 7, .ord = 9});
  expect_vector({"no p2p", f, frame_bytes(kReqKey, " 10 02 00 04 00 07 00 09")});
}

TEST(MpaFrameVectors, Revision2IrdOrdAtZeroAndAtFourteenBitMaximum) {
  expect_vector({"ird=ord=0", enhanced(request(2), MpaEnhancedParams{}),
                 frame_bytes(kReqKey, " 10 02 00 04 00 00 00 00")});
  expect_vector({"ird=ord=0x3fff", enhanced(request(2), {.ird = 0x3fff, .ord = 0x3fff}),
                 frame_bytes(kReqKey, " 10 02 00 04 3f ff 3f ff")});
  MpaEnhancedParams every_bit{.peer_to_peer = true,
                              .rtr_send = true,
                              .rtr_write = true,
                              .rtr_read = true,
                              .ird = 0x3fff,
                              .ord = 0x3fff};
  expect_vector({"every bit", enhanced(request(2), every_bit),
                 frame_bytes(kReqKey, " 10 02 00 04 ff ff ff ff")});
  expect_vector({"ird max ord 0", enhanced(reply(2), {.ird = 0x3fff, .ord = 0}),
                 frame_bytes(kRepKey, " 10 02 00 04 3f ff 00 00")});
}

TEST(MpaFrameVectors, Revision2EveryMarkerAndCrcCombination) {
  for (int m = 0; m < 2; ++m) {
    for (int c = 0; c < 2; ++c) {
      MpaFrame f =
          enhanced(reply(2), {.peer_to_peer = true, .rtr_write = true, .ird = 2, .ord = 2});
      f.markers = m;
      f.crc = c;
      char flags_hex[8];
      std::snprintf(flags_hex, sizeof flags_hex, " %02x", (m ? 0x80 : 0) | (c ? 0x40 : 0) | 0x10);
      expect_vector({"rev2 reply flags" + std::string(flags_hex), f,
                     frame_bytes(kRepKey, std::string(flags_hex) + " 02 00 04 80 02 80 02")});
    }
  }
}

TEST(MpaFrameVectors, Revision2ReplyChoosesRtrAndCarriesPrivateData) {
  MpaFrame f = enhanced(reply(2), {.peer_to_peer = true, .rtr_read = true, .ird = 16, .ord = 8});
  f.crc = true;
  f.private_data = ascii("hi");
  // PD_Length 6 = 4 octets of IRD/ORD words + 2 octets of private data.
  expect_vector({"rev2 reply pd", f, frame_bytes(kRepKey, " 50 02 00 06 80 10 40 08 68 69")});
}

TEST(MpaFrameVectors, Revision2ReplyRejectsWithPrivateData) {
  MpaFrame f = enhanced(reply(2), {.peer_to_peer = true, .ird = 0, .ord = 0});
  f.reject = true;
  f.private_data = ascii("no");
  expect_vector({"rev2 reject", f, frame_bytes(kRepKey, " 30 02 00 06 80 00 00 00 6e 6f")});
}

// ---- Private data limits ---------------------------------------------------------------------

TEST(MpaFramePrivateData, Rfc512LimitIsAcceptedAndOneOverIsRejected) {
  MpaFrame at = request(1);
  at.private_data = testing::pattern(512);
  expect_vector({"512", at, frame_bytes(kReqKey, " 00 01 02 00" + to_hex(at.private_data))});

  MpaFrame over = at;
  over.private_data.push_back(0);
  expect_encode_error(over, WireError::kMpaPrivateDataTooLong);
  expect_decode_error(frame_bytes(kReqKey, " 00 01 02 01" + to_hex(over.private_data)),
                      WireError::kMpaPrivateDataTooLong);
  auto header = frame_bytes(kReqKey, " 00 01 02 01");
  auto length = mpa_frame_length(header);
  ASSERT_FALSE(length.has_value());
  EXPECT_EQ(length.error(), WireError::kMpaPrivateDataTooLong);
}

TEST(MpaFramePrivateData, EnhancedLimitCountsTheIrdOrdWords) {
  MpaFrame at = enhanced(request(2), {.ird = 1, .ord = 1});
  at.private_data = testing::pattern(508);
  expect_vector(
      {"508+4", at, frame_bytes(kReqKey, " 10 02 02 00 00 01 00 01" + to_hex(at.private_data))});
  EXPECT_EQ(mpa_pd_length(at), 512u);

  MpaFrame over = at;
  over.private_data.push_back(0);
  EXPECT_EQ(mpa_pd_length(over), 513u);
  expect_encode_error(over, WireError::kMpaPrivateDataTooLong);
}

TEST(MpaFramePrivateData, LinuxLimitOf256IsAcceptedAndOneOverIsRejected) {
  const MpaLimits linux_limits{.private_data_limit = kMpaMaxPrivateDataLinux};
  MpaFrame at = reply(1);
  at.private_data = testing::pattern(256, 0x40);
  expect_vector({"256", at, frame_bytes(kRepKey, " 00 01 01 00" + to_hex(at.private_data))},
                linux_limits);

  MpaFrame over = at;
  over.private_data.push_back(0);
  expect_encode_error(over, WireError::kMpaPrivateDataTooLong, linux_limits);
  expect_decode_error(frame_bytes(kRepKey, " 00 01 01 01" + to_hex(over.private_data)),
                      WireError::kMpaPrivateDataTooLong, linux_limits);
  // The same 257 octets are fine under the RFC limit.
  EXPECT_TRUE(encode_mpa_frame(over).has_value());
}

// ---- Decode errors: one defect per crafted frame ---------------------------------------------

TEST(MpaFrameDecodeErrors, KeyThatIsNeitherRequestNorReply) {
  // "MPA ID Rex Frame"
  expect_decode_error(hex("4d 50 41 20 49 44 20 52 65 78 20 46 72 61 6d 65 40 01 00 00"),
                      WireError::kMpaBadKey);
  // Lower-case "mpa id req frame"
  expect_decode_error(hex("6d 70 61 20 69 64 20 72 65 71 20 66 72 61 6d 65 40 01 00 00"),
                      WireError::kMpaBadKey);
  auto length =
      mpa_frame_length(hex("4d 50 41 20 49 44 20 52 65 78 20 46 72 61 6d 65 40 01 00 00"));
  ASSERT_FALSE(length.has_value());
  EXPECT_EQ(length.error(), WireError::kMpaBadKey);
}

TEST(MpaFrameDecodeErrors, EachUnusedReservedFlagBitIsRejectedByStrictReceiver) {
  for (int bit : {0x01, 0x02}) {
    SCOPED_TRACE(bit);
    char flags[8];
    std::snprintf(flags, sizeof flags, " %02x", 0x40 | bit);
    expect_decode_error(frame_bytes(kReqKey, std::string(flags) + " 01 00 00"),
                        WireError::kMpaReservedBits);
    expect_decode_error(frame_bytes(kRepKey, std::string(flags) + " 01 00 00"),
                        WireError::kMpaReservedBits);
  }
}

// siw's GSO_EXP (0x08, iwarp.h MPA_RR_FLAG_GSO_EXP 0x0800 over flags+Rev) and Chelsio's FPDU
// size proposal (0x04 16K, 0x08 32K, 0x0c 64K): extensions a strict receiver keeps and
// reports, not errors.
TEST(MpaFrameExtensionBits, StrictReceiverKeepsSiwGsoAndChelsioFpduSizeBits) {
  for (int bits : {0x04, 0x08, 0x0c}) {
    SCOPED_TRACE(bits);
    char flags[8];
    std::snprintf(flags, sizeof flags, " %02x", 0x40 | bits);
    auto decoded = decode_mpa_frame(frame_bytes(kReqKey, std::string(flags) + " 02 00 00"));
    ASSERT_TRUE(decoded.has_value()) << error_name(decoded.error());
    EXPECT_EQ(decoded->reserved_bits, bits);
    EXPECT_TRUE(decoded->crc);
  }
  // One unused reserved bit next to them still fails a strict receiver.
  expect_decode_error(frame_bytes(kReqKey, " 4d 02 00 00"), WireError::kMpaReservedBits);
}

TEST(MpaFrameExtensionBits, ReportsWhatTheBitsMean) {
  EXPECT_EQ(describe_reserved_bits(0), "");
  EXPECT_EQ(describe_reserved_bits(0x08), "0x08 (siw GSO_EXP, or 32K FPDUs in Chelsio's proposal)");
  EXPECT_EQ(describe_reserved_bits(0x04), "0x04 (16K FPDUs in Chelsio's proposal)");
  EXPECT_EQ(describe_reserved_bits(0x0c), "0x0c (64K FPDUs in Chelsio's proposal)");
  EXPECT_EQ(describe_reserved_bits(0x01), "0x01 (reserved)");
  EXPECT_EQ(describe_reserved_bits(0x0f), "0x0f (64K FPDUs in Chelsio's proposal, reserved)");
  MpaFrame f = request(2);
  f.reserved_bits = 0x08;
  EXPECT_NE(to_string(f).find("reserved=0x08 (siw GSO_EXP"), std::string::npos) << to_string(f);
}

// ---- erdma's revision 129 (erdma_cm.h): 8 octets {be32 cookie, be32 bits} after the header,
// outside PD_Length ------------------------------------------------------------------------------

TEST(MpaFrameErdma, Revision129CarriesItsExtensionOutsidePdLength) {
  MpaFrame f = request(kMpaRevisionErdma);
  f.erdma = ErdmaExtension{.cookie = 0x01020304, .bits = 0x00000001};
  f.private_data = ascii("pd");
  expect_vector({"erdma request, cookie, CUBIC, 2 octets of private data", f,
                 frame_bytes(kReqKey, " 00 81 00 02 01 02 03 04 00 00 00 01 70 64")},
                MpaLimits{.accept_erdma = true});
  MpaFrame r = reply(kMpaRevisionErdma);
  r.reject = true;
  r.reserved_bits = 0x08;  // erdma echoes the Request's header
  r.erdma = ErdmaExtension{};
  expect_vector({"erdma reject with an echoed GSO bit", r,
                 frame_bytes(kRepKey, " 28 81 00 00 00 00 00 00 00 00 00 00")},
                MpaLimits{.accept_erdma = true});
  EXPECT_NE(to_string(f).find("erdma cookie=0x1020304 cc=1"), std::string::npos) << to_string(f);
}

TEST(MpaFrameErdma, Revision129IsUnknownToEveryoneElse) {
  const Bytes wire = frame_bytes(kReqKey, " 00 81 00 00 00 00 00 00 00 00 00 00");
  expect_decode_error(wire, WireError::kMpaUnknownRevision);
  auto length = mpa_frame_length(std::span(wire).first(kMpaHeaderLen));
  ASSERT_FALSE(length.has_value());
  EXPECT_EQ(length.error(), WireError::kMpaUnknownRevision);
  // Accepting 129 is not accepting any revision.
  expect_decode_error(frame_bytes(kReqKey, " 00 03 00 00"), WireError::kMpaUnknownRevision,
                      MpaLimits{.accept_erdma = true});
  // The extension is part of the frame: without it the frame is short.
  expect_decode_error(frame_bytes(kReqKey, " 00 81 00 00 00 00 00 00"), WireError::kMpaTruncated,
                      MpaLimits{.accept_erdma = true});
  // Nor does revision 129 carry RFC 6581 words.
  expect_decode_error(frame_bytes(kReqKey, " 10 81 00 04 00 00 00 00 00 00 00 00 00 01 00 01"),
                      WireError::kMpaEnhancedNeedsRevision2, MpaLimits{.accept_erdma = true});
}

TEST(MpaFrameErdma, Revision129WithoutAnExtensionEncodesZeros) {
  auto encoded = encode_mpa_frame(request(kMpaRevisionErdma));
  ASSERT_TRUE(encoded.has_value());
  EXPECT_EQ(to_hex(*encoded), to_hex(frame_bytes(kReqKey, " 00 81 00 00 00 00 00 00 00 00 00 00")));
}

TEST(MpaFrameDecodeErrors, LenientReceiverKeepsReservedBitsInTheFrame) {
  const MpaLimits lenient{.reject_reserved_bits = false};
  auto decoded = decode_mpa_frame(frame_bytes(kReqKey, " 4f 01 00 00"), lenient);
  ASSERT_TRUE(decoded.has_value()) << error_name(decoded.error());
  EXPECT_EQ(decoded->reserved_bits, 0x0f);
  EXPECT_TRUE(decoded->crc);
  EXPECT_FALSE(decoded->markers);
  EXPECT_FALSE(decoded->reject);
  EXPECT_FALSE(decoded->enhanced.has_value());

  // Lenient on revision 2 too: the enhanced bit is not a reserved bit there.
  auto rev2 = decode_mpa_frame(frame_bytes(kRepKey, " 15 02 00 04 00 03 00 04"), lenient);
  ASSERT_TRUE(rev2.has_value()) << error_name(rev2.error());
  EXPECT_EQ(rev2->reserved_bits, 0x05);
  ASSERT_TRUE(rev2->enhanced.has_value());
  EXPECT_EQ(rev2->enhanced->ird, 3);
  EXPECT_EQ(rev2->enhanced->ord, 4);
}

TEST(MpaFrameDecodeErrors, RejectFlagInARequest) {
  expect_decode_error(frame_bytes(kReqKey, " 20 01 00 00"), WireError::kMpaRejectInRequest);
  expect_decode_error(frame_bytes(kReqKey, " 70 02 00 04 00 01 00 01"),
                      WireError::kMpaRejectInRequest);
}

TEST(MpaFrameDecodeErrors, RevisionZeroAndThreeAreUnknown) {
  expect_decode_error(frame_bytes(kReqKey, " 40 00 00 00"), WireError::kMpaUnknownRevision);
  expect_decode_error(frame_bytes(kReqKey, " 40 03 00 00"), WireError::kMpaUnknownRevision);
  expect_decode_error(frame_bytes(kRepKey, " 40 ff 00 00"), WireError::kMpaUnknownRevision);
  auto length = mpa_frame_length(frame_bytes(kReqKey, " 40 03 00 00"));
  ASSERT_FALSE(length.has_value());
  EXPECT_EQ(length.error(), WireError::kMpaUnknownRevision);
}

TEST(MpaFrameDecodeErrors, EnhancedFlagOnRevision1) {
  expect_decode_error(frame_bytes(kReqKey, " 50 01 00 04 00 01 00 01"),
                      WireError::kMpaEnhancedNeedsRevision2);
}

TEST(MpaFrameDecodeErrors, EnhancedFlagWithPdLengthBelowFour) {
  expect_decode_error(frame_bytes(kReqKey, " 10 02 00 00"), WireError::kMpaEnhancedParamsTruncated);
  expect_decode_error(frame_bytes(kReqKey, " 10 02 00 03 00 01 00"),
                      WireError::kMpaEnhancedParamsTruncated);
}

TEST(MpaFrameDecodeErrors, TruncatedHeaderOrPrivateData) {
  const Bytes whole = frame_bytes(kReqKey, " 40 01 00 04 61 62 63 64");
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{16}, std::size_t{19},
                          std::size_t{20}, std::size_t{23}}) {
    SCOPED_TRACE(cut);
    expect_decode_error(Bytes(whole.begin(), whole.begin() + cut), WireError::kMpaTruncated);
  }
  auto length = mpa_frame_length(std::span(whole).first(19));
  ASSERT_FALSE(length.has_value());
  EXPECT_EQ(length.error(), WireError::kMpaTruncated);
}

TEST(MpaFrameDecodeErrors, TrailingBytesAfterTheFrame) {
  expect_decode_error(frame_bytes(kReqKey, " 40 01 00 00 00"), WireError::kMpaTrailingBytes);
  expect_decode_error(frame_bytes(kRepKey, " 40 01 00 02 61 62 63"), WireError::kMpaTrailingBytes);
}

// ---- Encode errors -----------------------------------------------------------------------------

TEST(MpaFrameEncodeErrors, IrdOrOrdAboveFourteenBits) {
  expect_encode_error(enhanced(request(2), {.ird = 0x4000, .ord = 0}),
                      WireError::kMpaIrdOrdOutOfRange);
  expect_encode_error(enhanced(request(2), {.ird = 0, .ord = 0x4000}),
                      WireError::kMpaIrdOrdOutOfRange);
  expect_encode_error(enhanced(reply(2), {.ird = 0xffff, .ord = 0xffff}),
                      WireError::kMpaIrdOrdOutOfRange);
}

TEST(MpaFrameEncodeErrors, EnhancedParamsOnRevision1) {
  expect_encode_error(enhanced(request(1), {.ird = 1, .ord = 1}),
                      WireError::kMpaEnhancedNeedsRevision2);
}

TEST(MpaFrameEncode, ReservedBitsAreSentAsGivenForNegativeTests) {
  MpaFrame f = request(1);
  f.crc = true;
  f.reserved_bits = 0x03;
  auto encoded = encode_mpa_frame(f);
  ASSERT_TRUE(encoded.has_value()) << error_name(encoded.error());
  EXPECT_EQ(to_hex(*encoded), to_hex(frame_bytes(kReqKey, " 43 01 00 00")));
}

TEST(MpaFrameToString, NamesKindAndRevision) {
  MpaFrame f =
      enhanced(request(2), {.peer_to_peer = true, .rtr_write = true, .ird = 16, .ord = 16});
  const std::string text = to_string(f);
  EXPECT_NE(text.find("Request"), std::string::npos) << text;
  EXPECT_NE(text.find("rev 2"), std::string::npos) << text;
  EXPECT_NE(to_string(reply(1)).find("Reply"), std::string::npos) << to_string(reply(1));
}

}  // namespace
}  // namespace rdma_interop::wire
