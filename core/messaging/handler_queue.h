// handler_queue.h - a message endpoint's handlers, and what waits for them.
//
// The endpoint has no thread of its own: the provider thread that processed completions runs
// the queue afterwards (run()), so a message reaches its handler on the thread that read it.
// Handlers run one at a time, in the order found; a thread that finds another running them
// leaves its callbacks to that one. After a message's handler returns, `after_delivery` lets
// the message's buffer go back to its peer (unless the handler held or answered it).
//
// Threading: every member is thread-safe. The queue's lock is a leaf, never held while a
// handler runs. stop() from outside the handlers waits for the one running; from a handler
// it only keeps every later one from starting.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "core/messaging/message.h"
#include "core/messaging/peer_link.h"

namespace rdma_interop::messaging {

class HandlerQueue final : public HandlerSink {
 public:
  using AfterDelivery = std::function<void(const Delivery&)>;
  explicit HandlerQueue(AfterDelivery after_delivery);

  void set(MessageHandler handler);
  void set(ReadyHandler handler);
  void set_failure(FailureHandler handler);
  void set_close(CloseHandler handler);

  bool takes_messages() const override;
  void queue(Callback callback) override;
  // Callbacks wait and no thread runs them: someone should run() (or have a provider thread
  // do it).
  bool waiting() const;
  // Runs what is queued, and what is queued meanwhile, until none is left. Returns at once
  // when another thread runs them, or the queue is stopped.
  void run();
  // This thread is running this queue's handlers (a handler calling back into the endpoint).
  bool running_here() const;
  // No handler starts after this; what waits is dropped. Idempotent.
  void stop();

 private:
  const AfterDelivery after_delivery_;
  mutable std::mutex mu_;
  std::condition_variable done_;  // the runner left
  MessageHandler on_message_;
  ReadyHandler on_ready_;
  FailureHandler on_failure_;
  CloseHandler on_close_;
  std::deque<Callback> waiting_;
  bool running_ = false;
  bool stopped_ = false;
};

}  // namespace rdma_interop::messaging
