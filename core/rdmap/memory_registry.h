// memory_registry.h - registered memory and its STags, as an RNIC's protection domain
// keeps them (RFC 5040 s2.1, s5.3; verbs: ibv_reg_mr).
//
// A peer names a byte by (STag, tagged offset). A tagged offset is an offset into the
// tagged buffer (RFC 5041 s2), not necessarily an address: every region starts at TO 0
// unless registered with kTaggedOffsetIsAddress, so what an application advertises says
// nothing about its address space. kTaggedOffsetIsAddress gives the verbs convention
// (ibv_reg_mr: TO = virtual address), which RNICs use and interop peers may expect.
// Work requests keep naming their local buffers by virtual address (Sge::addr) either way;
// tagged_offset() turns one into the TO to advertise.
//
// Every remote access is checked here: the STag exists and is valid, [offset, offset +
// length) lies inside the region, and the region grants the access. A failed check returns
// the Terminate cause the standard prescribes for it (RFC 5040 s7, RFC 5041 s7; the layer
// follows Linux siw: DDP for tagged placement, RDMAP for rights and for Read Request
// sources).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>

#include "core/util/expected.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::rdmap {

enum Access : std::uint32_t {
  kLocalWrite = 1u << 0,
  kRemoteWrite = 1u << 1,
  kRemoteRead = 1u << 2,
  // Not a right: the region's tagged offsets are its virtual addresses (the verbs
  // convention) instead of starting at 0. The verbs provider always works this way.
  kTaggedOffsetIsAddress = 1u << 3,
};

struct MemoryRegion {
  std::uint32_t stag = 0;
  std::uint8_t* addr = nullptr;
  std::size_t length = 0;
  std::uint32_t access = 0;
  std::uint64_t base_tagged_offset = 0;  // the TO of octet 0: 0, or addr (kTaggedOffsetIsAddress)
  bool valid = true;  // false after a Send with Invalidate named it
};

// Which kind of remote access is being checked; it decides the Terminate layer.
enum class RemoteAccess : std::uint8_t {
  kTaggedPlacement,  // RDMA Write or Read Response data arriving (DDP tagged buffer)
  kReadSource,       // the source of an RDMA Read Request (RDMAP remote protection)
};

class MemoryRegistry {
 public:
  // Registers [addr, addr + length). STags are never 0: a zero STag names nothing
  // (the zero-length RTR operations use it and are not checked). `access` is a set of
  // Access bits; its first tagged offset is 0, or addr with kTaggedOffsetIsAddress.
  std::uint32_t register_region(void* addr, std::size_t length, std::uint32_t access);
  bool deregister(std::uint32_t stag);
  // The peer's Send with Invalidate (RFC 5040 s5.3) named `stag`: it stops granting access.
  // Only an STag with a remote right (kRemoteRead or kRemoteWrite) can be invalidated this
  // way; an unknown or local-only one fails with RDMAP remote operation error "STag cannot
  // be Invalidated" (0/2/0x09), the Terminate to send, and stays as it was.
  Expected<std::uint32_t, wire::TerminateCause> invalidate(std::uint32_t stag);
  const MemoryRegion* find(std::uint32_t stag) const;
  // The tagged offset by which a peer names the octet at virtual address `addr` of region
  // `stag` (addr may be one past its end). nullopt for an unknown STag or an address
  // outside the region.
  std::optional<std::uint64_t> tagged_offset(std::uint32_t stag, std::uint64_t addr) const;

  // Checks a remote access and returns where the bytes live. A zero-length access is
  // always allowed and returns nullptr (RFC 6581 RTRs; IB C9-88 for zero-length Reads).
  Expected<std::uint8_t*, wire::TerminateCause> check_remote(std::uint32_t stag,
                                                             std::uint64_t tagged_offset,
                                                             std::size_t length,
                                                             RemoteAccess kind) const;
  // Checks local buffers named in work requests (lkey, virtual address, length).
  Expected<std::uint8_t*, wire::TerminateCause> check_local(std::uint32_t stag,
                                                            std::uint64_t addr,
                                                            std::size_t length,
                                                            bool needs_write) const;

 private:
  std::unordered_map<std::uint32_t, MemoryRegion> regions_;
  std::uint32_t next_index_ = 1;
};

}  // namespace rdma_interop::rdmap
