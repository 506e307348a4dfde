// The completion budget: a work request is posted only with a reserved completion entry, so
// outstanding work requests never exceed the CQ, under any interleaving.
#include <gtest/gtest.h>

#include <random>

#include "core/credit/completion_budget.h"

namespace rdma_interop::credit {
namespace {

using K = CompletionKind;

TEST(CompletionBudget, ForQueuesSizesTheCqForSendPlusReceive) {
  const auto c = CompletionBudget::for_queues(16, 32);
  EXPECT_EQ(c, (CompletionBudgetConfig{48, 16, 32}));
}

TEST(CompletionBudget, ReservationFailsWhenTheCqIsFullAndNothingChanges) {
  CompletionBudget b({3, 0, 0});
  ASSERT_TRUE(b.reserve(K::kSend));
  ASSERT_TRUE(b.reserve(K::kReceive, 2));
  EXPECT_EQ(b.available(), 0u);
  const auto before = b.counters();
  auto r = b.reserve(K::kSend);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), CreditError::kCompletionQueueFull);
  EXPECT_TRUE(is_try_again(r.error()));
  EXPECT_EQ(b.reserved(), 3u);
  EXPECT_EQ(b.counters().refused, before.refused + 1);
  ASSERT_TRUE(b.release(K::kReceive));
  EXPECT_TRUE(b.reserve(K::kSend));
  EXPECT_TRUE(b.broken_invariant().empty());
}

TEST(CompletionBudget, EachKindStaysWithinItsQueue) {
  CompletionBudget b(CompletionBudget::for_queues(2, 3));
  ASSERT_TRUE(b.reserve(K::kSend, 2));
  EXPECT_FALSE(b.reserve(K::kSend));       // the send queue's share is used up...
  EXPECT_TRUE(b.reserve(K::kReceive, 3));  // ...the receives' is not
  EXPECT_EQ(b.available(), 0u);
}

TEST(CompletionBudget, ReserveIsAllOrNothing) {
  CompletionBudget b({4, 0, 0});
  ASSERT_TRUE(b.reserve(K::kReceive, 3));
  EXPECT_FALSE(b.reserve(K::kReceive, 2));
  EXPECT_EQ(b.reserved(), 3u);
  EXPECT_FALSE(b.reserve(K::kSend, 0xFFFFFFFFu));  // no wrap-around
  EXPECT_EQ(b.reserved(), 3u);
}

TEST(CompletionBudget, ReleaseWithoutReservationIsRefused) {
  CompletionBudget b({4, 0, 0});
  ASSERT_TRUE(b.reserve(K::kSend));
  auto r = b.release(K::kReceive);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error(), CreditError::kNotReserved);
  EXPECT_FALSE(b.release(K::kSend, 2));
  EXPECT_EQ(b.reserved(K::kSend), 1u);
  EXPECT_TRUE(b.release(K::kSend));
  EXPECT_EQ(b.reserved(), 0u);
}

TEST(CompletionBudget, ZeroSizedCqRefusesEverything) {
  CompletionBudget b({0, 0, 0});
  EXPECT_FALSE(b.reserve(K::kSend));
  EXPECT_FALSE(b.reserve(K::kReceive));
}

// A model CQ: work requests are posted only with a reservation, complete in random order
// (one CQE each, as a flush does on error), and the CQ never holds more CQEs than entries.
TEST(CompletionBudget, RandomPostAndPollNeverOverrunsTheCq) {
  std::mt19937 rng(6);
  for (int round = 0; round < 20; ++round) {
    const std::uint32_t sq = 1 + rng() % 8, rq = 1 + rng() % 8;
    CompletionBudget b(CompletionBudget::for_queues(sq, rq));
    std::uint32_t outstanding[2] = {0, 0};  // posted, not yet completed
    std::uint32_t in_cq[2] = {0, 0};        // completed, not yet polled
    for (int step = 0; step < 5000; ++step) {
      const auto kind = static_cast<K>(rng() % 2);
      const int i = static_cast<int>(kind);
      switch (rng() % 3) {
        case 0:  // post: only after a reservation
          if (b.reserve(kind)) ++outstanding[i];
          break;
        case 1:  // the hardware completes one
          if (outstanding[i] > 0) --outstanding[i], ++in_cq[i];
          break;
        case 2:  // the provider polls one
          if (in_cq[i] > 0) {
            --in_cq[i];
            ASSERT_TRUE(b.release(kind));
          }
          break;
      }
      ASSERT_LE(in_cq[0] + in_cq[1], sq + rq) << "CQ overrun";
      ASSERT_LE(outstanding[0] + in_cq[0], sq);
      ASSERT_LE(outstanding[1] + in_cq[1], rq);
      ASSERT_EQ(b.reserved(), outstanding[0] + outstanding[1] + in_cq[0] + in_cq[1]);
      ASSERT_TRUE(b.broken_invariant().empty()) << b.broken_invariant();
    }
  }
}

}  // namespace
}  // namespace rdma_interop::credit
