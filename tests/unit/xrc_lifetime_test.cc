// The XRC lifetime engine's policy, scenario by scenario: shared domains, references,
// process death, the live-sender rule, reaping dead senders, and migrations in the way.
#include "core/xrc/xrc_lifetime.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace rdma_interop::xrc {
namespace {

using std::chrono::milliseconds;

TimePoint t(int ms) {
  return TimePoint{} + milliseconds(ms);
}

constexpr ProcessId kA = 1001;
constexpr ProcessId kB = 1002;
constexpr TqpNum kTqp = 77;

ProbeConfig probe() {
  ProbeConfig c;
  c.interval = milliseconds(100);
  c.timeout = milliseconds(50);
  c.retries = 1;
  c.migration_grace = milliseconds(200);
  return c;
}

XrcLifetime engine() {
  return XrcLifetime::create(probe()).value();
}

bool has_action(const std::vector<XrcAction>& actions, XrcActionType type) {
  return std::any_of(actions.begin(), actions.end(),
                     [&](const XrcAction& a) { return a.type == type; });
}

bool has_event(const std::vector<XrcEvent>& events, XrcEventType type, XrcReason reason) {
  return std::any_of(events.begin(), events.end(),
                     [&](const XrcEvent& e) { return e.type == type && e.reason == reason; });
}

// Runs the engine's timer to `until`, answering each probe with `outcome`.
void run(XrcLifetime& x, int from, int until, ProbeOutcome outcome) {
  for (int now = from; now <= until; ++now) {
    if (!x.next_deadline() || *x.next_deadline() > t(now)) continue;
    x.on_timer(t(now));
    for (const auto& a : x.take_actions()) {
      if (a.type == XrcActionType::kIssueProbe) x.on_probe_result(a.tqp, outcome, t(now));
      if (a.type == XrcActionType::kRecycleProbeQp) x.on_probe_qp_ready(a.tqp, t(now));
    }
  }
}

TEST(XrcLifetime, ProcessesOpeningTheSameNameShareOneDomain) {
  auto x = engine();
  auto d1 = x.open_domain("/tmp/xrcd", kA, true, t(0));
  auto d2 = x.open_domain("/tmp/xrcd", kB, false, t(1));
  ASSERT_TRUE(d1 && d2);
  EXPECT_EQ(*d1, *d2);
  EXPECT_EQ(x.counters().domains_created, 1u);
  EXPECT_EQ(x.open_domain("/tmp/other", kB, false, t(2)).error(), XrcError::kNoSuchDomain);
}

TEST(XrcLifetime, DomainIsDestroyedWhenNoProcessAndNoTqpIsLeft) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "node2 pid 7", t(0)));
  EXPECT_FALSE(x.close_domain(d, kA, t(1)));
  EXPECT_TRUE(x.has_domain(d));  // its TQP keeps it
  EXPECT_EQ(x.close_domain(d, kA, t(1)), XrcError::kNotHeld);
  x.on_sender_disconnected(kTqp, t(2));
  ASSERT_FALSE(x.close_target_qp(kTqp, kA, t(3)));
  auto actions = x.take_actions();
  EXPECT_TRUE(has_action(actions, XrcActionType::kDestroyTqp));
  EXPECT_TRUE(has_action(actions, XrcActionType::kDestroyDomain));
  EXPECT_FALSE(x.has_domain(d));
}

TEST(XrcLifetime, TqpOutlivesItsCreatorWhileTheSenderAnswers) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "node2", t(0)));
  x.on_process_exit(kA, t(10));
  EXPECT_TRUE(x.has_tqp(kTqp));
  auto events = x.take_events();
  EXPECT_TRUE(has_event(events, XrcEventType::kTqpClosed, XrcReason::kProcessExit));
  EXPECT_TRUE(has_event(events, XrcEventType::kTqpKept, XrcReason::kSenderAlive));
  run(x, 11, 5000, ProbeOutcome::kAnswered);
  EXPECT_TRUE(x.has_tqp(kTqp));
  EXPECT_GE(x.counters().probes_answered, 45u);
  EXPECT_EQ(x.counters().tqps_reaped, 0u);
}

TEST(XrcLifetime, UnheldTqpOfADeadSenderIsReapedWithinTheBound) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "node2", t(0)));
  run(x, 0, 250, ProbeOutcome::kAnswered);
  ASSERT_FALSE(x.close_target_qp(kTqp, kA, t(250)));
  ASSERT_FALSE(x.close_domain(d, kA, t(250)));
  // The sender dies at 250: every probe from now on goes unanswered.
  run(x, 251, 250 + static_cast<int>(detection_bound(probe()).count()), ProbeOutcome::kNoAnswer);
  EXPECT_FALSE(x.has_tqp(kTqp));
  EXPECT_FALSE(x.has_domain(d));
  EXPECT_EQ(x.counters().reaped_sender_dead, 1u);
  auto events = x.take_events();
  EXPECT_TRUE(has_event(events, XrcEventType::kSenderDead, XrcReason::kProbe));
  EXPECT_TRUE(has_event(events, XrcEventType::kTqpReaped, XrcReason::kSenderDead));
}

