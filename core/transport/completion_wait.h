// completion_wait.h - poll_completions() for a provider's connection core: wait for the
// completion queue to fill, then hand out what is there.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <vector>

#include "core/rdmap/work_request.h"
#include "core/transport/provider.h"

namespace rdma_interop::transport {

// With `lock` held on the mutex that guards `queue`: waits on `cv` up to `timeout` while
// `queue` is empty, then moves out its first `max` completions, oldest first. The cv is the
// core's own (it also signals other conditions), so the wait rechecks the queue.
std::vector<rdmap::WorkCompletion> wait_and_take_completions(
    std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
    std::deque<rdmap::WorkCompletion>& queue, std::size_t max, Millis timeout);

}  // namespace rdma_interop::transport
