// MemoryRegistry: STags, remote and local access checks, and the Terminate cause each failed
// check maps to (RFC 5040 s7.1, RFC 5041 s7.2; layers as Linux siw picks them).
#include "core/rdmap/memory_registry.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace rdma_interop::rdmap {
namespace {

using wire::TerminateCause;
using wire::TermLayer;

constexpr TerminateCause kDdpInvalidStag{TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer,
                                         wire::kDdpTaggedCodeInvalidStag};
constexpr TerminateCause kDdpBounds{TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer,
                                    wire::kDdpTaggedCodeBaseOrBounds};
constexpr TerminateCause kDdpWrap{TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer,
                                  wire::kDdpTaggedCodeToWrap};
constexpr TerminateCause kRdmapInvalidStag{TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                                           wire::kRdmapCodeInvalidStag};
constexpr TerminateCause kRdmapBounds{TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                                      wire::kRdmapCodeBaseOrBounds};
constexpr TerminateCause kRdmapRights{TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                                      wire::kRdmapCodeAccessRights};

class MemoryRegistryTest : public ::testing::Test {
 protected:
  std::uint64_t va(std::size_t offset = 0) const {
    return reinterpret_cast<std::uintptr_t>(buffer_.data()) + offset;
  }
  std::vector<std::uint8_t> buffer_ = std::vector<std::uint8_t>(4096);
  MemoryRegistry registry_;
};

TEST_F(MemoryRegistryTest, StagsAreNonZeroAndDistinct) {
  const auto a = registry_.register_region(buffer_.data(), 100, kRemoteWrite);
  const auto b = registry_.register_region(buffer_.data(), 100, kRemoteWrite);
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
  ASSERT_NE(registry_.find(a), nullptr);
  EXPECT_EQ(registry_.find(a)->length, 100u);
  EXPECT_TRUE(registry_.find(a)->valid);
}

TEST_F(MemoryRegistryTest, TaggedOffsetIsTheVirtualAddress) {
  const auto stag = registry_.register_region(buffer_.data(), buffer_.size(), kRemoteWrite);
  auto r = registry_.check_remote(stag, va(100), 50, RemoteAccess::kTaggedPlacement);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, buffer_.data() + 100);
  auto whole = registry_.check_remote(stag, va(), buffer_.size(), RemoteAccess::kTaggedPlacement);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, buffer_.data());
}

TEST_F(MemoryRegistryTest, UnknownStagIsDdpInvalidStagForPlacementAndRdmapForReadSource) {
  auto w = registry_.check_remote(0x4200, va(), 8, RemoteAccess::kTaggedPlacement);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error(), kDdpInvalidStag);
  auto r = registry_.check_remote(0x4200, va(), 8, RemoteAccess::kReadSource);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), kRdmapInvalidStag);
}

TEST_F(MemoryRegistryTest, OutOfBoundsIsBaseOrBounds) {
  const auto stag = registry_.register_region(buffer_.data() + 16, 64, kRemoteWrite | kRemoteRead);
  for (auto [offset, length] : {std::pair<std::size_t, std::size_t>{0, 8},  // below base
                                {16, 65},                                   // one past the end
                                {80, 1},                                    // starts at end
                                {40, 4096}}) {
    auto w = registry_.check_remote(stag, va(offset), length, RemoteAccess::kTaggedPlacement);
    ASSERT_FALSE(w) << offset << "+" << length;
    EXPECT_EQ(w.error(), kDdpBounds);
    auto r = registry_.check_remote(stag, va(offset), length, RemoteAccess::kReadSource);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error(), kRdmapBounds);
  }
  EXPECT_TRUE(registry_.check_remote(stag, va(16 + 63), 1, RemoteAccess::kTaggedPlacement));
}

TEST_F(MemoryRegistryTest, MissingRightsAreRdmapAccessRightsForBothKinds) {
  const auto read_only = registry_.register_region(buffer_.data(), 64, kRemoteRead);
  const auto write_only = registry_.register_region(buffer_.data(), 64, kRemoteWrite);
  auto w = registry_.check_remote(read_only, va(), 8, RemoteAccess::kTaggedPlacement);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error(), kRdmapRights);
  auto r = registry_.check_remote(write_only, va(), 8, RemoteAccess::kReadSource);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), kRdmapRights);
}