TEST(XrcLifetime, HeldTqpIsKeptEvenWhenItsSenderIsDead) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "node2", t(0)));
  run(x, 0, 1000, ProbeOutcome::kNoAnswer);
  EXPECT_TRUE(x.has_tqp(kTqp));
  EXPECT_EQ(x.snapshot().tqps.at(0).sender_state, SenderState::kDead);
  // The holder goes: now it is reaped at once.
  ASSERT_FALSE(x.close_target_qp(kTqp, kA, t(1001)));
  EXPECT_FALSE(x.has_tqp(kTqp));
}

TEST(XrcLifetime, OpenQpAddsAReferenceOfAnotherProcess) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "node2", t(0)));
  EXPECT_EQ(x.open_target_qp(kTqp, kB, t(1)), XrcError::kNotHeld);  // B has no domain handle
  ASSERT_TRUE(x.open_domain("/tmp/xrcd", kB, false, t(2)));
  ASSERT_FALSE(x.open_target_qp(kTqp, kB, t(3)));
  x.on_sender_disconnected(kTqp, t(4));
  x.on_process_exit(kA, t(5));
  EXPECT_TRUE(x.has_tqp(kTqp));  // B still holds it
  ASSERT_FALSE(x.close_target_qp(kTqp, kB, t(6)));
  EXPECT_FALSE(x.has_tqp(kTqp));
  EXPECT_EQ(x.counters().reaped_sender_disconnected, 1u);
  EXPECT_EQ(x.close_target_qp(kTqp, kB, t(7)), XrcError::kNoSuchTqp);
}

TEST(XrcLifetime, NoReapDuringAMigrationOrItsGrace) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "node2", t(0)));
  ASSERT_FALSE(x.close_target_qp(kTqp, kA, t(0)));
  x.on_migration_started(kTqp, t(50));
  x.on_sender_disconnected(kTqp, t(60));
  EXPECT_TRUE(x.has_tqp(kTqp));
  EXPECT_TRUE(has_event(x.take_events(), XrcEventType::kReapDeferred, XrcReason::kMigrating));
  x.on_migration_finished(kTqp, t(100));
  ASSERT_EQ(x.next_deadline(), t(300));
  x.on_timer(t(299));
  EXPECT_TRUE(x.has_tqp(kTqp));
  x.on_timer(t(300));
  EXPECT_FALSE(x.has_tqp(kTqp));
  EXPECT_EQ(x.counters().reaps_deferred, 1u);
  EXPECT_EQ(x.counters().migrations, 1u);
}

TEST(XrcLifetime, ProbesPauseWhileMigratingSoTheConnectionSurvives) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "node2", t(0)));
  ASSERT_FALSE(x.close_target_qp(kTqp, kA, t(0)));
  x.on_migration_started(kTqp, t(10));
  // However long the migration takes, no probe is issued, so none can fail.
  run(x, 11, 3000, ProbeOutcome::kNoAnswer);
  EXPECT_EQ(x.counters().probes_issued, 0u);
  EXPECT_TRUE(x.has_tqp(kTqp));
}

TEST(XrcLifetime, ErrorsNameTheProblem) {
  auto x = engine();
  EXPECT_EQ(x.create_target_qp(9, kTqp, kA, "", t(0)), XrcError::kNoSuchDomain);
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(0));
  EXPECT_EQ(x.create_target_qp(d, kTqp, kB, "", t(0)), XrcError::kNotHeld);
  ASSERT_FALSE(x.create_target_qp(d, kTqp, kA, "", t(0)));
  EXPECT_EQ(x.create_target_qp(d, kTqp, kA, "", t(0)), XrcError::kTqpExists);
  EXPECT_EQ(xrc_error_name(XrcError::kTqpExists), "tqp_exists");
  ProbeConfig bad = probe();
  bad.timeout = milliseconds(500);
  EXPECT_FALSE(XrcLifetime::create(bad).has_value());
}

TEST(XrcLifetime, EventsPrintAsOneLine) {
  auto x = engine();
  const DomainId d = *x.open_domain("/tmp/xrcd", kA, true, t(1500));
  auto events = x.take_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].to_string(), "t=1500ms domain_created domain=" + std::to_string(d) +
                                       " process=1001 reason=process_request");
}

}  // namespace
}  // namespace rdma_interop::xrc
