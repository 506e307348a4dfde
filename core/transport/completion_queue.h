// completion_queue.h - a provider's completion queue: what a connection's work requests
// complete into, and what the application polls. Several connections may share one, as verbs
// queue pairs share an ibv_cq; the application tells their completions apart by wr_id.
//
// A queue has a size, like a hardware CQ. A completion that finds it full is an overrun: the
// entry is lost and counted, and overrun() stays true (verbs reports IBV_EVENT_CQ_ERR and
// the CQ is unusable). Nothing in the provider prevents it; the application sizes the queue
// for every work request it can have outstanding, or reserves an entry before each post
// (core/credit/completion_budget.h). Only the completion that found the queue full is lost:
// later ones are queued again once there is room, so a test can still see what followed,
// but an application that finds overrun() true has lost track of a work request and should
// treat the queue (and every connection on it) as failed. Size 0 means unbounded: the queue
// a connection makes for itself when QpCaps::cq is null, so a plain connection behaves as
// before.
//
// A consumer either waits for completions (poll()) or has them handed to it where they are
// made: with a handler (set_handler), notify() runs it on the producer's thread once the
// producer's locks are released, as a kernel ULP's ib_cq completion handler runs where the
// completion was noticed. That is how a message endpoint processes a message, grants
// credits and answers on the thread that read it from the socket, with no thread between.
//
// Threading: every member is thread-safe. Producers push with their own locks held (the
// queue's lock is the innermost of all) and call notify() once they have released them, so
// a consumer is never woken into a lock its producer still holds. Consumers wait in poll()
// on a condition variable, or, a thread receiving for its own connection while it waits,
// in poll(2) on wait_fd() (arm_fd_wait / disarm_fd_wait). A handler runs with no provider
// lock held; several producers may run it at once (it serialises what it must).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/rdmap/work_request.h"

namespace rdma_interop::transport {

using Millis = std::chrono::milliseconds;
using Micros = std::chrono::microseconds;

struct CompletionQueueCounters {
  std::uint32_t entries = 0;     // the size; 0: unbounded
  std::uint32_t depth = 0;       // completions waiting to be polled
  std::uint32_t high_water = 0;  // most ever waiting at once
  std::uint64_t pushed = 0;      // completions queued
  std::uint64_t polled = 0;      // completions handed out
  std::uint64_t overruns = 0;    // completions lost because the queue was full
  friend bool operator==(const CompletionQueueCounters&, const CompletionQueueCounters&) = default;
};

class CompletionQueue {
 public:
  explicit CompletionQueue(std::uint32_t entries = 0);
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Producer side. False on overrun: the queue is full, `wc` is dropped and counted. Wakes
  // no one: call notify() after the push, once the producer's own locks are released.
  bool push(rdmap::WorkCompletion wc);
  // Wakes the consumers waiting for a completion, then runs the handler, if one is set, on
  // this thread. The producer holds no lock of its own here.
  void notify();

  // The handler notify() runs (provider.h says on which threads producers notify). Null
  // removes it; set_handler returns once no other thread is inside the handler it replaced,
  // so what the old handler uses may then be destroyed. From inside that handler it waits
  // for the other threads only.
  using Handler = std::function<void()>;
  void set_handler(Handler handler);
  // A provider offers a thread of its own (its event thread) for work a consumer found on a
  // thread that must not do it (an application thread inside a call): run_soon(task) has
  // the provider run `task` there, soon. The first offer is kept. False when no provider
  // offered one, or it is gone: the task was not taken.
  using Executor = std::function<bool(std::function<void()>)>;
  void offer_executor(Executor executor);
  bool run_soon(std::function<void()> task);
  // Takes up to `max` completions without waiting into `out` (cleared first; its memory is
  // reused): how a handler drains the queue. Returns how many it took.
  std::size_t poll_now(std::vector<rdmap::WorkCompletion>& out, std::size_t max);
  // Wakes every waiting poll() at once (they return what is there, possibly nothing): how a
  // consumer thread is told to look at something else, e.g. to stop.
  void wake();

  // For a consumer that waits in poll(2) next to its socket: an eventfd that turns readable
  // on notify() and wake() while the consumer is armed. -1 if none can be made (the
  // consumer then waits in poll()). arm_fd_wait() returns false, and arms nothing, when
  // there is a completion to take or wake() was called since `wake_generation` was read.
  int wait_fd();
  std::uint64_t wake_generation() const;
  bool arm_fd_wait(std::uint64_t wake_generation);
  void disarm_fd_wait();

  // Waits up to `timeout` for at least one completion, then moves out up to `max`, oldest
  // first. Empty on timeout or wake(); a zero (or negative) timeout does not wait.
  std::vector<rdmap::WorkCompletion> poll(std::size_t max, Millis timeout);
  // The same, for a waiter that read wake_generation() earlier: a wake() since then ends
  // the wait at once instead of being missed.
  std::vector<rdmap::WorkCompletion> poll(std::size_t max, Millis timeout,
                                          std::uint64_t wake_generation);

  std::uint32_t entries() const { return entries_; }
  // True from the first overrun on.
  bool overrun() const;
  CompletionQueueCounters counters() const;  // a consistent snapshot

 private:
  std::vector<rdmap::WorkCompletion> poll_locked(std::unique_lock<std::mutex>& lock,
                                                 std::size_t max, Millis timeout,
                                                 std::uint64_t generation);

  const std::uint32_t entries_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<rdmap::WorkCompletion> queue_;
  std::uint64_t wakes_ = 0;  // wake() generations: a waiting poll returns when it changes
  std::uint32_t high_water_ = 0;
  std::uint64_t pushed_ = 0;
  std::uint64_t polled_ = 0;
  std::uint64_t overruns_ = 0;
  void signal_waiters_locked();
  int wait_fd_ = -1;  // eventfd, made on first use
  std::uint32_t fd_waiters_ = 0;
  bool signalled_ = false;  // wait_fd_ is readable: reset by the last waiter to disarm
  std::shared_ptr<const Handler> handler_;
  std::uint32_t handler_calls_ = 0;  // threads inside a handler now
  std::condition_variable handler_done_;
  Executor executor_;
};

}  // namespace rdma_interop::transport
