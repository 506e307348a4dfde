#include "core/transport/completion_queue.h"

#include <algorithm>

namespace rdma_interop::transport {

CompletionQueue::CompletionQueue(std::uint32_t entries) : entries_(entries) {}

bool CompletionQueue::push(rdmap::WorkCompletion wc) {
  {
    std::lock_guard lock(mu_);
    if (entries_ != 0 && queue_.size() >= entries_) {
      ++overruns_;
      return false;
    }
    queue_.push_back(std::move(wc));
    ++pushed_;
    high_water_ = std::max(high_water_, static_cast<std::uint32_t>(queue_.size()));
  }
  // Every waiter: connections sharing the queue poll it from their own threads, and any of
  // them may take this entry.
  cv_.notify_all();
  return true;
}

void CompletionQueue::wake() {
  {
    std::lock_guard lock(mu_);
    ++wakes_;
  }
  cv_.notify_all();
}

std::vector<rdmap::WorkCompletion> CompletionQueue::poll(std::size_t max, Millis timeout) {
  std::unique_lock lock(mu_);
  if (queue_.empty() && timeout > Millis::zero()) {
    const std::uint64_t generation = wakes_;
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
