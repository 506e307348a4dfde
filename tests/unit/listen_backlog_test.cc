// The listen backlog engine: slots held until the application decides, overflow by policy,
// half-open eviction and expiry, events, and counters exact under random interleavings.
#include "core/cm/listen_backlog.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

namespace rdma_interop::cm {
namespace {

using std::chrono::milliseconds;
using TimePoint = ListenBacklog::TimePoint;
using Type = BacklogActionType;

const TimePoint t0{};

BacklogConfig config(std::uint32_t backlog, BacklogOverflow overflow,
                     std::uint32_t half_open_limit = 0) {
  BacklogConfig c;
  c.backlog = backlog;
  c.overflow = overflow;
  c.half_open_limit = half_open_limit;
  c.request_timeout = milliseconds(100);
  c.decision_timeout = milliseconds(1000);
  c.overflow_timeout = milliseconds(300);
  return c;
}

// Every invariant in backlog_counters.h, plus what the engine's queues say.
::testing::AssertionResult invariants_hold(const ListenBacklog& b) {
  const BacklogCounters c = b.counters();
  if (const std::string broken = c.broken_invariant(); !broken.empty()) {
    return ::testing::AssertionFailure() << broken;
  }
  std::uint32_t stages[3] = {0, 0, 0};
  for (const auto id : b.ids()) stages[static_cast<int>(*b.stage_of(id))]++;
  if (stages[0] != c.half_open || stages[1] != c.pending || stages[2] != c.overflow_waiting) {
    return ::testing::AssertionFailure() << "queues disagree with the counters";
  }
  return ::testing::AssertionSuccess();
}

TEST(ListenBacklog, BrokenCountersAreNamedWithTheirFigures) {
  BacklogCounters c;
  c.backlog = 2;
  EXPECT_EQ(c.broken_invariant(), "");
  c.requests = 1;
  EXPECT_EQ(c.broken_invariant(), "requests 1 != the 0 pending, waiting or gone");
  c.accepted = 1;
  c.overflow_waiting = 1;
  c.requests = 2;
  EXPECT_EQ(c.broken_invariant(), "1 Requests wait while 2 slots are free");
  c.pending = 2;
  c.requests = 4;
  EXPECT_NE(c.broken_invariant().find("not pending <= high_water <= backlog"), std::string::npos);
  c.high_water = 2;
  EXPECT_EQ(c.broken_invariant(), "");
  c.half_open_opened = 1;
  EXPECT_EQ(c.broken_invariant(), "half_open_opened 1 != the 0 half-open or gone");
}

TEST(ListenBacklog, MarkerIsExactlyTheDocumentedOctets) {
  const auto pd = backlog_full_private_data();
  EXPECT_EQ(std::string(pd.begin(), pd.end()), "rdma-interop:backlog-full");
  EXPECT_TRUE(is_backlog_full_marker(pd));
  auto longer = pd;
  longer.push_back(0);
  EXPECT_FALSE(is_backlog_full_marker(longer));
  EXPECT_FALSE(is_backlog_full_marker({}));
  EXPECT_EQ(overflow_name(BacklogOverflow::kDrop), "drop");
  EXPECT_EQ(overflow_name(BacklogOverflow::kReject), "reject");
}

TEST(ListenBacklog, HalfOpenLimitDefaultsToFourTimesBacklogAtLeast64) {
  EXPECT_EQ(default_half_open_limit(1), 64u);
  EXPECT_EQ(default_half_open_limit(64), 256u);
  ListenBacklog b(config(8, BacklogOverflow::kReject));
  EXPECT_EQ(b.counters().half_open_limit, 64u);
  EXPECT_EQ(b.counters().backlog, 8u);
}

TEST(ListenBacklog, RequestTakesASlotUntilTheApplicationDecides) {
  ListenBacklog b(config(1, BacklogOverflow::kReject));
  EXPECT_TRUE(b.on_tcp_accepted(1, t0).empty());
  EXPECT_EQ(b.counters().half_open, 1u);
  EXPECT_EQ(b.on_request_complete(1, t0), (std::vector<BacklogAction>{{Type::kDeliver, 1}}));
  EXPECT_EQ(b.counters().pending, 1u);
  // Reading the request is not deciding: the slot stays taken, the next one overflows.
  b.on_tcp_accepted(2, t0);
  EXPECT_EQ(b.on_request_complete(2, t0), (std::vector<BacklogAction>{{Type::kRejectOverflow, 2}}));
  EXPECT_TRUE(b.on_accepted(1).empty());
  EXPECT_EQ(b.counters().pending, 0u);
  EXPECT_EQ(b.counters().accepted, 1u);
  EXPECT_EQ(b.counters().overflow_rejected, 1u);
  EXPECT_EQ(b.counters().high_water, 1u);
  const auto events = b.take_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0],
            (BacklogEvent{BacklogEventType::kAdded, 1, BacklogEventReason::kRequest, 1}));
  EXPECT_EQ(events[1],
            (BacklogEvent{BacklogEventType::kRemoved, 1, BacklogEventReason::kAccepted, 0}));
  EXPECT_TRUE(invariants_hold(b));
}

