#include "tools/rdma-mesh/slow_consumer.h"

#include <optional>

namespace rdma_interop::mesh {

SlowConsumer::SlowConsumer(std::size_t peers, std::chrono::microseconds delay, Finish finish)
    : delay_(delay), finish_(std::move(finish)), queues_(peers) {
  thread_ = std::thread([this] { run(); });
}

SlowConsumer::~SlowConsumer() {
  stop();
}

void SlowConsumer::submit(const ConsumerJob& job) {
  std::lock_guard lock(mu_);
  if (stopping_ || job.peer >= queues_.size()) return;
  queues_[job.peer].push_back(job);
  ++waiting_;
  cv_.notify_one();
}

void SlowConsumer::drop_peer(std::size_t peer) {
  std::lock_guard lock(mu_);
  if (peer >= queues_.size()) return;
  waiting_ -= queues_[peer].size();
  queues_[peer].clear();
}

std::size_t SlowConsumer::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

void SlowConsumer::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& q : queues_) q.clear();
    waiting_ = 0;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SlowConsumer::run() {
  for (;;) {
    std::optional<ConsumerJob> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || waiting_ > 0; });
      if (stopping_) return;
      for (std::size_t k = 0; k < queues_.size() && !job; ++k) {
        auto& q = queues_[(next_ + k) % queues_.size()];
        if (q.empty()) continue;
        job = q.front();
        q.pop_front();
        --waiting_;
        next_ = (next_ + k + 1) % queues_.size();
      }
    }
    if (!job) continue;
    // The work this consumer stands for: it takes `delay_`, whatever else is going on.
    std::this_thread::sleep_for(delay_);
    finish_(*job);
  }
}

}  // namespace rdma_interop::mesh
