#include "core/transport/completion_queue.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace rdma_interop::transport {

void CompletionQueue::signal_waiters_locked() {
  if (fd_waiters_ == 0 || signalled_) return;
  signalled_ = true;
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wait_fd_, &one, sizeof one);
}

CompletionQueue::CompletionQueue(std::uint32_t entries) : entries_(entries) {}

CompletionQueue::~CompletionQueue() {
  if (wait_fd_ >= 0) ::close(wait_fd_);
}

bool CompletionQueue::push(rdmap::WorkCompletion wc) {
  std::lock_guard lock(mu_);
  if (entries_ != 0 && queue_.size() >= entries_) {
    ++overruns_;
    return false;
  }
  queue_.push_back(std::move(wc));
  ++pushed_;
  high_water_ = std::max(high_water_, static_cast<std::uint32_t>(queue_.size()));
  return true;
}

namespace {
// How deep this thread is inside the handler of which queue: set_handler() from inside a
// handler must not wait for itself.
thread_local const CompletionQueue* handler_queue = nullptr;
thread_local std::uint32_t handler_depth = 0;
}  // namespace

void CompletionQueue::notify() {
  std::shared_ptr<const Handler> handler;
  {
    std::lock_guard lock(mu_);
    signal_waiters_locked();
    handler = handler_;
    if (handler) ++handler_calls_;
  }
  // Every waiter: connections sharing the queue poll it from their own threads, and any of
  // them may take the entry.
  cv_.notify_all();
  if (!handler) return;
  const CompletionQueue* outer_queue = std::exchange(handler_queue, this);
  const std::uint32_t outer_depth =
      std::exchange(handler_depth, outer_queue == this ? handler_depth + 1 : 1);
  (*handler)();
  handler_queue = outer_queue;
  handler_depth = outer_depth;
  std::lock_guard lock(mu_);
  if (--handler_calls_ == 0) handler_done_.notify_all();
}

void CompletionQueue::set_handler(Handler handler) {
  std::unique_lock lock(mu_);
  handler_ = handler ? std::make_shared<const Handler>(std::move(handler)) : nullptr;
  const std::uint32_t mine = handler_queue == this ? handler_depth : 0;
  handler_done_.wait(lock, [&] { return handler_calls_ <= mine; });
}

void CompletionQueue::offer_executor(Executor executor) {
  std::lock_guard lock(mu_);
  if (!executor_) executor_ = std::move(executor);
}

bool CompletionQueue::run_soon(std::function<void()> task) {
  Executor executor;
  {
    std::lock_guard lock(mu_);
    executor = executor_;
  }
  return executor && executor(std::move(task));
}

std::size_t CompletionQueue::poll_now(std::vector<rdmap::WorkCompletion>& out, std::size_t max) {
  out.clear();
  std::lock_guard lock(mu_);
  const std::size_t n = std::min(max, queue_.size());
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  polled_ += n;
  return n;
}

void CompletionQueue::wake() {
  {
    std::lock_guard lock(mu_);
    ++wakes_;
    signal_waiters_locked();
  }
  cv_.notify_all();
}

int CompletionQueue::wait_fd() {
  std::lock_guard lock(mu_);
  if (wait_fd_ < 0) wait_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  return wait_fd_;
}

std::uint64_t CompletionQueue::wake_generation() const {
  std::lock_guard lock(mu_);
  return wakes_;
}

bool CompletionQueue::arm_fd_wait(std::uint64_t wake_generation) {
  std::lock_guard lock(mu_);
  if (wait_fd_ < 0 || !queue_.empty() || wakes_ != wake_generation) return false;
  ++fd_waiters_;
  return true;
}

void CompletionQueue::disarm_fd_wait() {
  std::lock_guard lock(mu_);
  if (fd_waiters_ > 0) --fd_waiters_;
  if (fd_waiters_ == 0) {
    // Reset the eventfd only when it was signalled: the read is a syscall, and the common
    // wakeup is the socket's.
    if (signalled_) {
      std::uint64_t count = 0;
      [[maybe_unused]] const auto n = ::read(wait_fd_, &count, sizeof count);
      signalled_ = false;
    }
  }
}

std::vector<rdmap::WorkCompletion> CompletionQueue::poll(std::size_t max, Millis timeout) {
  std::unique_lock lock(mu_);
  return poll_locked(lock, max, timeout, wakes_);
}

std::vector<rdmap::WorkCompletion> CompletionQueue::poll(std::size_t max, Millis timeout,
                                                         std::uint64_t generation) {
  std::unique_lock lock(mu_);
  return poll_locked(lock, max, timeout, generation);
}

std::vector<rdmap::WorkCompletion> CompletionQueue::poll_locked(std::unique_lock<std::mutex>& lock,
                                                                std::size_t max, Millis timeout,
                                                                std::uint64_t generation) {
  if (queue_.empty() && timeout > Millis::zero()) {
    cv_.wait_for(lock, timeout, [&] { return !queue_.empty() || wakes_ != generation; });
  }
  const std::size_t n = std::min(max, queue_.size());
  std::vector<rdmap::WorkCompletion> out;
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  polled_ += n;
  return out;
}

bool CompletionQueue::overrun() const {
  std::lock_guard lock(mu_);
  return overruns_ != 0;
}

CompletionQueueCounters CompletionQueue::counters() const {
  std::lock_guard lock(mu_);
  CompletionQueueCounters c;
  c.entries = entries_;
  c.depth = static_cast<std::uint32_t>(queue_.size());
  c.high_water = high_water_;
  c.pushed = pushed_;
  c.polled = polled_;
  c.overruns = overruns_;
  return c;
}

}  // namespace rdma_interop::transport
