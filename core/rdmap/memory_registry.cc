#include "core/rdmap/memory_registry.h"

namespace rdma_interop::rdmap {
namespace {

using wire::TermLayer;
using wire::TerminateCause;

// Linux siw keeps a 24-bit index in the upper STag bits and a consumer key in the low 8
// (siw_mem.c); the key stays 0 here, the index never repeats, so no STag is ever 0.
constexpr std::uint32_t kStagIndexShift = 8;

enum class Failure : std::uint8_t { kInvalidStag, kAccessRights, kBaseOrBounds, kToWrap };

std::uint64_t address_of(const MemoryRegion& r) {
  return reinterpret_cast<std::uintptr_t>(r.addr);
}

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
// `remote`: `address` is a peer's tagged offset, counted from the region's first one;
// otherwise it is the virtual address of a local buffer named in a work request.
Expected<std::uint8_t*, Failure> check(const MemoryRegion* r, std::uint64_t address,
                                       std::size_t length, std::uint32_t rights, bool remote) {
  if (r == nullptr || !r->valid) return unexpected(Failure::kInvalidStag);
  if ((r->access & rights) != rights) return unexpected(Failure::kAccessRights);
  if (address + length < address) return unexpected(Failure::kToWrap);
  const std::uint64_t base = remote ? r->base_tagged_offset : address_of(*r);
  if (address < base || address - base > r->length || length > r->length - (address - base)) {
    return unexpected(Failure::kBaseOrBounds);
  }
  return r->addr + (address - base);
}

}  // namespace

std::uint32_t MemoryRegistry::register_region(void* addr, std::size_t length,
                                              std::uint32_t access) {
  const std::uint32_t stag = next_index_++ << kStagIndexShift;
  // Tagged offsets start at 0 unless the verbs convention is asked for (memory_registry.h):
  // what a peer is told then says nothing about where our memory is.
  const std::uint64_t base_to =
      (access & kTaggedOffsetIsAddress) != 0 ? reinterpret_cast<std::uintptr_t>(addr) : 0;
  regions_[stag] = MemoryRegion{.stag = stag,
                                .addr = static_cast<std::uint8_t*>(addr),
                                .length = length,
                                .access = access,
                                .base_tagged_offset = base_to,
                                .valid = true};
  return stag;
}

bool MemoryRegistry::deregister(std::uint32_t stag) { return regions_.erase(stag) != 0; }

Expected<std::uint32_t, wire::TerminateCause> MemoryRegistry::invalidate(std::uint32_t stag) {
  auto it = regions_.find(stag);
  // RFC 5040 s2 (Glossary, "Invalidate STag"): invalidation stops the Remote Peer from
  // using an STag it was Advertised, i.e. given for remote access; RFC 5040 s7 has the
  // receiver of a Send with Invalidate check that the Invalidate STag is valid and
  // associated with this RDMAP Stream. An STag without remote rights (a receive buffer, a
  // send buffer) was never the peer's to use, so it is not the peer's to revoke: like an
  // unknown STag it "cannot be Invalidated" (code 0x09, RFC 5040 s7.1), as a remote
  // operation error, siw_invalidate_stag()'s answer to an unknown STag. (siw checks only
  // the protection domain; rxe_invalidate_mr() refuses every MR but a fast-registration
  // one, which exists to be handed to a peer.)
  // The registry belongs to one connection, so every STag in it is this stream's.
  // Invalidating an already invalid STag is allowed (verbs).
  if (it == regions_.end() || (it->second.access & (kRemoteRead | kRemoteWrite)) == 0) {
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

std::optional<std::uint64_t> MemoryRegistry::tagged_offset(std::uint32_t stag,
                                                           std::uint64_t addr) const {
  const MemoryRegion* r = find(stag);
  if (r == nullptr) return std::nullopt;
  const std::uint64_t start = address_of(*r);
  if (addr < start || addr - start > r->length) return std::nullopt;
  return r->base_tagged_offset + (addr - start);
}

Expected<std::uint8_t*, wire::TerminateCause> MemoryRegistry::check_remote(
    std::uint32_t stag, std::uint64_t tagged_offset, std::size_t length,
    RemoteAccess kind) const {
  if (length == 0) return static_cast<std::uint8_t*>(nullptr);
  const std::uint32_t rights = kind == RemoteAccess::kReadSource ? kRemoteRead : kRemoteWrite;
  auto r = check(find(stag), tagged_offset, length, rights, /*remote=*/true);
  if (!r) return unexpected(cause_for(r.error(), kind));
  return *r;
}

Expected<std::uint8_t*, wire::TerminateCause> MemoryRegistry::check_local(
    std::uint32_t stag, std::uint64_t addr, std::size_t length, bool needs_write) const {
  if (length == 0) return static_cast<std::uint8_t*>(nullptr);
  auto r = check(find(stag), addr, length, needs_write ? std::uint32_t{kLocalWrite} : 0u,
                 /*remote=*/false);
  // Local buffers fail like tagged placement would (siw reports a bad Read Response sink
  // with siw_tagged_error()); the endpoint picks the Terminate for its context.
  if (!r) return unexpected(cause_for(r.error(), RemoteAccess::kTaggedPlacement));
  return *r;
}

}  // namespace rdma_interop::rdmap