TEST_F(MemoryRegistryTest, RightsAreCheckedBeforeBoundsAsSiwDoes) {
  const auto read_only = registry_.register_region(buffer_.data(), 64, kRemoteRead);
  auto w = registry_.check_remote(read_only, va(1000), 8, RemoteAccess::kTaggedPlacement);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error(), kRdmapRights);
}

TEST_F(MemoryRegistryTest, OffsetWrapIsTaggedOffsetWrap) {
  const auto stag = registry_.register_region(buffer_.data(), 64, kRemoteWrite | kRemoteRead);
  const std::uint64_t top = std::numeric_limits<std::uint64_t>::max() - 3;
  auto w = registry_.check_remote(stag, top, 8, RemoteAccess::kTaggedPlacement);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error(), kDdpWrap);
  auto r = registry_.check_remote(stag, top, 8, RemoteAccess::kReadSource);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), (TerminateCause{TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                                       wire::kRdmapCodeToWrap}));
}

TEST_F(MemoryRegistryTest, ZeroLengthAccessIsNeverChecked) {
  // RFC 6581 RTRs use STag 0 with length 0.
  for (auto kind : {RemoteAccess::kTaggedPlacement, RemoteAccess::kReadSource}) {
    auto r = registry_.check_remote(0, 0, 0, kind);
    ASSERT_TRUE(r);
    EXPECT_EQ(*r, nullptr);
  }
  auto l = registry_.check_local(0, 0, 0, true);
  ASSERT_TRUE(l);
  EXPECT_EQ(*l, nullptr);
}

TEST_F(MemoryRegistryTest, InvalidatedStagStopsGrantingAccess) {
  const auto stag = registry_.register_region(buffer_.data(), 64, kRemoteWrite | kLocalWrite);
  auto inv = registry_.invalidate(stag);
  ASSERT_TRUE(inv);
  EXPECT_EQ(*inv, stag);
  EXPECT_FALSE(registry_.find(stag)->valid);
  auto w = registry_.check_remote(stag, va(), 8, RemoteAccess::kTaggedPlacement);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error(), kDdpInvalidStag);
  EXPECT_FALSE(registry_.check_local(stag, va(), 8, true));
  // Verbs allow invalidating an STag that is already invalid.
  EXPECT_TRUE(registry_.invalidate(stag));
}

TEST_F(MemoryRegistryTest, InvalidatingAnUnknownStagIsCannotInvalidate) {
  auto inv = registry_.invalidate(0x7700);
  ASSERT_FALSE(inv);
  EXPECT_EQ(inv.error(), (TerminateCause{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                         wire::kRdmapCodeCannotInvalidate}));
}

TEST_F(MemoryRegistryTest, DeregisteredStagIsUnknown) {
  const auto stag = registry_.register_region(buffer_.data(), 64, kRemoteWrite);
  EXPECT_TRUE(registry_.deregister(stag));
  EXPECT_FALSE(registry_.deregister(stag));
  EXPECT_EQ(registry_.find(stag), nullptr);
  EXPECT_FALSE(registry_.check_remote(stag, va(), 8, RemoteAccess::kTaggedPlacement));
}

TEST_F(MemoryRegistryTest, LocalChecksNeedLocalWriteOnlyForWrites) {
  const auto ro = registry_.register_region(buffer_.data(), 64, 0);
  const auto rw = registry_.register_region(buffer_.data(), 64, kLocalWrite);
  EXPECT_TRUE(registry_.check_local(ro, va(8), 8, false));
  auto w = registry_.check_local(ro, va(8), 8, true);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error(), kRdmapRights);
  auto ok = registry_.check_local(rw, va(8), 8, true);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, buffer_.data() + 8);
  auto bounds = registry_.check_local(rw, va(60), 8, true);
  ASSERT_FALSE(bounds);
  EXPECT_EQ(bounds.error(), kDdpBounds);
  auto unknown = registry_.check_local(0x9900, va(), 8, false);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error(), kDdpInvalidStag);
}

}  // namespace
}  // namespace rdma_interop::rdmap
