// The tcp provider's listen backlog over real loopback sockets: a slot held until the
// application decides, the overflow Reject our initiator reports as backlog_full, the drop
// policy, the decision timeout, a half-open flood, and the initiator's retries.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "core/transport/connect_retry.h"
#include "core/transport/provider.h"
#include "core/transport/provider_uri.h"
#include "eventually.h"
#include "loopback_socket.h"

namespace rdma_interop::transport {
namespace {

using namespace std::chrono_literals;
using cm::BacklogOverflow;
using ConnectResult = Expected<std::unique_ptr<Connection>, ConnectError>;

constexpr Millis kWait{5000};

cm::MpaPolicy policy() {
  cm::MpaPolicy p;
  p.peer_to_peer = cm::PeerToPeer::kOff;
  p.request_timeout = 2000ms;
  p.reply_timeout = 2000ms;
  return p;
}

using test_util::eventually;

// backlog_counters.h's invariants, the one copy of them.
::testing::AssertionResult invariants_hold(const cm::BacklogCounters& c) {
  if (const std::string broken = c.broken_invariant(); !broken.empty()) {
    return ::testing::AssertionFailure() << broken;
  }
  return ::testing::AssertionSuccess();
}

class TcpBacklogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = open_provider("tcp");
    ASSERT_TRUE(p.has_value()) << p.error();
    provider_ = std::move(*p);
  }

  void listen(const ListenOptions& options, const cm::MpaPolicy& p = policy()) {
    auto l = provider_->listen(*parse_provider_uri("tcp://127.0.0.1:0"), p, options);
    ASSERT_TRUE(l.has_value()) << to_string(l.error());
    listener_ = std::move(*l);
    where_ = *parse_provider_uri("tcp://" + listener_->local_address());
  }

  std::future<ConnectResult> connect_async(ConnectOptions options = {}) {
    if (options.policy == cm::MpaPolicy{}) options.policy = policy();
    return std::async(std::launch::async, [this, options = std::move(options)] {
      return provider_->connect(where_, options);
    });
  }

  int raw_connect() { return test_util::connect_loopback(where_.port); }

  std::unique_ptr<Provider> provider_;
  std::unique_ptr<Listener> listener_;
  ProviderUri where_;
};

TEST_F(TcpBacklogTest, OverflowRejectIsReportedAsBacklogFullNotPeerRejected) {
  listen(ListenOptions(1));
  auto first = connect_async();
  auto request = listener_->next_request(kWait);  // read, not decided: the slot stays taken
  ASSERT_NE(request, nullptr);
  auto second = connect_async().get();
  ASSERT_FALSE(second.has_value());
  ASSERT_TRUE(second.error().failure);
  EXPECT_EQ(*second.error().failure, cm::CmFailure::kBacklogFull) << to_string(second.error());
  ASSERT_TRUE(second.error().peer_frame);
  EXPECT_TRUE(cm::is_backlog_full_marker(second.error().peer_frame->private_data));
  EXPECT_EQ(second.error().attempts, 1u);
  ASSERT_TRUE(request->accept({}, {}).has_value());
  ASSERT_TRUE(first.get().has_value());
  const auto c = listener_->counters();
  EXPECT_EQ(c.requests, 2u);
  EXPECT_EQ(c.accepted, 1u);
  EXPECT_EQ(c.overflow_rejected, 1u);
  EXPECT_EQ(c.high_water, 1u);
  EXPECT_TRUE(invariants_hold(c));
  const auto events = listener_->take_backlog_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, cm::BacklogEventType::kAdded);
  EXPECT_EQ(events[1].reason, cm::BacklogEventReason::kAccepted);
  EXPECT_FALSE(events[0].peer_address.empty());
}

TEST_F(TcpBacklogTest, ApplicationRejectIsStillPeerRejected) {
  listen(ListenOptions(1));
  auto pending = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  request->reject({'n', 'o'});
  auto r = pending.get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(*r.error().failure, cm::CmFailure::kPeerRejected);
  EXPECT_TRUE(eventually([&] { return listener_->counters().rejected_by_app == 1; }));
}

// The decision runs on the deciding thread (accept() and reject() take the session over from
// the event thread): the two ways a Request ends without the application's answer reaching
// the peer must still be counted once and reported.
TEST_F(TcpBacklogTest, DestroyingAnUndecidedRequestRejectsIt) {
  listen(ListenOptions(1));
  auto pending = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  request.reset();
  auto r = pending.get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(*r.error().failure, cm::CmFailure::kPeerRejected) << to_string(r.error());
  const auto c = listener_->counters();
  EXPECT_EQ(c.rejected_by_app, 1u);
  EXPECT_EQ(c.pending, 0u);
  EXPECT_TRUE(invariants_hold(c));
}

