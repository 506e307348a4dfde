// read_request.h - the 28-octet RDMA Read Request body (RFC 5040 s4.4).
//
//   Data Sink STag(32) Data Sink Tagged Offset(64) RDMA Read Message Size(32)
//   Data Source STag(32) Data Source Tagged Offset(64)
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "core/util/expected.h"
#include "core/wire/iwarp_constants.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::wire {

struct ReadRequest {
  std::uint32_t sink_stag = 0;
  std::uint64_t sink_tagged_offset = 0;
  std::uint32_t size = 0;  // zero-length Reads are legal (the RFC 6581 Read RTR is one)
  std::uint32_t source_stag = 0;
  std::uint64_t source_tagged_offset = 0;
  friend bool operator==(const ReadRequest&, const ReadRequest&) = default;
};

std::array<std::uint8_t, kReadRequestBodyLen> encode_read_request(const ReadRequest& request);
// The payload of a Read Request segment; anything but exactly 28 octets is an error.
Expected<ReadRequest, WireError> decode_read_request(std::span<const std::uint8_t> payload);

}  // namespace rdma_interop::wire
