#include "core/rdmap/memory_registry.h"

namespace rdma_interop::rdmap {
namespace {

using wire::TermLayer;
using wire::TerminateCause;

// Linux siw keeps a 24-bit index in the upper STag bits and a consumer key in the low 8
// (siw_mem.c); the key stays 0 here, the index never repeats, so no STag is ever 0.
constexpr std::uint32_t kStagIndexShift = 8;

enum class Failure : std::uint8_t { kInvalidStag, kAccessRights, kBaseOrBounds, kToWrap };

// RFC 5041 s7.2 (DDP tagged buffer errors) for placement, RFC 5040 s7.1 (RDMAP remote
// protection) for rights and for Read Request sources. siw's siw_tagged_error() has no DDP
// code for rights, so rights are always the RDMAP "access rights violation".
TerminateCause cause_for(Failure f, RemoteAccess kind) {
  if (f == Failure::kAccessRights) {
    return {TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection, wire::kRdmapCodeAccessRights};
  }
  if (kind == RemoteAccess::kReadSource) {
    switch (f) {
      case Failure::kInvalidStag:
        return {TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                wire::kRdmapCodeInvalidStag};
      case Failure::kBaseOrBounds:
        return {TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection,
                wire::kRdmapCodeBaseOrBounds};
      default:
        return {TermLayer::kRdmap, wire::kRdmapEtypeRemoteProtection, wire::kRdmapCodeToWrap};
    }
  }
  switch (f) {
    case Failure::kInvalidStag:
      return {TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer, wire::kDdpTaggedCodeInvalidStag};
    case Failure::kBaseOrBounds:
      return {TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer, wire::kDdpTaggedCodeBaseOrBounds};
    default:
      return {TermLayer::kDdp, wire::kDdpEtypeTaggedBuffer, wire::kDdpTaggedCodeToWrap};
  }
}

// The checks in siw's order (siw_check_mem): STag valid, rights, then the interval.
Expected<std::uint8_t*, Failure> check(const MemoryRegion* r, std::uint64_t address,
                                       std::size_t length, std::uint32_t rights) {
  if (r == nullptr || !r->valid) return unexpected(Failure::kInvalidStag);
  if ((r->access & rights) != rights) return unexpected(Failure::kAccessRights);
  if (address + length < address) return unexpected(Failure::kToWrap);
  const auto base = reinterpret_cast<std::uintptr_t>(r->addr);
  if (address < base || address - base > r->length || length > r->length - (address - base)) {
    return unexpected(Failure::kBaseOrBounds);
  }
  return r->addr + (address - base);
}

}  // namespace

std::uint32_t MemoryRegistry::register_region(void* addr, std::size_t length,
                                              std::uint32_t access) {
  const std::uint32_t stag = next_index_++ << kStagIndexShift;
  regions_[stag] = MemoryRegion{.stag = stag,
                                .addr = static_cast<std::uint8_t*>(addr),
                                .length = length,
                                .access = access,
                                .valid = true};
  return stag;
}

bool MemoryRegistry::deregister(std::uint32_t stag) { return regions_.erase(stag) != 0; }

Expected<std::uint32_t, wire::TerminateCause> MemoryRegistry::invalidate(std::uint32_t stag) {
  auto it = regions_.find(stag);
  if (it == regions_.end()) {
    // siw_invalidate_stag(): an unknown STag is a remote operation error, "STag cannot be
    // invalidated" (RFC 5040 s7.1). Invalidating an already invalid STag is allowed (verbs).
    return unexpected(TerminateCause{TermLayer::kRdmap, wire::kRdmapEtypeRemoteOperation,
                                     wire::kRdmapCodeCannotInvalidate});
  }
  it->second.valid = false;
  return stag;
}

const MemoryRegion* MemoryRegistry::find(std::uint32_t stag) const {
  auto it = regions_.find(stag);
  return it == regions_.end() ? nullptr : &it->second;
}

Expected<std::uint8_t*, wire::TerminateCause> MemoryRegistry::check_remote(
    std::uint32_t stag, std::uint64_t tagged_offset, std::size_t length,
    RemoteAccess kind) const {
  if (length == 0) return static_cast<std::uint8_t*>(nullptr);
  const std::uint32_t rights = kind == RemoteAccess::kReadSource ? kRemoteRead : kRemoteWrite;
  auto r = check(find(stag), tagged_offset, length, rights);
  if (!r) return unexpected(cause_for(r.error(), kind));
  return *r;
}

Expected<std::uint8_t*, wire::TerminateCause> MemoryRegistry::check_local(
    std::uint32_t stag, std::uint64_t addr, std::size_t length, bool needs_write) const {
  if (length == 0) return static_cast<std::uint8_t*>(nullptr);
  auto r = check(find(stag), addr, length, needs_write ? std::uint32_t{kLocalWrite} : 0u);
  // Local buffers fail like tagged placement would (siw reports a bad Read Response sink
  // with siw_tagged_error()); the endpoint picks the Terminate for its context.
  if (!r) return unexpected(cause_for(r.error(), RemoteAccess::kTaggedPlacement));
  return *r;
}

}  // namespace rdma_interop::rdmap
