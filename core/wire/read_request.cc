#include "core/wire/read_request.h"

#include "core/util/byte_order.h"

namespace rdma_interop::wire {

std::array<std::uint8_t, kReadRequestBodyLen> encode_read_request(const ReadRequest& r) {
  std::array<std::uint8_t, kReadRequestBodyLen> out{};
  store_be32(&out[0], r.sink_stag);
  store_be64(&out[4], r.sink_tagged_offset);
  store_be32(&out[12], r.size);
  store_be32(&out[16], r.source_stag);
  store_be64(&out[20], r.source_tagged_offset);
  return out;
}

Expected<ReadRequest, WireError> decode_read_request(std::span<const std::uint8_t> p) {
  if (p.size() != kReadRequestBodyLen) return unexpected(WireError::kRdmapReadRequestBadLength);
  return ReadRequest{.sink_stag = load_be32(&p[0]),
                     .sink_tagged_offset = load_be64(&p[4]),
                     .size = load_be32(&p[12]),
                     .source_stag = load_be32(&p[16]),
                     .source_tagged_offset = load_be64(&p[20])};
}

}  // namespace rdma_interop::wire
