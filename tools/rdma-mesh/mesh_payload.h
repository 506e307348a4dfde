// mesh_payload.h - what a mesh message carries: a tag saying what it is and a sequence
// number, so the receiver can count by kind and see a gap or a reordering.
//
//   octet 0      tag: 'S' stream, 'Q' request, 'R' reply, 'B' start barrier, 'E' end barrier
//   octets 1..8  sequence number, network byte order (only when the payload has room):
//                per peer and tag, from 0; a reply carries its request's number
//   the rest     filler (the octet's index, mod 251), never checked
//
// The endpoint's credit header comes before all of this and is not part of the payload.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace rdma_interop::mesh {

enum class MessageTag : std::uint8_t {
  kStream = 'S',
  kRequest = 'Q',
  kReply = 'R',
  kStart = 'B',
  kEnd = 'E',
};
std::string_view tag_name(MessageTag t);  // "stream", "request", "reply", "start", "end"

// Octets a payload needs to carry a sequence number.
inline constexpr std::size_t kSequencedPayloadSize = 9;

// A payload of `size` octets (at least 1) with `tag` and, when size allows, `sequence`.
std::vector<std::uint8_t> make_payload(MessageTag tag, std::uint64_t sequence, std::size_t size);
// Rewrites the sequence number of a payload make_payload() built (no-op when it has none), so
// a sender reuses one buffer.
void stamp_sequence(std::span<std::uint8_t> payload, std::uint64_t sequence);

struct PayloadHeader {
  MessageTag tag = MessageTag::kStream;
  std::optional<std::uint64_t> sequence;  // absent in payloads under kSequencedPayloadSize
};
// Nullopt for an empty payload or an unknown tag.
std::optional<PayloadHeader> parse_payload(std::span<const std::uint8_t> payload);

}  // namespace rdma_interop::mesh
