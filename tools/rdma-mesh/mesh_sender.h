// mesh_sender.h - the node's one sending thread: requests or stream messages to every peer,
// round robin, paced per peer or as fast as credits allow.
//
// Per-peer queues (the default). Each peer has its own token bucket at --rate. A due message
// goes to send(); kTryAgain (that peer's queue is full: it is not consuming) skips the peer
// for this round and the message is not sent (counted refused), while every other peer goes
// on. Unthrottled (--rate 0), a refused peer is left alone until the endpoint's on_ready
// says it has room again (or 20 ms pass, in case the wake-up raced the refusal).
//
// Shared queue (--shared-queue, the negative control). One FIFO for all peers, as an
// application with a single send queue has: messages are due round robin at rate x peers,
// and a refused head message blocks everything behind it until that peer takes it
// (wait_ready). One stalled peer then stalls the whole node: head-of-line blocking.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/messaging/message_endpoint.h"
#include "tools/rdma-mesh/mesh_config.h"
#include "tools/rdma-mesh/mesh_payload.h"
#include "tools/rdma-mesh/peer_tally.h"

namespace rdma_interop::mesh {

class MeshSender {
 public:
  using Clock = std::chrono::steady_clock;
  struct Target {
    messaging::PeerId id = 0;
    PeerTally* tally = nullptr;
  };

  // One tally per peer, in the node's peer order; they outlive the sender.
  MeshSender(const MeshConfig& config, std::vector<PeerTally*> tallies);

  // Sends to the peers `ids` of `endpoint` (same order as the tallies) until `deadline` or
  // until `stop` is set. Call once, on the sending thread.
  void run(messaging::MessageEndpoint& endpoint, const std::vector<messaging::PeerId>& ids,
           Clock::time_point deadline, const std::atomic<bool>& stop);
  // The endpoint's on_ready (or on_failure) for peer index `peer`: wakes an unthrottled
  // sender waiting for room. Any thread, also before run().
  void notify_ready(std::size_t peer);

 private:
  // One send() of the next message to target i; counts the outcome.
  messaging::SendStatus send_next(std::size_t i);
  bool usable(std::size_t i) const;
  void run_paced(Clock::time_point deadline, const std::atomic<bool>& stop);
  void run_unthrottled(Clock::time_point deadline, const std::atomic<bool>& stop);
  void run_shared(Clock::time_point deadline, const std::atomic<bool>& stop);

  messaging::MessageEndpoint* endpoint_ = nullptr;  // run()'s
  const MeshConfig& config_;
  const MessageTag tag_;
  std::vector<Target> targets_;
  std::vector<std::uint64_t> next_sequence_;
  std::vector<std::uint8_t> payload_;

  std::mutex mu_;
  std::condition_variable ready_cv_;
  std::vector<bool> blocked_;  // unthrottled: refused and not yet ready again
  std::uint64_t ready_events_ = 0;
};

}  // namespace rdma_interop::mesh
