#include "core/wire/crc32c.h"

#include <isa-l/crc.h>

#include <limits>

namespace rdma_interop::wire {

std::uint32_t crc32c_update(std::uint32_t running, std::span<const std::uint8_t> bytes) {
  // ISA-L takes an int length; FPDUs are far below that, but stay correct for any span.
  const std::uint8_t* p = bytes.data();
  std::size_t left = bytes.size();
  constexpr std::size_t kChunk = std::numeric_limits<int>::max() / 2;
  while (left > 0) {
    const std::size_t n = left < kChunk ? left : kChunk;
    // crc32_iscsi neither pre- nor post-inverts: it continues the raw register.
    running = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(n), running);
    p += n;
    left -= n;
  }
  return running;
}

std::array<std::uint8_t, 4> crc32c_wire_bytes(std::uint32_t finished) {
  return {static_cast<std::uint8_t>(finished), static_cast<std::uint8_t>(finished >> 8),
          static_cast<std::uint8_t>(finished >> 16), static_cast<std::uint8_t>(finished >> 24)};
}

std::uint32_t crc32c_from_wire(const std::uint8_t* o) {
  return std::uint32_t{o[0]} | (std::uint32_t{o[1]} << 8) | (std::uint32_t{o[2]} << 16) |
         (std::uint32_t{o[3]} << 24);
}

}  // namespace rdma_interop::wire
