// fpdu_options.h - what one direction of an MPA stream was negotiated to carry.
#pragma once

#include <cstdint>

#include "core/wire/iwarp_constants.h"

namespace rdma_interop::wire {

struct FpduOptions {
  // RFC 5044 s7.1: CRC is used if either side asked for it. With CRC off the 4-octet CRC
  // field is still sent (as zero) and not checked.
  bool crc = true;
  // RFC 5044 s4.3: markers every 512 octets, counted from the first octet of the first FPDU
  // of this direction. Negotiated per direction (the receiver's M flag).
  bool markers = false;
  // Largest ULPDU accepted or produced (MULPDU). With markers on it is further capped so
  // every FPDUPTR fits in 16 bits (see kMaxUlpduWithMarkers).
  std::uint16_t max_ulpdu = kMaxUlpduLength;
};

// A marker's FPDUPTR is 16 bits, so an FPDU with markers must stay within 64 KiB on the
// wire: 65535 less the length field, pad, CRC and one marker per 512 octets.
inline constexpr std::uint16_t kMaxUlpduWithMarkers = 65535 - 1024;

}  // namespace rdma_interop::wire
