// completion_budget.h - a completion queue entry reserved for every work request before it is
// posted, so a completion queue cannot overrun.
//
// A CQ overrun is fatal to every queue pair on the CQ (verbs: IBV_EVENT_CQ_ERR), and it
// happens when more work requests are outstanding than the CQ has entries. The budget makes
// it impossible by construction: the provider reserves an entry before posting a work request
// (send or receive) and releases it when it polls that request's completion. A work request
// always completes exactly once, successfully or flushed when the queue pair fails, so the
// reserved count is always >= the completions the CQ can hold at once.
//
//   CompletionBudget budget(CompletionBudget::for_queues(sq_depth, rq_depth));
//   if (auto r = budget.reserve(CompletionKind::kSend); !r) return r.error();  // EAGAIN-like
//   if (post_send(...) fails) budget.release(CompletionKind::kSend);           // never posted
//   on each polled completion: budget.release(kind_of(wc));
//
// With a CreditWindow, reserve the entry first: it is the cheap one to give back when the
// window then refuses (kNoCredit, kNoSendSlot). Several queue pairs sharing one CQ share one
// budget, sized for the sum of their queues. Sans-I/O: counts only, no CQ is touched.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/credit/credit_error.h"
#include "core/util/expected.h"

namespace rdma_interop::credit {

enum class CompletionKind : std::uint8_t { kSend, kReceive };
std::string_view kind_name(CompletionKind k);  // "send", "receive"

struct CompletionBudgetConfig {
  std::uint32_t cq_entries = 0;       // the CQ's size; every reservation counts against it
  std::uint32_t send_entries = 0;     // at most this many reserved for sends (0: no own cap)
  std::uint32_t receive_entries = 0;  // at most this many reserved for receives (0: no own cap)
  friend bool operator==(const CompletionBudgetConfig&, const CompletionBudgetConfig&) = default;
};

struct CompletionBudgetCounters {
  std::uint32_t cq_entries = 0;
  std::uint32_t send_reserved = 0;
  std::uint32_t receive_reserved = 0;
  std::uint32_t high_water = 0;  // most entries ever reserved at once
  std::uint64_t reserved_total = 0;
  std::uint64_t released_total = 0;
  std::uint64_t refused = 0;  // reservations refused with kCompletionQueueFull
  friend bool operator==(const CompletionBudgetCounters&,
                         const CompletionBudgetCounters&) = default;
};

class CompletionBudget {
 public:
  // A CQ serving one send queue and one receive queue of these depths: sq + rq entries, and
  // each kind capped at its queue's depth.
  static CompletionBudgetConfig for_queues(std::uint32_t send_queue_depth,
                                           std::uint32_t receive_queue_depth);

  explicit CompletionBudget(const CompletionBudgetConfig& config);

  // Reserves `n` entries for work requests of `kind`, all or none. Returns the entries now
  // free. kCompletionQueueFull (try again after polling): nothing reserved.
  Expected<std::uint32_t, CreditError> reserve(CompletionKind kind, std::uint32_t n = 1);
  // Gives back `n` entries of `kind`: their completions were polled, or the work requests
  // were never posted. kNotReserved (a caller bug) when fewer are reserved: nothing changed.
  Expected<std::uint32_t, CreditError> release(CompletionKind kind, std::uint32_t n = 1);

  std::uint32_t available() const;  // entries free for any kind
  std::uint32_t reserved() const { return send_reserved_ + receive_reserved_; }
  std::uint32_t reserved(CompletionKind kind) const;
  CompletionBudgetCounters counters() const;
  const CompletionBudgetConfig& config() const { return config_; }
  // Empty when reserved <= cq_entries, each kind within its cap and the totals add up.
  std::string_view broken_invariant() const;

 private:
  std::uint32_t cap(CompletionKind kind) const;
  void check() const;

  CompletionBudgetConfig config_;
  std::uint32_t send_reserved_ = 0;
  std::uint32_t receive_reserved_ = 0;
  std::uint32_t high_water_ = 0;
  std::uint64_t reserved_total_ = 0;
  std::uint64_t released_total_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace rdma_interop::credit
