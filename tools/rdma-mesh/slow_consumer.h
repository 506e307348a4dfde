// slow_consumer.h - the --handler-delay-us personality: received messages are handled one at
// a time, each taking a fixed delay, on a thread of their own.
//
// The endpoint's handler hold()s a message and submits it here, so its receive buffer is not
// granted to the peer again until the job is done (reply() or release()): a slow consumer
// slows its senders through credits, instead of queueing without bound. Jobs are kept per
// peer and taken round robin, so one peer that sends a lot (or breaks the protocol) gets its
// share of the consumer, not all of it. The queues are bounded by the endpoint: at most one
// job per held message, and a peer holds at most its receive window.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/messaging/message_endpoint.h"

namespace rdma_interop::mesh {

struct ConsumerJob {
  std::size_t peer = 0;  // index into the node's peer list
  messaging::MessageId message = 0;
  bool reply = false;          // reply() when done; otherwise release()
  std::uint64_t sequence = 0;  // the request's number, for the reply
};

class SlowConsumer {
 public:
  // `finish` runs on the consumer thread after `delay`, once per job (not for dropped ones).
  using Finish = std::function<void(const ConsumerJob&)>;
  SlowConsumer(std::size_t peers, std::chrono::microseconds delay, Finish finish);
  ~SlowConsumer();  // stop()
  SlowConsumer(const SlowConsumer&) = delete;
  SlowConsumer& operator=(const SlowConsumer&) = delete;

  // Queues a job (ignored after stop()).
  void submit(const ConsumerJob& job);
  // Forgets a peer's waiting jobs (its connection failed: their messages are gone).
  void drop_peer(std::size_t peer);
  // Jobs waiting now, all peers.
  std::size_t waiting() const;
  // Finishes the job in hand, drops the rest, joins the thread.
  void stop();

 private:
  void run();

  const std::chrono::microseconds delay_;
  const Finish finish_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::deque<ConsumerJob>> queues_;
  std::size_t next_ = 0;  // round robin: the peer to look at first
  std::size_t waiting_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace rdma_interop::mesh
