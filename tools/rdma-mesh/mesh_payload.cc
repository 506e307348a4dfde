#include "tools/rdma-mesh/mesh_payload.h"

namespace rdma_interop::mesh {

std::string_view tag_name(MessageTag t) {
  switch (t) {
    case MessageTag::kStream:
      return "stream";
    case MessageTag::kRequest:
      return "request";
    case MessageTag::kReply:
      return "reply";
    case MessageTag::kStart:
      return "start";
    case MessageTag::kEnd:
      return "end";
  }
  return "unknown";
}

std::vector<std::uint8_t> make_payload(MessageTag tag, std::uint64_t sequence, std::size_t size) {
  std::vector<std::uint8_t> out(size == 0 ? 1 : size);
  for (std::size_t i = 1; i < out.size(); ++i) out[i] = static_cast<std::uint8_t>(i % 251);
  out[0] = static_cast<std::uint8_t>(tag);
  stamp_sequence(out, sequence);
  return out;
}

void stamp_sequence(std::span<std::uint8_t> payload, std::uint64_t sequence) {
  if (payload.size() < kSequencedPayloadSize) return;
  for (int i = 0; i < 8; ++i) payload[1 + i] = static_cast<std::uint8_t>(sequence >> (56 - 8 * i));
}

std::optional<PayloadHeader> parse_payload(std::span<const std::uint8_t> payload) {
  if (payload.empty()) return std::nullopt;
  PayloadHeader h;
  switch (payload[0]) {
    case static_cast<std::uint8_t>(MessageTag::kStream):
    case static_cast<std::uint8_t>(MessageTag::kRequest):
    case static_cast<std::uint8_t>(MessageTag::kReply):
    case static_cast<std::uint8_t>(MessageTag::kStart):
    case static_cast<std::uint8_t>(MessageTag::kEnd):
      h.tag = static_cast<MessageTag>(payload[0]);
      break;
    default:
      return std::nullopt;
  }
  if (payload.size() >= kSequencedPayloadSize) {
    std::uint64_t s = 0;
    for (int i = 0; i < 8; ++i) s = (s << 8) | payload[1 + i];
    h.sequence = s;
  }
  return h;
}

}  // namespace rdma_interop::mesh
