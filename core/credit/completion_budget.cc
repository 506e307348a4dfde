#include "core/credit/completion_budget.h"

#include <algorithm>
#include <cassert>

namespace rdma_interop::credit {

std::string_view kind_name(CompletionKind k) {
  return k == CompletionKind::kSend ? "send" : "receive";
}

CompletionBudgetConfig CompletionBudget::for_queues(std::uint32_t send_queue_depth,
                                                    std::uint32_t receive_queue_depth) {
  return {send_queue_depth + receive_queue_depth, send_queue_depth, receive_queue_depth};
}

CompletionBudget::CompletionBudget(const CompletionBudgetConfig& config) : config_(config) {}

std::uint32_t CompletionBudget::cap(CompletionKind kind) const {
  const std::uint32_t own =
      kind == CompletionKind::kSend ? config_.send_entries : config_.receive_entries;
  return own == 0 ? config_.cq_entries : std::min(own, config_.cq_entries);
}

std::uint32_t CompletionBudget::reserved(CompletionKind kind) const {
  return kind == CompletionKind::kSend ? send_reserved_ : receive_reserved_;
}

std::uint32_t CompletionBudget::available() const {
  return config_.cq_entries - reserved();
}

Expected<std::uint32_t, CreditError> CompletionBudget::reserve(CompletionKind kind,
                                                               std::uint32_t n) {
  // Compared as differences so that a huge n cannot wrap around.
  if (n > available() || n > cap(kind) - reserved(kind)) {
    ++refused_;
    return unexpected(CreditError::kCompletionQueueFull);
  }
  (kind == CompletionKind::kSend ? send_reserved_ : receive_reserved_) += n;
  reserved_total_ += n;
  high_water_ = std::max(high_water_, reserved());
  check();
  return available();
}

Expected<std::uint32_t, CreditError> CompletionBudget::release(CompletionKind kind,
                                                               std::uint32_t n) {
  std::uint32_t& held = kind == CompletionKind::kSend ? send_reserved_ : receive_reserved_;
  if (n > held) return unexpected(CreditError::kNotReserved);
  held -= n;
  released_total_ += n;
  check();
  return available();
}

CompletionBudgetCounters CompletionBudget::counters() const {
  return {config_.cq_entries, send_reserved_,  receive_reserved_, high_water_,
          reserved_total_,    released_total_, refused_};
}

std::string_view CompletionBudget::broken_invariant() const {
  if (reserved() > config_.cq_entries) return "more entries reserved than the CQ holds";
  if (send_reserved_ > cap(CompletionKind::kSend)) return "sends over their cap";
  if (receive_reserved_ > cap(CompletionKind::kReceive)) return "receives over their cap";
  if (reserved_total_ != released_total_ + reserved()) return "reservations not conserved";
  if (high_water_ > config_.cq_entries) return "high water above the CQ size";
  return {};
}

void CompletionBudget::check() const {
#ifndef NDEBUG
  assert(broken_invariant().empty());
#endif
}

}  // namespace rdma_interop::credit
