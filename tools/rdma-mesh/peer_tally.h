// peer_tally.h - what the mesh application itself counts per peer, next to the endpoint's
// own figures (PeerStats): messages by kind in each direction, sequence checks, and how the
// sender fared. Written by the sender, the endpoint's handler thread and the slow consumer;
// read by the reporter: every field is a relaxed atomic (each is one independent count).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "tools/rdma-mesh/mesh_payload.h"

namespace rdma_interop::mesh {

// Index of a tag in the per-tag arrays below.
inline constexpr std::size_t kTagCount = 5;
constexpr std::size_t tag_index(MessageTag t) {
  switch (t) {
    case MessageTag::kStream:
      return 0;
    case MessageTag::kRequest:
      return 1;
    case MessageTag::kReply:
      return 2;
    case MessageTag::kStart:
      return 3;
    case MessageTag::kEnd:
      return 4;
  }
  return 0;
}

struct PeerTally {
  using Counter = std::atomic<std::uint64_t>;
  std::array<Counter, kTagCount> sent{};      // accepted by send()/reply() (kOk)
  std::array<Counter, kTagCount> received{};  // delivered to our handler
  Counter sequence_errors{0};  // a message whose number is not the next one of its kind
  Counter unknown{0};          // a payload without a known tag
  Counter refused{0};          // send() said kTryAgain (the endpoint counts it as well)
  Counter send_errors{0};      // send()/reply()/hold() said anything but kOk or kTryAgain
  Counter head_blocked_us{0};  // --shared-queue: time the whole queue waited on this peer
  std::atomic<bool> gone{
      false};  // it failed or closed (or send() said so): nothing more goes there

  std::uint64_t sent_of(MessageTag t) const { return sent[tag_index(t)].load(kRelaxed); }
  std::uint64_t received_of(MessageTag t) const { return received[tag_index(t)].load(kRelaxed); }
  static constexpr auto kRelaxed = std::memory_order_relaxed;
};

}  // namespace rdma_interop::mesh
