#include "core/transport/completion_wait.h"

#include <algorithm>

namespace rdma_interop::transport {

std::vector<rdmap::WorkCompletion> wait_and_take_completions(
    std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
    std::deque<rdmap::WorkCompletion>& queue, std::size_t max, Millis timeout) {
  if (queue.empty() && timeout > Millis::zero()) {
    cv.wait_for(lock, timeout, [&] { return !queue.empty(); });
  }
  std::vector<rdmap::WorkCompletion> out;
  const std::size_t n = std::min(max, queue.size());
  out.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(std::move(queue.front()));
    queue.pop_front();
  }
  return out;
}

}  // namespace rdma_interop::transport
