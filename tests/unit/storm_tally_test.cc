// rdma-storm's classification of failed connects and its tallies: the storm tier compares
// these with the listener's counters, so a misfiled outcome would look like a lost request.
#include "tools/rdma-storm/storm_tally.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <vector>

#include "core/transport/connect_retry.h"
#include "tools/rdma-storm/attempt_outcome.h"

namespace rdma_interop::storm {
namespace {

using Kind = transport::ConnectError::Kind;

transport::ConnectError setup(cm::CmFailure failure) {
  transport::ConnectError e;
  e.kind = Kind::kSetup;
  e.failure = failure;
  return e;
}

TEST(StormOutcome, EachServerDecisionMapsToTheOutcomeItIsReconciledWith) {
  EXPECT_EQ(classify(setup(cm::CmFailure::kBacklogFull)).outcome, Outcome::kOverflowRejected);
  EXPECT_EQ(classify(setup(cm::CmFailure::kPeerRejected)).outcome, Outcome::kAppRejected);
  for (auto f : {cm::CmFailure::kReplyTimeout, cm::CmFailure::kConnectionReset,
                 cm::CmFailure::kConnectionClosed}) {
    EXPECT_EQ(classify(setup(f)).outcome, Outcome::kExpired) << cm::failure_name(f);
  }
  transport::ConnectError timeout;
  timeout.kind = Kind::kTimeout;
  EXPECT_EQ(classify(timeout).outcome, Outcome::kExpired);
}

TEST(StormOutcome, AnythingElseIsOtherWithItsStableName) {
  auto r = classify(setup(cm::CmFailure::kMalformedFrame));
  EXPECT_EQ(r.outcome, Outcome::kOther);
  EXPECT_EQ(r.other_name, cm::failure_name(cm::CmFailure::kMalformedFrame));
  transport::ConnectError refused;
  refused.kind = Kind::kUnreachable;
  refused.sys_errno = ECONNREFUSED;
  EXPECT_EQ(classify(refused).other_name, "unreachable");
}

TEST(StormOutcome, AnUnansweredSynIsTheNetworksNotTheServersExpiry) {
  // The server never saw the attempt: counting it expired would break the reconciliation
  // with the server's unanswered requests.
  transport::ConnectError syn;
  syn.kind = Kind::kUnreachable;
  syn.sys_errno = ETIMEDOUT;
  EXPECT_EQ(classify(syn).outcome, Outcome::kTcpTimeout);
  EXPECT_EQ(outcome_name(Outcome::kTcpTimeout), "tcp_timeout");
  EXPECT_TRUE(worth_retry(classify(syn)));
  EXPECT_TRUE(never_reached(classify(syn)));
  EXPECT_FALSE(never_reached({Outcome::kExpired, {}}));
  EXPECT_TRUE(never_reached({Outcome::kOther, "unreachable"}));
}

TEST(StormOutcome, ATryIsRetriedExactlyWhenTheProvidersOwnPolicyWould) {
  // --retry-mode storm and --retry-mode provider must retry the same failures, or the two
  // modes' reports could not be compared: both ask core/transport/connect_retry.h.
  std::vector<transport::ConnectError> failures;
  for (auto f : {cm::CmFailure::kBacklogFull, cm::CmFailure::kPeerRejected,
                 cm::CmFailure::kReplyTimeout, cm::CmFailure::kConnectionReset,
                 cm::CmFailure::kConnectionClosed, cm::CmFailure::kMalformedFrame}) {
    failures.push_back(setup(f));
  }
  for (int e : {ECONNREFUSED, ECONNRESET, ETIMEDOUT, EHOSTUNREACH}) {
    transport::ConnectError unreachable;
    unreachable.kind = Kind::kUnreachable;
    unreachable.sys_errno = e;
    failures.push_back(unreachable);
  }
  transport::ConnectError timeout;
  timeout.kind = Kind::kTimeout;
  failures.push_back(timeout);
  for (const auto& f : failures) {
    EXPECT_EQ(worth_retry(classify(f)), transport::retryable(f)) << transport::to_string(f);
  }
  EXPECT_TRUE(worth_retry(classify(setup(cm::CmFailure::kBacklogFull))));
  EXPECT_FALSE(worth_retry(classify(setup(cm::CmFailure::kPeerRejected))));
  EXPECT_FALSE(worth_retry({Outcome::kConnected}));
}

TEST(StormTally, JainIndexIsOneWhenEvenAndOneOverNWhenOneTakesAll) {
  EXPECT_DOUBLE_EQ(jain_index({5, 5, 5, 5}), 1.0);
  EXPECT_DOUBLE_EQ(jain_index({8, 0, 0, 0}), 0.25);
  EXPECT_DOUBLE_EQ(jain_index({}), 1.0);
  EXPECT_DOUBLE_EQ(jain_index({0, 0}), 1.0);
  EXPECT_NEAR(jain_index({1, 2, 3}), 36.0 / (3 * 14), 1e-12);
}

TEST(StormTally, PercentilesAreNearestRank) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);
  auto s = summarize(samples);
  EXPECT_EQ(s.count, 100u);
  EXPECT_DOUBLE_EQ(s.p50_ms, 50);
  EXPECT_DOUBLE_EQ(s.p90_ms, 90);
  EXPECT_DOUBLE_EQ(s.p99_ms, 99);
  EXPECT_DOUBLE_EQ(s.max_ms, 100);
  EXPECT_DOUBLE_EQ(s.mean_ms, 50.5);
}

TEST(StormTally, MergeAddsOutcomesAndAppendsThreads) {
  Tally a, b;
  a.outcomes[static_cast<std::size_t>(Outcome::kConnected)] = 3;
  a.threads.push_back({.attempts = 3, .connected = 3, .tries = 3});
  b.outcomes[static_cast<std::size_t>(Outcome::kConnected)] = 1;
  b.outcomes[static_cast<std::size_t>(Outcome::kGaveUp)] = 2;
  b.other["unreachable"] = 1;
  b.threads.push_back({.attempts = 3, .connected = 1, .tries = 9});
  a.merge(b);
  EXPECT_EQ(a.count(Outcome::kConnected), 4u);
  EXPECT_EQ(a.count(Outcome::kGaveUp), 2u);
  EXPECT_EQ(a.attempts(), 6u);
  EXPECT_EQ(a.other.at("unreachable"), 1u);
  ASSERT_EQ(a.threads.size(), 2u);
  EXPECT_EQ(a.threads[1].tries, 9u);
}

}  // namespace
}  // namespace rdma_interop::storm