TEST(ListenBacklog, DropPolicyQueuesInArrivalOrderAndHandsOverFreedSlots) {
  ListenBacklog b(config(1, BacklogOverflow::kDrop));
  for (BacklogConnId id = 1; id <= 3; ++id) b.on_tcp_accepted(id, t0);
  EXPECT_EQ(b.on_request_complete(1, t0).size(), 1u);
  EXPECT_TRUE(b.on_request_complete(3, t0).empty());  // waits
  EXPECT_TRUE(b.on_request_complete(2, t0).empty());  // waits behind 3
  EXPECT_EQ(b.counters().overflow_waiting, 2u);
  EXPECT_EQ(b.on_rejected(1), (std::vector<BacklogAction>{{Type::kDeliver, 3}}));
  EXPECT_EQ(b.on_peer_gone(3), (std::vector<BacklogAction>{{Type::kDeliver, 2}}));
  const auto c = b.counters();
  EXPECT_EQ(c.rejected_by_app, 1u);
  EXPECT_EQ(c.pending_aborted, 1u);
  EXPECT_EQ(c.pending, 1u);
  EXPECT_EQ(c.overflow_waiting, 0u);
  EXPECT_TRUE(invariants_hold(b));
}

TEST(ListenBacklog, WaitingRequestExpiresUnansweredAndIsCountedDropped) {
  ListenBacklog b(config(1, BacklogOverflow::kDrop));
  b.on_tcp_accepted(1, t0);
  b.on_tcp_accepted(2, t0);
  b.on_request_complete(1, t0);
  b.on_request_complete(2, t0 + milliseconds(10));
  EXPECT_EQ(b.next_deadline(), t0 + milliseconds(310));
  EXPECT_TRUE(b.on_timer(t0 + milliseconds(309)).empty());
  EXPECT_EQ(b.on_timer(t0 + milliseconds(310)),
            (std::vector<BacklogAction>{{Type::kClose, 2, BacklogCloseReason::kOverflowDropped}}));
  EXPECT_EQ(b.counters().overflow_dropped, 1u);
  EXPECT_TRUE(invariants_hold(b));
}

TEST(ListenBacklog, UndecidedRequestExpiresAndItsSlotGoesToTheNextWaiting) {
  ListenBacklog b(config(1, BacklogOverflow::kDrop));
  b.on_tcp_accepted(1, t0);
  b.on_tcp_accepted(2, t0);
  b.on_request_complete(1, t0);
  b.on_request_complete(2, t0 + milliseconds(900));
  // The waiting Request expires at 1200; the pending one at 1000, handing its slot over.
  EXPECT_EQ(b.on_timer(t0 + milliseconds(1000)),
            (std::vector<BacklogAction>{{Type::kRejectExpired, 1}, {Type::kDeliver, 2}}));
  std::vector<BacklogAction> late;
  EXPECT_FALSE(b.on_accepted(1, late));  // too late: the transport refuses the accept
  EXPECT_EQ(b.counters().pending_expired, 1u);
  EXPECT_EQ(b.stage_of(2), BacklogStage::kPending);
  EXPECT_EQ(b.next_deadline(), t0 + milliseconds(2000));
  const auto events = b.take_events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].reason, BacklogEventReason::kExpired);
  EXPECT_EQ(events[2].reason, BacklogEventReason::kWaited);
  EXPECT_TRUE(invariants_hold(b));
}

TEST(ListenBacklog, FullHalfOpenQueueEvictsTheOldest) {
  ListenBacklog b(config(4, BacklogOverflow::kReject, 2));
  b.on_tcp_accepted(1, t0);
  b.on_tcp_accepted(2, t0 + milliseconds(1));
  EXPECT_EQ(b.on_tcp_accepted(3, t0 + milliseconds(2)),
            (std::vector<BacklogAction>{{Type::kClose, 1, BacklogCloseReason::kHalfOpenEvicted}}));
  EXPECT_EQ(b.counters().half_open, 2u);
  EXPECT_EQ(b.counters().half_open_evicted, 1u);
  EXPECT_FALSE(b.stage_of(1));
  EXPECT_TRUE(b.on_request_complete(1, t0).empty());  // too late: it was closed
  EXPECT_TRUE(invariants_hold(b));
}

