// RDMAP Terminate (RFC 5040 s4.8), codes from RFC 5040 s7, RFC 5041 s7, RFC 5044 s8 and
// RFC 6581 s5.
//   Terminate Control: octet 0 = Layer << 4 | EType, octet 1 = Error Code,
//                      octet 2 = M 80 | D 40 | R 20 | reserved 1f, octet 3 reserved
//   then DDP Segment Length (2, when M or D), the terminated DDP header (14/18, D) and, for a
//   terminated Read Request with R, its 28-octet body.
#include "core/wire/terminate.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/wire/ddp_segment.h"
#include "wire_test_util.h"

namespace rdma_interop::wire {
namespace {

using testing::Bytes;
using testing::hex;
using testing::to_hex;

Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

const Bytes kWriteHeader = hex("c1 40 11223344 0102030405060708");
const Bytes kSendOnQueue3 = hex("41 43 00000000 00000003 00000001 00000000");
const Bytes kReadRequestHeader = hex("41 41 00000000 00000001 00000007 00000000");
const Bytes kReadRequestBody = hex("0a0b0c0d 1122334455667788 00001000 deadbeef 0000000000000040");

// Every (layer, etype, code) the RFCs define.
std::vector<TerminateCause> all_causes() {
  std::vector<TerminateCause> out;
  auto add = [&](TermLayer layer, std::uint8_t etype, std::initializer_list<std::uint8_t> codes) {
    for (std::uint8_t code : codes) out.push_back({layer, etype, code});
  };
  add(TermLayer::kRdmap, kRdmapEtypeLocalCatastrophic, {0x00});
  add(TermLayer::kRdmap, kRdmapEtypeRemoteProtection,
      {kRdmapCodeInvalidStag, kRdmapCodeBaseOrBounds, kRdmapCodeAccessRights,
       kRdmapCodeStagNotAssociated, kRdmapCodeToWrap, kRdmapCodeCannotInvalidate,
       kRdmapCodeUnspecified});
  add(TermLayer::kRdmap, kRdmapEtypeRemoteOperation,
      {kRdmapCodeInvalidVersion, kRdmapCodeUnexpectedOpcode, kRdmapCodeCatastrophicStream,
       kRdmapCodeCatastrophicGlobal, kRdmapCodeCannotInvalidate, kRdmapCodeUnspecified});
  add(TermLayer::kDdp, kDdpEtypeLocalCatastrophic, {0x00});
  add(TermLayer::kDdp, kDdpEtypeTaggedBuffer,
      {kDdpTaggedCodeInvalidStag, kDdpTaggedCodeBaseOrBounds, kDdpTaggedCodeStagNotAssociated,
       kDdpTaggedCodeToWrap, kDdpTaggedCodeInvalidVersion});
  add(TermLayer::kDdp, kDdpEtypeUntaggedBuffer,
      {kDdpUntaggedCodeInvalidQn, kDdpUntaggedCodeNoBuffer, kDdpUntaggedCodeMsnRange,
       kDdpUntaggedCodeInvalidMo, kDdpUntaggedCodeMessageTooLong, kDdpUntaggedCodeInvalidVersion});
  add(TermLayer::kLlp, kMpaEtype,
      {kMpaCodeTcpConnectionLost, kMpaCodeCrcError, kMpaCodeMarkerMismatch,
       kMpaCodeInvalidRequestReply, kMpaCodeLocalCatastrophic, kMpaCodeInsufficientIrd,
       kMpaCodeNoMatchingRtr});
  return out;
}

TerminateMessage message(TerminateCause cause) {
  TerminateMessage m;
  m.cause = cause;
  return m;
}

void expect_vector(const std::string& name, const TerminateMessage& m, const Bytes& body) {
  SCOPED_TRACE(name);
  EXPECT_EQ(to_hex(encode_terminate_body(m)), to_hex(body));
  auto decoded = decode_terminate_body(body);
  ASSERT_TRUE(decoded.has_value()) << error_name(decoded.error());
  EXPECT_EQ(*decoded, m) << to_string(*decoded);
}

void expect_decode_error(const Bytes& body, WireError want) {
  auto decoded = decode_terminate_body(body);
  ASSERT_FALSE(decoded.has_value()) << "decoded " << to_string(*decoded);
  EXPECT_EQ(error_name(decoded.error()), error_name(want));
}

// ---- Control field vectors ------------------------------------------------------------------

TEST(TerminateVectors, ControlFieldPacksLayerTypeAndCode) {
  expect_vector("RDMAP local catastrophic", message({TermLayer::kRdmap, 0, 0}), hex("00 00 00 00"));
  expect_vector("RDMAP remote protection TO wrap",
                message({TermLayer::kRdmap, kRdmapEtypeRemoteProtection, kRdmapCodeToWrap}),
                hex("01 04 00 00"));
  expect_vector("RDMAP remote operation unspecified",
                message({TermLayer::kRdmap, kRdmapEtypeRemoteOperation, kRdmapCodeUnspecified}),
                hex("02 ff 00 00"));
  expect_vector("DDP tagged invalid version",
                message({TermLayer::kDdp, kDdpEtypeTaggedBuffer, kDdpTaggedCodeInvalidVersion}),
                hex("11 04 00 00"));
  expect_vector("DDP untagged message too long",
                message({TermLayer::kDdp, kDdpEtypeUntaggedBuffer, kDdpUntaggedCodeMessageTooLong}),
                hex("12 05 00 00"));
  expect_vector("MPA CRC error", message({TermLayer::kLlp, kMpaEtype, kMpaCodeCrcError}),
                hex("20 02 00 00"));
  expect_vector("MPA no matching RTR (RFC 6581)",
                message({TermLayer::kLlp, kMpaEtype, kMpaCodeNoMatchingRtr}), hex("20 07 00 00"));
  expect_vector("MPA insufficient IRD (RFC 6581)",
                message({TermLayer::kLlp, kMpaEtype, kMpaCodeInsufficientIrd}), hex("20 06 00 00"));
}

// Kernel siw's Terminate for an RDMA Write to an unknown STag, as captured in the kernel tier:
// Layer/EType/Code are right, but M and D sit in the low bits of the third octet.
TEST(TerminateVectors, SiwsLittleEndianFlagsAreReadAsFarAsTheyGo) {
  const Bytes body = hex("11 00 03 00 00 1e c1 40 ff ff fe 00 00 00 00 00 00 00 00 00");
  auto decoded = decode_terminate_body(body);
  ASSERT_FALSE(decoded);
  auto m = read_malformed_terminate(body, decoded.error());
  EXPECT_EQ(m.error, WireError::kTerminateReservedBits);
  ASSERT_TRUE(m.cause.has_value());
  EXPECT_EQ(*m.cause, (TerminateCause{TermLayer::kDdp, kDdpEtypeTaggedBuffer, kDdpTaggedCodeInvalidStag}));
  EXPECT_EQ(m.octets, body);
  EXPECT_EQ(m.little_endian_cause, m.cause);  // 0x11: both readings agree
  const auto text = to_string(m);
  EXPECT_NE(text.find("11 00 03 00"), std::string::npos) << text;
  EXPECT_NE(text.find("invalid STag"), std::string::npos) << text;

  // siw's Read Terminate: the nibbles of octet 0 swapped; only the little-endian reading
  // gives RDMAP/remote protection/invalid STag.
  const Bytes read = hex("10 00 07 00 00 00");
  auto r = read_malformed_terminate(read, WireError::kTerminateReservedBits);
  EXPECT_EQ(*r.cause, (TerminateCause{TermLayer::kDdp, kDdpEtypeLocalCatastrophic, 0}));
  EXPECT_EQ(*r.little_endian_cause,
            (TerminateCause{TermLayer::kRdmap, kRdmapEtypeRemoteProtection, kRdmapCodeInvalidStag}));
  // Flags in the RFC's place: no little-endian reading is offered.
  EXPECT_FALSE(read_malformed_terminate(hex("10 00 80 01"), WireError::kTerminateReservedBits)
                   .little_endian_cause.has_value());

  // A layer RFC 5040 does not name says nothing about the cause; a long body is cut short.
  Bytes junk(100, 0xf0);
  auto j = read_malformed_terminate(junk, WireError::kTerminateBadLayer);
  EXPECT_FALSE(j.cause.has_value());
  EXPECT_EQ(j.octets.size(), kMalformedTerminateKept);
}

TEST(TerminateVectors, EveryRfcCodeRoundTripsWithoutHeaders) {
  for (const TerminateCause& cause : all_causes()) {
    SCOPED_TRACE(describe(cause));
    const Bytes want = {
        static_cast<std::uint8_t>(static_cast<unsigned>(cause.layer) << 4 | cause.etype),
        cause.code, 0x00, 0x00};
    expect_vector(describe(cause), message(cause), want);
  }
}

TEST(TerminateVectors, EveryRfcCodeHasItsOwnDescription) {
  std::set<std::string> seen;
  for (const TerminateCause& cause : all_causes()) {
    const std::string text = describe(cause);
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(seen.insert(text).second) << "duplicate: " << text;
  }
}

// ---- With the terminated headers --------------------------------------------------------------

TEST(TerminateVectors, SegmentLengthOnly) {
  TerminateMessage m =
      message({TermLayer::kDdp, kDdpEtypeUntaggedBuffer, kDdpUntaggedCodeMessageTooLong});
  m.ddp_segment_length = 0x0100;
  expect_vector("M only", m, hex("12 05 80 00 | 01 00"));
}

TEST(TerminateVectors, TaggedWriteHeaderIncluded) {
  TerminateMessage m = message({TermLayer::kDdp, kDdpEtypeTaggedBuffer, kDdpTaggedCodeInvalidStag});
  m.ddp_segment_length = 16;  // 14-octet header + 2 octets of payload
  m.ddp_header = kWriteHeader;
  expect_vector("tagged", m, hex("11 00 c0 00 | 00 10 | c1 40 11223344 0102030405060708"));
}

TEST(TerminateVectors, UntaggedSendHeaderIncludedWithR) {
  TerminateMessage m =
      message({TermLayer::kDdp, kDdpEtypeUntaggedBuffer, kDdpUntaggedCodeInvalidQn});
  m.ddp_segment_length = 20;
  m.ddp_header = kSendOnQueue3;
  m.rdmap_header_included = true;  // siw: R with nothing beyond the DDP header for a Send
  expect_vector("untagged", m,
                hex("12 01 e0 00 | 00 14 | 41 43 00000000 00000003 00000001 00000000"));
}

TEST(TerminateVectors, ReadRequestHeaderAndBodyIncluded) {
  TerminateMessage m =
      message({TermLayer::kRdmap, kRdmapEtypeRemoteProtection, kRdmapCodeInvalidStag});
  m.ddp_segment_length = 46;  // 18 + 28
  m.ddp_header = kReadRequestHeader;
  m.rdmap_header_included = true;
  m.rdmap_header = kReadRequestBody;
  expect_vector("read request", m,
                concat(hex("01 00 e0 00 | 00 2e | 41 41 00000000 00000001 00000007 00000000"),
                       kReadRequestBody));
}

TEST(TerminateVectors, WholeTerminateUlpduTravelsOnQueueTwoWithLastSet) {
  const TerminateMessage m = message({TermLayer::kLlp, kMpaEtype, kMpaCodeCrcError});
  const Bytes ulpdu = encode_terminate(m, 5);
  EXPECT_EQ(to_hex(ulpdu), to_hex(hex("41 47 00000000 00000002 00000005 00000000 | 20 02 00 00")));
  auto segment = decode_ddp_segment(ulpdu);
  ASSERT_TRUE(segment.has_value()) << error_name(segment.error());
  EXPECT_EQ(segment->header, terminate_header(5));
  auto body = decode_terminate_body(segment->payload);
  ASSERT_TRUE(body.has_value()) << error_name(body.error());
  EXPECT_EQ(*body, m);
}

// ---- Building the Terminate for an offending segment -------------------------------------------

TEST(TerminateForUlpdu, InvalidQueueNumberQuotesTheSendHeader) {
  const Bytes ulpdu = concat(kSendOnQueue3, hex("48 69"));
  const TerminateMessage m = terminate_for_ulpdu(WireError::kDdpInvalidQueueNumber, ulpdu);
  EXPECT_EQ(m.cause, terminate_for(WireError::kDdpInvalidQueueNumber));
  EXPECT_EQ(m.ddp_segment_length, std::optional<std::uint16_t>(20));
  EXPECT_EQ(to_hex(m.ddp_header), to_hex(kSendOnQueue3));
  EXPECT_TRUE(m.rdmap_header.empty());
}

TEST(TerminateForUlpdu, PlacementErrorOnAReadRequestQuotesHeaderAndBody) {
  const TerminateCause cause{TermLayer::kRdmap, kRdmapEtypeRemoteProtection, kRdmapCodeInvalidStag};
  const TerminateMessage m =
      terminate_for_cause(cause, concat(kReadRequestHeader, kReadRequestBody));
  EXPECT_EQ(to_hex(encode_terminate_body(m)),
            to_hex(concat(hex("01 00 e0 00 | 00 2e | 41 41 00000000 00000001 00000007 00000000"),
                          kReadRequestBody)));
}

TEST(TerminateForUlpdu, TaggedPlacementErrorQuotesTheWriteHeader) {
  const TerminateCause cause{TermLayer::kDdp, kDdpEtypeTaggedBuffer, kDdpTaggedCodeBaseOrBounds};
  const TerminateMessage m = terminate_for_cause(cause, concat(kWriteHeader, hex("de ad")));
  EXPECT_EQ(m.cause, cause);
  EXPECT_EQ(m.ddp_segment_length, std::optional<std::uint16_t>(16));
  EXPECT_EQ(to_hex(m.ddp_header), to_hex(kWriteHeader));
  EXPECT_TRUE(m.rdmap_header.empty());
}

// ---- Decode errors ---------------------------------------------------------------------------

TEST(TerminateDecodeErrors, ShorterThanTheControlField) {
  expect_decode_error({}, WireError::kTerminateTruncated);
  expect_decode_error(hex("20"), WireError::kTerminateTruncated);
  expect_decode_error(hex("20 02 00"), WireError::kTerminateTruncated);
}

TEST(TerminateDecodeErrors, ShorterThanTheHeadersItsFlagsAnnounce) {
  expect_decode_error(hex("12 05 80 00 | 01"), WireError::kTerminateTruncated);
  expect_decode_error(hex("11 00 c0 00 | 00 10 | c1 40 11223344"), WireError::kTerminateTruncated);
  Bytes cut_body(kReadRequestBody.begin(), kReadRequestBody.end() - 1);
  expect_decode_error(
      concat(hex("01 00 e0 00 | 00 2e | 41 41 00000000 00000001 00000007 00000000"), cut_body),
      WireError::kTerminateTruncated);
}

TEST(TerminateDecodeErrors, LayerOtherThanRdmapDdpOrLlp) {
  expect_decode_error(hex("30 00 00 00"), WireError::kTerminateBadLayer);
  expect_decode_error(hex("f1 02 00 00"), WireError::kTerminateBadLayer);
}

TEST(TerminateDecodeErrors, ReservedHeaderControlBits) {
  expect_decode_error(hex("20 02 10 00"), WireError::kTerminateReservedBits);
  expect_decode_error(hex("20 02 01 00"), WireError::kTerminateReservedBits);
  expect_decode_error(hex("20 02 00 01"), WireError::kTerminateReservedBits);
}

TEST(TerminateDecodeErrors, BytesTheFlagsDoNotAccountFor) {
  expect_decode_error(hex("20 02 00 00 | 00 10"), WireError::kTerminateHeaderLengthMismatch);
  expect_decode_error(hex("12 05 80 00 | 01 00 | ff"), WireError::kTerminateHeaderLengthMismatch);
  expect_decode_error(hex("11 00 c0 00 | 00 10 | c1 40 11223344 0102030405060708 | 00 00"),
                      WireError::kTerminateHeaderLengthMismatch);
  // R says an RDMAP header is included, but without D there is no DDP header to read it by.
  expect_decode_error(hex("02 06 20 00"), WireError::kTerminateHeaderLengthMismatch);
}

}  // namespace
}  // namespace rdma_interop::wire