TEST_F(TcpBacklogTest, APeerLeavingDuringTheDecisionIsCountedAndAcceptSaysSo) {
  listen(ListenOptions(1));
  ConnectOptions impatient;
  impatient.policy = policy();
  impatient.policy.reply_timeout = 200ms;  // gives up and resets the connection
  auto pending = connect_async(impatient);
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  auto r = pending.get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(*r.error().failure, cm::CmFailure::kReplyTimeout) << to_string(r.error());
  // The event thread still watches a Request the application holds: the reset frees the slot.
  EXPECT_TRUE(eventually([&] { return listener_->counters().pending_aborted == 1; }));
  auto late = request->accept({}, {});
  ASSERT_FALSE(late.has_value());
  ASSERT_TRUE(late.error().failure);
  EXPECT_TRUE(*late.error().failure == cm::CmFailure::kConnectionReset ||
              *late.error().failure == cm::CmFailure::kConnectionClosed)
      << to_string(late.error());
  const auto c = listener_->counters();
  EXPECT_EQ(c.accepted, 0u);
  EXPECT_EQ(c.pending, 0u);
  EXPECT_TRUE(invariants_hold(c));
}

TEST_F(TcpBacklogTest, RetriesGetThroughOnceTheSlotFrees) {
  listen(ListenOptions(1));
  auto first = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  ConnectOptions retrying;
  retrying.retries = 20;
  retrying.retry_backoff = 20ms;
  retrying.retry_backoff_max = 100ms;
  retrying.retry_seed = 7;
  auto second = connect_async(retrying);
  EXPECT_TRUE(eventually([&] { return listener_->counters().overflow_rejected >= 1; }));
  ASSERT_TRUE(request->accept({}, {}).has_value());
  auto next = listener_->next_request(kWait);
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->accept({}, {}).has_value());
  ASSERT_TRUE(second.get().has_value());
  EXPECT_TRUE(first.get().has_value());
  EXPECT_TRUE(invariants_hold(listener_->counters()));
}

TEST_F(TcpBacklogTest, RetriesRunOutWithTheAttemptsReported) {
  listen(ListenOptions(1));
  auto first = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  ConnectOptions retrying;
  retrying.retries = 3;
  retrying.retry_backoff = 1ms;
  retrying.retry_backoff_max = 5ms;
  auto r = connect_async(retrying).get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(*r.error().failure, cm::CmFailure::kBacklogFull);
  EXPECT_EQ(r.error().attempts, 4u);
  EXPECT_EQ(listener_->counters().overflow_rejected, 4u);
  request.reset();  // undecided: rejected
  EXPECT_FALSE(first.get().has_value());
}

TEST_F(TcpBacklogTest, RefusedConnectIsRetriedAndCounted) {
  listen(ListenOptions(1));
  listener_.reset();  // nobody listens on that port now
  ConnectOptions retrying;
  retrying.retries = 2;
  retrying.retry_backoff = 1ms;
  auto r = provider_->connect(where_, [&] {
    retrying.policy = policy();
    return retrying;
  }());
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().kind, ConnectError::Kind::kUnreachable);
  EXPECT_EQ(r.error().attempts, 3u);
}

TEST_F(TcpBacklogTest, DropPolicyLeavesTheRequestWaitingUntilASlotFrees) {
  ListenOptions o(1);
  o.overflow = BacklogOverflow::kDrop;
  listen(o);
  auto first = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  auto second = connect_async();
  EXPECT_TRUE(eventually([&] { return listener_->counters().overflow_waiting == 1; }));
  EXPECT_EQ(listener_->next_request(50ms), nullptr);
  ASSERT_TRUE(request->accept({}, {}).has_value());
  auto next = listener_->next_request(kWait);  // the waiting one took the freed slot
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(next->accept({}, {}).has_value());
  EXPECT_TRUE(second.get().has_value());
  EXPECT_TRUE(first.get().has_value());
  const auto c = listener_->counters();
  EXPECT_EQ(c.accepted, 2u);
  EXPECT_EQ(c.overflow_waiting, 0u);
  EXPECT_TRUE(invariants_hold(c));
}

TEST_F(TcpBacklogTest, DropPolicyWaitExpiresAndIsCountedDropped) {
  ListenOptions o(1);
  o.overflow = BacklogOverflow::kDrop;
  o.overflow_timeout = 200ms;
  listen(o);
  auto first = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  auto second = connect_async().get();
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(*second.error().failure, cm::CmFailure::kConnectionReset) << to_string(second.error());
  EXPECT_TRUE(eventually([&] { return listener_->counters().overflow_dropped == 1; }));
  ASSERT_TRUE(request->accept({}, {}).has_value());
  EXPECT_TRUE(invariants_hold(listener_->counters()));
}

