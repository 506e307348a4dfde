#include "core/cm/backlog_counters.h"

namespace rdma_interop::cm {

std::string BacklogCounters::broken_invariant() const {
  const std::uint64_t left = pending + overflow_waiting + accepted + rejected_by_app +
                             pending_expired + pending_aborted + overflow_rejected +
                             overflow_dropped;
  if (requests != left) {
    return "requests " + std::to_string(requests) + " != the " + std::to_string(left) +
           " pending, waiting or gone";
  }
  const std::uint64_t half = std::uint64_t{half_open} + half_open_completed + half_open_expired +
                             half_open_aborted + half_open_evicted;
  if (half_open_opened != half) {
    return "half_open_opened " + std::to_string(half_open_opened) + " != the " +
           std::to_string(half) + " half-open or gone";
  }
  if (pending > high_water || high_water > backlog) {
    return "pending " + std::to_string(pending) + ", high_water " + std::to_string(high_water) +
           ", backlog " + std::to_string(backlog) + ": not pending <= high_water <= backlog";
  }
  if (half_open_limit != 0 && half_open > half_open_limit) {
    return "half_open " + std::to_string(half_open) + " over its limit " +
           std::to_string(half_open_limit);
  }
  if (overflow_waiting > 0 && pending < backlog) {
    return std::to_string(overflow_waiting) + " Requests wait while " +
           std::to_string(backlog - pending) + " slots are free";
  }
  return {};
}

}  // namespace rdma_interop::cm
