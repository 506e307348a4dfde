// crc32c.h - the MPA CRC (RFC 5044 s4.1: CRC32c, the iSCSI polynomial), computed by ISA-L.
//
// The running value is the raw register (initialised to all ones); `crc32c_finish` applies
// the final inversion. MPA sends the finished value least-significant octet first, as the
// Linux kernel's siw does (crypto crc32c digest), which is what `crc32c_wire_bytes` gives.
#pragma once

#include <array>
#include <cstdint>
#include <span>

namespace rdma_interop::wire {

inline constexpr std::uint32_t kCrc32cInit = 0xffffffffu;

// Continues a running CRC over `bytes` (ISA-L crc32_iscsi).
std::uint32_t crc32c_update(std::uint32_t running, std::span<const std::uint8_t> bytes);
inline std::uint32_t crc32c_finish(std::uint32_t running) { return ~running; }
// CRC32c of one buffer, finished: crc32c("123456789") == 0xe3069283.
inline std::uint32_t crc32c(std::span<const std::uint8_t> bytes) {
  return crc32c_finish(crc32c_update(kCrc32cInit, bytes));
}
// The four octets of a finished CRC as they appear in the FPDU trailer.
std::array<std::uint8_t, 4> crc32c_wire_bytes(std::uint32_t finished);
std::uint32_t crc32c_from_wire(const std::uint8_t* four_octets);

}  // namespace rdma_interop::wire