TEST_F(TcpBacklogTest, UndecidedRequestExpiresAndALateAcceptFails) {
  ListenOptions o(1);
  o.decision_timeout = 200ms;
  listen(o);
  auto pending = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  auto r = pending.get();
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(*r.error().failure, cm::CmFailure::kPeerRejected);
  EXPECT_EQ(listener_->counters().pending_expired, 1u);
  EXPECT_EQ(listener_->counters().pending, 0u);
  auto late = request->accept({}, {});
  ASSERT_FALSE(late.has_value());
  EXPECT_NE(late.error().detail.find("decision timeout"), std::string::npos)
      << to_string(late.error());
  EXPECT_EQ(listener_->counters().accepted, 0u);
}

TEST_F(TcpBacklogTest, HalfOpenFloodDoesNotKeepAClientOut) {
  ListenOptions o(2);
  o.half_open_limit = 8;
  listen(o);
  std::vector<int> flood;
  for (int i = 0; i < 32; ++i) flood.push_back(raw_connect());  // never send a Request
  EXPECT_TRUE(eventually([&] {
    const auto c = listener_->counters();
    return c.half_open_evicted + c.half_open_expired >= 24;
  })) << "half_open "
      << listener_->counters().half_open << " opened " << listener_->counters().half_open_opened
      << " evicted " << listener_->counters().half_open_evicted << " aborted "
      << listener_->counters().half_open_aborted;
  auto pending = connect_async();
  auto request = listener_->next_request(kWait);
  ASSERT_NE(request, nullptr);
  ASSERT_TRUE(request->accept({}, {}).has_value());
  EXPECT_TRUE(pending.get().has_value());
  const auto c = listener_->counters();
  EXPECT_LE(c.half_open, 8u);
  EXPECT_EQ(c.pending, 0u);
  EXPECT_TRUE(invariants_hold(c));
  for (int fd : flood) ::close(fd);
  EXPECT_TRUE(eventually([&] { return listener_->counters().half_open == 0; }))
      << "half_open " << listener_->counters().half_open << " opened "
      << listener_->counters().half_open_opened << " evicted "
      << listener_->counters().half_open_evicted << " aborted "
      << listener_->counters().half_open_aborted;
  EXPECT_TRUE(invariants_hold(listener_->counters()));
}

TEST(RetryPolicy, FullJitterStaysUnderTheCappedExponentialCeiling) {
  ConnectOptions o;
  o.retry_backoff = 10ms;
  o.retry_backoff_max = 70ms;
  std::mt19937_64 rng(1);
  for (std::uint32_t retry = 1; retry <= 6; ++retry) {
    const Millis ceiling{std::min<std::int64_t>(70, 10LL << (retry - 1))};
    for (int i = 0; i < 200; ++i) {
      const Millis d = retry_delay(o, retry, rng);
      ASSERT_GE(d.count(), 0);
      ASSERT_LE(d, ceiling) << "retry " << retry;
    }
  }
  std::mt19937_64 a(42), b(42);
  EXPECT_EQ(retry_delay(o, 3, a), retry_delay(o, 3, b));  // seeded: reproducible
}

TEST(RetryPolicy, OnlyFailuresTheListenerMayLaterTakeAreRetried) {
  ConnectError e;
  e.kind = ConnectError::Kind::kSetup;
  e.failure = cm::CmFailure::kBacklogFull;
  EXPECT_TRUE(retryable(e));
  e.failure = cm::CmFailure::kReplyTimeout;
  EXPECT_TRUE(retryable(e));
  e.failure = cm::CmFailure::kPeerRejected;
  EXPECT_FALSE(retryable(e));
  e.failure = cm::CmFailure::kNoMatchingRtr;
  EXPECT_FALSE(retryable(e));
  e.kind = ConnectError::Kind::kUnreachable;
  e.failure.reset();
  e.sys_errno = ECONNREFUSED;
  EXPECT_TRUE(retryable(e));
  e.sys_errno = EHOSTUNREACH;
  EXPECT_FALSE(retryable(e));
}

TEST(RetryPolicy, TheScheduleStopsAtTheRetriesOrAFailureNotWorthAnother) {
  ConnectOptions o;
  o.retries = 2;
  o.retry_backoff = 10ms;
  o.retry_backoff_max = 40ms;
  o.retry_seed = 7;
  ConnectError refused;
  refused.kind = ConnectError::Kind::kUnreachable;
  refused.sys_errno = ECONNREFUSED;
  RetrySchedule schedule(o);
  EXPECT_TRUE(schedule.after_failure(refused, 1).has_value());
  EXPECT_TRUE(schedule.after_failure(refused, 2).has_value());
  EXPECT_FALSE(schedule.after_failure(refused, 3).has_value()) << "2 retries used";
  ConnectError rejected;
  rejected.kind = ConnectError::Kind::kSetup;
  rejected.failure = cm::CmFailure::kPeerRejected;
  EXPECT_FALSE(RetrySchedule(o).after_failure(rejected, 1).has_value());
}

}  // namespace
}  // namespace rdma_interop::transport
