// WireError: every enumerator has a stable name, a sentence, and the Terminate cause that
// RFC 5044 s8 (MPA, layer 2, RFC 6581 s5), RFC 5041 s7 (DDP, layer 1) and RFC 5040 s7 (RDMAP,
// layer 0) prescribe for it.
#include "core/wire/wire_error.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace rdma_interop::wire {
namespace {

struct ExpectedMapping {
  WireError error;
  TerminateCause cause;
};

constexpr TerminateCause kMpaInvalidReqRep{TermLayer::kLlp, kMpaEtype, kMpaCodeInvalidRequestReply};
constexpr TerminateCause kMpaCrc{TermLayer::kLlp, kMpaEtype, kMpaCodeCrcError};
constexpr TerminateCause kMpaMarker{TermLayer::kLlp, kMpaEtype, kMpaCodeMarkerMismatch};
// No RFC code names a malformed or oversized ULPDU: DDP local catastrophic is the one that fits.
constexpr TerminateCause kDdpLocalCatastrophic{TermLayer::kDdp, kDdpEtypeLocalCatastrophic, 0};
constexpr TerminateCause kRdmapUnexpectedOpcode{TermLayer::kRdmap, kRdmapEtypeRemoteOperation,
                                                kRdmapCodeUnexpectedOpcode};
constexpr TerminateCause kRdmapStreamCatastrophic{TermLayer::kRdmap, kRdmapEtypeRemoteOperation,
                                                  kRdmapCodeCatastrophicStream};

// Every enumerator, in declaration order, with the Terminate the receiver sends.
const ExpectedMapping kAllErrors[] = {
    // RFC 5044 s7.1/s8: anything wrong with a Request/Reply is "invalid Request or Reply".
    {WireError::kMpaTruncated, kMpaInvalidReqRep},
    {WireError::kMpaTrailingBytes, kMpaInvalidReqRep},
    {WireError::kMpaBadKey, kMpaInvalidReqRep},
    {WireError::kMpaReservedBits, kMpaInvalidReqRep},
    {WireError::kMpaRejectInRequest, kMpaInvalidReqRep},
    {WireError::kMpaUnknownRevision, kMpaInvalidReqRep},
    {WireError::kMpaPrivateDataTooLong, kMpaInvalidReqRep},
    {WireError::kMpaEnhancedNeedsRevision2, kMpaInvalidReqRep},
    {WireError::kMpaEnhancedParamsTruncated, kMpaInvalidReqRep},
    {WireError::kMpaIrdOrdOutOfRange, kMpaInvalidReqRep},
    // RFC 5044 s8: CRC error 0x02, marker/ULPDU_Length mismatch 0x03.
    {WireError::kFpduCrcMismatch, kMpaCrc},
    {WireError::kFpduMarkerReservedBits, kMpaMarker},
    {WireError::kFpduMarkerPointerMismatch, kMpaMarker},
    {WireError::kFpduUlpduTooShort, kDdpLocalCatastrophic},
    {WireError::kFpduUlpduTooLong, kDdpLocalCatastrophic},
    {WireError::kFpduStreamFailed, kDdpLocalCatastrophic},
    {WireError::kDdpTruncated, kDdpLocalCatastrophic},
    // RFC 5041 s7: tagged 0x04 and untagged 0x06 invalid DDP version, untagged 0x01 invalid QN.
    {WireError::kDdpTaggedBadVersion,
     {TermLayer::kDdp, kDdpEtypeTaggedBuffer, kDdpTaggedCodeInvalidVersion}},
    {WireError::kDdpUntaggedBadVersion,
     {TermLayer::kDdp, kDdpEtypeUntaggedBuffer, kDdpUntaggedCodeInvalidVersion}},
    {WireError::kDdpInvalidQueueNumber,
     {TermLayer::kDdp, kDdpEtypeUntaggedBuffer, kDdpUntaggedCodeInvalidQn}},
    // RFC 5040 s7: remote operation 0x05 invalid RDMAP version, 0x06 unexpected opcode.
    {WireError::kRdmapBadVersion,
     {TermLayer::kRdmap, kRdmapEtypeRemoteOperation, kRdmapCodeInvalidVersion}},
    {WireError::kRdmapBadOpcode, kRdmapUnexpectedOpcode},
    {WireError::kRdmapOpcodeWrongBufferModel, kRdmapUnexpectedOpcode},
    {WireError::kRdmapReadRequestBadLength, kRdmapStreamCatastrophic},
    {WireError::kRdmapSingleSegmentRequired, kRdmapStreamCatastrophic},
    {WireError::kTerminateTruncated, kRdmapStreamCatastrophic},
    {WireError::kTerminateBadLayer, kRdmapStreamCatastrophic},
    {WireError::kTerminateReservedBits, kRdmapStreamCatastrophic},
    {WireError::kTerminateHeaderLengthMismatch, kRdmapStreamCatastrophic},
};

TEST(WireError, TableBelowCoversEveryEnumerator) {
  ASSERT_EQ(std::size(kAllErrors),
            static_cast<std::size_t>(WireError::kTerminateHeaderLengthMismatch) + 1);
  for (std::size_t i = 0; i < std::size(kAllErrors); ++i) {
    EXPECT_EQ(static_cast<std::size_t>(kAllErrors[i].error), i);
  }
}

TEST(WireError, EveryErrorHasADistinctNonEmptyName) {
  std::set<std::string> seen;
  for (const auto& m : kAllErrors) {
    const std::string name(error_name(m.error));
    SCOPED_TRACE(static_cast<int>(m.error));
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(seen.insert(name).second) << "duplicate name " << name;
  }
}

TEST(WireError, EveryErrorHasADistinctNonEmptyDescription) {
  std::set<std::string> seen;
  for (const auto& m : kAllErrors) {
    const std::string text(describe(m.error));
    SCOPED_TRACE(static_cast<int>(m.error));
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(seen.insert(text).second) << "duplicate description " << text;
  }
}

TEST(WireError, NamesAreStableIdentifiers) {
  // The header's own example; Python exceptions and JSON reports key on these.
  EXPECT_EQ(error_name(WireError::kMpaBadKey), "mpa_bad_key");
  for (const auto& m : kAllErrors) {
    for (char c : error_name(m.error)) {
      EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')
          << error_name(m.error);
    }
  }
}

TEST(WireError, TerminateForEveryErrorFollowsTheRfcErrorTables) {
  for (const auto& m : kAllErrors) {
    SCOPED_TRACE(std::string(error_name(m.error)));
    const TerminateCause got = terminate_for(m.error);
    EXPECT_EQ(got.layer, m.cause.layer);
    EXPECT_EQ(got.etype, m.cause.etype);
    EXPECT_EQ(got.code, m.cause.code);
  }
}

TEST(WireError, DescribeCauseNamesLayerTypeAndCode) {
  const std::string text = describe(
      TerminateCause{TermLayer::kRdmap, kRdmapEtypeRemoteProtection, kRdmapCodeInvalidStag});
  EXPECT_NE(text.find("RDMAP"), std::string::npos) << text;
  EXPECT_FALSE(describe(TerminateCause{TermLayer::kLlp, kMpaEtype, kMpaCodeCrcError}).empty());
}

}  // namespace
}  // namespace rdma_interop::wire