TEST(ListenBacklog, HalfOpenNeverTakesASlotAndExpiresAfterTheRequestTimeout) {
  ListenBacklog b(config(1, BacklogOverflow::kReject));
  b.on_tcp_accepted(1, t0);
  EXPECT_EQ(b.counters().pending, 0u);
  EXPECT_EQ(b.next_deadline(), t0 + milliseconds(100));
  EXPECT_EQ(b.on_timer(t0 + milliseconds(100)),
            (std::vector<BacklogAction>{{Type::kClose, 1, BacklogCloseReason::kHalfOpenExpired}}));
  EXPECT_EQ(b.counters().half_open_expired, 1u);
  EXPECT_FALSE(b.next_deadline());
  b.on_tcp_accepted(2, t0 + milliseconds(100));
  b.on_peer_gone(2);
  EXPECT_EQ(b.counters().half_open_aborted, 1u);
  EXPECT_TRUE(invariants_hold(b));
}

TEST(ListenBacklog, TimeGoingBackwardsIsTakenAsTheLatestTime) {
  ListenBacklog b(config(1, BacklogOverflow::kReject));
  b.on_tcp_accepted(1, t0 + milliseconds(50));
  b.on_tcp_accepted(2, t0);  // earlier clock: still queued after 1
  EXPECT_EQ(b.next_deadline(), t0 + milliseconds(150));
  EXPECT_EQ(b.on_timer(t0 + milliseconds(150)).size(), 2u);
}

// Thousands of random interleavings of every input; after each step every invariant holds,
// every action names an id in the state it implies, and the events replay to `pending`.
void random_exactness(BacklogOverflow overflow, std::uint32_t seed) {
  std::mt19937 rng(seed);
  auto pick = [&](std::uint32_t n) {
    return std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng);
  };
  const std::uint32_t backlog = 1 + pick(6);
  ListenBacklog b(config(backlog, overflow, 1 + pick(12)));
  TimePoint now = t0;
  BacklogConnId next_id = 1;
  std::set<BacklogConnId> open;  // ids the "transport" still has a connection for
  std::int64_t replayed_pending = 0;
  for (int step = 0; step < 400; ++step) {
    std::vector<BacklogAction> actions;
    const std::uint32_t op = pick(8);
    auto any_open = [&]() -> BacklogConnId {
      if (open.empty()) return 0;
      auto it = open.begin();
      std::advance(it, pick(static_cast<std::uint32_t>(open.size())));
      return *it;
    };
    switch (op) {
      case 0:
      case 1: {
        const BacklogConnId id = next_id++;
        open.insert(id);
        actions = b.on_tcp_accepted(id, now);
        break;
      }
      case 2:
      case 3:
        actions = b.on_request_complete(any_open(), now);
        break;
      case 4:
        actions = b.on_accepted(any_open());
        break;
      case 5:
        actions = b.on_rejected(any_open());
        break;
      case 6: {
        const BacklogConnId id = any_open();
        actions = b.on_peer_gone(id);
        open.erase(id);
        break;
      }
      case 7:
        now += milliseconds(pick(400));
        actions = b.on_timer(now);
        break;
    }
    for (const auto& a : actions) {
      const auto stage = b.stage_of(a.id);
      if (a.type == Type::kDeliver) {
        ASSERT_EQ(stage, BacklogStage::kPending) << "seed " << seed << " step " << step;
      } else {
        ASSERT_FALSE(stage) << "closed ids are forgotten; seed " << seed;
        open.erase(a.id);
      }
      if (a.type == Type::kRejectOverflow) {
        ASSERT_EQ(overflow, BacklogOverflow::kReject);
      }
    }
    for (const auto& e : b.take_events()) {
      replayed_pending += e.type == BacklogEventType::kAdded ? 1 : -1;
      ASSERT_EQ(replayed_pending, e.pending);
      ASSERT_LE(e.pending, backlog);
    }
    ASSERT_TRUE(invariants_hold(b)) << "seed " << seed << " step " << step << " op " << op;
    ASSERT_EQ(replayed_pending, b.counters().pending);
    if (const auto d = b.next_deadline()) {
      ASSERT_GE(*d, t0);
    }
  }
  // Everything still held leaves when its deadline passes and nothing is lost on the way.
  now += milliseconds(10000);
  b.on_timer(now);
  const BacklogCounters c = b.counters();
  EXPECT_EQ(c.pending + c.overflow_waiting + c.half_open, 0u) << "seed " << seed;
  EXPECT_TRUE(invariants_hold(b));
}

TEST(ListenBacklog, CountersExactUnderRandomInterleavingsRejectPolicy) {
  for (std::uint32_t seed = 1; seed <= 1000; ++seed) {
    random_exactness(BacklogOverflow::kReject, seed);
    if (HasFatalFailure()) return;
  }
}

TEST(ListenBacklog, CountersExactUnderRandomInterleavingsDropPolicy) {
  for (std::uint32_t seed = 1; seed <= 1000; ++seed) {
    random_exactness(BacklogOverflow::kDrop, seed);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace rdma_interop::cm
