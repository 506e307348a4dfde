// MemoryRegistry: STags, tagged offsets, remote and local access checks, and the Terminate
// cause each failed check maps to (RFC 5040 s7.1, RFC 5041 s7.2; layers as Linux siw picks
// them).
#include "core/rdmap/memory_registry.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <utility>
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

TEST_F(MemoryRegistryTest, TaggedOffsetIsTheVirtualAddressWhenAskedFor) {
  // The verbs convention (ibv_reg_mr: TO = virtual address), on request.
  const auto stag = registry_.register_region(buffer_.data(), buffer_.size(),
                                              kRemoteWrite | kTaggedOffsetIsAddress);
  auto r = registry_.check_remote(stag, va(100), 50, RemoteAccess::kTaggedPlacement);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, buffer_.data() + 100);
  auto whole = registry_.check_remote(stag, va(), buffer_.size(), RemoteAccess::kTaggedPlacement);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, buffer_.data());
  EXPECT_EQ(registry_.find(stag)->base_tagged_offset, va());
  EXPECT_EQ(registry_.tagged_offset(stag, va(100)), va(100));
  // Offsets from 0 name nothing in it.
  EXPECT_FALSE(registry_.check_remote(stag, 100, 50, RemoteAccess::kTaggedPlacement));
}

TEST_F(MemoryRegistryTest, TaggedOffsetOfALocalAddressIsWhatToAdvertise) {
  const auto zero_based = registry_.register_region(buffer_.data() + 16, 64, kRemoteRead);
  EXPECT_EQ(registry_.find(zero_based)->base_tagged_offset, 0u);
  EXPECT_EQ(registry_.tagged_offset(zero_based, va(16)), 0u);
  EXPECT_EQ(registry_.tagged_offset(zero_based, va(16 + 10)), 10u);
  EXPECT_EQ(registry_.tagged_offset(zero_based, va(16 + 64)), 64u);  // one past the end
  EXPECT_FALSE(registry_.tagged_offset(zero_based, va(16 + 65)));
  EXPECT_FALSE(registry_.tagged_offset(zero_based, va(15)));
  EXPECT_FALSE(registry_.tagged_offset(0x7700, va(16)));
  // What it returns is what check_remote() takes.
  auto r = registry_.check_remote(zero_based, *registry_.tagged_offset(zero_based, va(40)), 8,
                                  RemoteAccess::kReadSource);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, buffer_.data() + 40);
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
  // Both conventions: offsets from 0, and addresses (where "below the base" exists).
  for (const std::uint32_t convention : {0u, std::uint32_t{kTaggedOffsetIsAddress}}) {
    SCOPED_TRACE(convention == 0 ? "zero-based" : "address");
    const auto stag =
        registry_.register_region(buffer_.data() + 16, 64, kRemoteWrite | kRemoteRead | convention);
    const std::uint64_t base = registry_.find(stag)->base_tagged_offset;
    std::vector<std::pair<std::uint64_t, std::size_t>> cases = {
        {base, 65},      // one past the end
        {base + 64, 1},  // starts at the end
        {base + 24, 4096}};
    if (base >= 8) cases.push_back({base - 8, 8});  // below the base
    for (auto [to, length] : cases) {
      auto w = registry_.check_remote(stag, to, length, RemoteAccess::kTaggedPlacement);
      ASSERT_FALSE(w) << to - base << "+" << length;
      EXPECT_EQ(w.error(), kDdpBounds);
      auto r = registry_.check_remote(stag, to, length, RemoteAccess::kReadSource);
      ASSERT_FALSE(r);
      EXPECT_EQ(r.error(), kRdmapBounds);
    }
    EXPECT_TRUE(registry_.check_remote(stag, base + 63, 1, RemoteAccess::kTaggedPlacement));
  }
}

TEST_F(MemoryRegistryTest, MissingRightsAreRdmapAccessRightsForBothKinds) {
  const auto read_only = registry_.register_region(buffer_.data(), 64, kRemoteRead);
  const auto write_only = registry_.register_region(buffer_.data(), 64, kRemoteWrite);
  auto w = registry_.check_remote(read_only, 0, 8, RemoteAccess::kTaggedPlacement);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error(), kRdmapRights);
  auto r = registry_.check_remote(write_only, 0, 8, RemoteAccess::kReadSource);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), kRdmapRights);
}

TEST_F(MemoryRegistryTest, RightsAreCheckedBeforeBoundsAsSiwDoes) {
  const auto read_only = registry_.register_region(buffer_.data(), 64, kRemoteRead);
  auto w = registry_.check_remote(read_only, 1000, 8, RemoteAccess::kTaggedPlacement);
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

// ---- Review findings -------------------------------------------------------------------

constexpr TerminateCause kCannotInvalidate{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                           wire::kRdmapCodeCannotInvalidate};

// A peer may invalidate only what it could use: an STag enabled for remote access. Receive
// buffers and send buffers (local write or nothing) were never the peer's to revoke.
TEST_F(MemoryRegistryTest, RemoteInvalidationOfALocalOnlyStagIsCannotInvalidate) {
  const auto receive = registry_.register_region(buffer_.data(), 64, kLocalWrite);
  const auto send = registry_.register_region(buffer_.data() + 64, 64, 0);
  for (auto stag : {receive, send}) {
    auto inv = registry_.invalidate(stag);
    ASSERT_FALSE(inv) << std::hex << stag;
    EXPECT_EQ(inv.error(), kCannotInvalidate);
    EXPECT_TRUE(registry_.find(stag)->valid);
  }
  EXPECT_TRUE(registry_.check_local(receive, va(0), 64, true));
  // Either remote right makes the STag the peer's to invalidate.
  EXPECT_TRUE(registry_.invalidate(registry_.register_region(buffer_.data(), 8, kRemoteRead)));
  EXPECT_TRUE(registry_.invalidate(registry_.register_region(buffer_.data(), 8, kRemoteWrite)));
}

// A peer names registered memory by tagged offsets; by default they start at 0, so what we
// advertise says nothing about our address space (RFC 5041 s2: the TO is an offset into
// the tagged buffer, not an address).
TEST_F(MemoryRegistryTest, RegionsStartAtTaggedOffsetZeroByDefault) {
  const auto stag = registry_.register_region(buffer_.data() + 16, 64, kRemoteWrite | kRemoteRead);
  auto r = registry_.check_remote(stag, 10, 8, RemoteAccess::kTaggedPlacement);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, buffer_.data() + 16 + 10);
  auto whole = registry_.check_remote(stag, 0, 64, RemoteAccess::kReadSource);
  ASSERT_TRUE(whole);
  EXPECT_EQ(*whole, buffer_.data() + 16);
  // The address is not a tagged offset of this region.
  auto by_address = registry_.check_remote(stag, va(16), 8, RemoteAccess::kTaggedPlacement);
  ASSERT_FALSE(by_address);
  EXPECT_EQ(by_address.error(), kDdpBounds);
}

}  // namespace
}  // namespace rdma_interop::rdmap
