// credit_header.h - the credit header our messaging layer puts in front of every Send payload.
//
// Octet layout (4 octets, network byte order, at offset 0 of the RDMA Send's ULP payload,
// RFC 5040 s4.1 Send; the application's payload follows at offset 4):
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-------+-----+-+---------------+-------------------------------+
//   |  Ver  | Rsv |C| Control Return|             Grant             |
//   +-------+-----+-+---------------+-------------------------------+
//
//   Ver (4 bits)        kCreditHeaderVersion (1). Any other value: kBadVersion.
//   Rsv (3 bits)        zero on send; set on receive: kReservedBits.
//   C (1 bit)           1: a standalone credit update. No payload follows (kControlWithPayload
//                       otherwise) and it is counted against the receiver's control receives,
//                       not its data receives, so it never competes with data for a credit.
//                       (A receive queue is one FIFO of same-size buffers: any Send takes the
//                       next one. The split is in the counts; their sum is what is posted.)
//   Control Return (8)  control receives the sender re-posted since its previous header: the
//                       receiver may send that many more standalone updates.
//   Grant (16)          data receives the sender posted for the receiver since its previous
//                       header: the receiver's send credits grow by this much.
//
// Grants and returns are increments, not totals: the connection is reliable and in order
// (TCP under MPA, or an RC queue pair), so every header is seen exactly once. A receive
// window of at most 0xFFFF data and 0xFF control receives means one header always carries
// everything pending.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>

#include "core/credit/credit_error.h"
#include "core/util/expected.h"

namespace rdma_interop::credit {

inline constexpr std::size_t kCreditHeaderSize = 4;
inline constexpr std::uint8_t kCreditHeaderVersion = 1;
inline constexpr std::uint8_t kCreditFlagControl = 0x01;  // octet 0, bit 7 in RFC numbering
inline constexpr std::uint8_t kCreditFlagsReserved = 0x0E;

struct CreditHeader {
  bool control = false;             // C: standalone credit update, no payload
  std::uint8_t control_return = 0;  // control receives re-posted for the receiver
  std::uint16_t grant = 0;          // data receives posted for the receiver
  friend bool operator==(const CreditHeader&, const CreditHeader&) = default;
};
std::ostream& operator<<(std::ostream& os, const CreditHeader& h);

std::array<std::uint8_t, kCreditHeaderSize> encode_credit_header(const CreditHeader& h);
// Decodes the first kCreditHeaderSize octets of `message` (a whole Send payload). Errors:
// kShortHeader, kBadVersion, kReservedBits, and kControlWithPayload when C is set and
// `message` is longer than the header.
Expected<CreditHeader, CreditError> decode_credit_header(std::span<const std::uint8_t> message);

}  // namespace rdma_interop::credit
