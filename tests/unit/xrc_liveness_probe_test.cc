// The liveness probe's schedule: when probes go out, when a sender is dead, what a
// migration excuses, and when the probe QP must be recycled.
#include <gtest/gtest.h>

#include "core/xrc/liveness_probe.h"

namespace rdma_interop::xrc {
namespace {

using std::chrono::milliseconds;

TimePoint t(int ms) {
  return TimePoint{} + milliseconds(ms);
}

ProbeConfig config(ProbeKind kind = ProbeKind::kZeroLengthRead) {
  ProbeConfig c;
  c.kind = kind;
  c.interval = milliseconds(100);
  c.timeout = milliseconds(50);
  c.retries = 2;
  c.migration_grace = milliseconds(300);
  return c;
}

TEST(LivenessProbe, FirstProbeGoesOutOneIntervalAfterStart) {
  LivenessProbe p(config(), t(0));
  EXPECT_EQ(p.next_deadline(), t(100));
  EXPECT_EQ(p.on_timer(t(99)), ProbeRequest::kNone);
  EXPECT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  EXPECT_TRUE(p.probe_outstanding());
  EXPECT_EQ(p.next_deadline(), t(150));  // its timeout
}

TEST(LivenessProbe, AnsweredZeroLengthReadNeedsNoRecycle) {
  LivenessProbe p(config(), t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  EXPECT_EQ(p.on_result(ProbeOutcome::kAnswered, t(101)), ProbeRequest::kNone);
  EXPECT_EQ(p.state(), SenderState::kAlive);
  EXPECT_EQ(p.next_deadline(), t(200));
  EXPECT_EQ(p.counters().answered, 1u);
}

TEST(LivenessProbe, InvalidRkeyProbeRecyclesItsQpAfterEveryAnswer) {
  LivenessProbe p(config(ProbeKind::kInvalidRkeyRead), t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  EXPECT_EQ(p.on_result(ProbeOutcome::kAnswered, t(101)), ProbeRequest::kRecycle);
  EXPECT_EQ(p.state(), SenderState::kAlive);
  // Not ready by the next probe: that probe is a failure, not a post on a QP in error.
  EXPECT_EQ(p.on_timer(t(200)), ProbeRequest::kNone);
  EXPECT_EQ(p.consecutive_failures(), 1u);
  p.on_qp_ready(t(210));
  EXPECT_EQ(p.on_timer(t(300)), ProbeRequest::kIssue);
}

TEST(LivenessProbe, DeadAfterRetriesPlusOneFailuresInARow) {
  LivenessProbe p(config(), t(0));
  int now = 100;
  for (std::uint32_t i = 0; i < 3; ++i, now += 100) {
    ASSERT_EQ(p.on_timer(t(now)), ProbeRequest::kIssue) << i;
    EXPECT_EQ(p.on_result(ProbeOutcome::kNoAnswer, t(now + 40)), ProbeRequest::kRecycle);
    p.on_qp_ready(t(now + 41));
    EXPECT_EQ(p.state(), i < 2 ? SenderState::kSuspect : SenderState::kDead) << i;
  }
  EXPECT_EQ(p.counters().failed, 3u);
}

TEST(LivenessProbe, AnAnswerClearsTheStreak) {
  LivenessProbe p(config(), t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kNoAnswer, t(140));
  p.on_qp_ready(t(141));
  ASSERT_EQ(p.on_timer(t(200)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kNoAnswer, t(240));
  p.on_qp_ready(t(241));
  EXPECT_EQ(p.state(), SenderState::kSuspect);
  ASSERT_EQ(p.on_timer(t(300)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kAnswered, t(301));
  EXPECT_EQ(p.state(), SenderState::kAlive);
  EXPECT_EQ(p.consecutive_failures(), 0u);
}

TEST(LivenessProbe, SilentPeerIsFoundWithinTheDetectionBound) {
  const ProbeConfig c = config();
  LivenessProbe p(c, t(0));
  // Answered at 100 and 200; the peer dies at 201 and never answers again.
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kAnswered, t(101));
  ASSERT_EQ(p.on_timer(t(200)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kAnswered, t(200));
  const TimePoint died = t(201);
  TimePoint now = died;
  while (p.state() != SenderState::kDead) {
    ASSERT_TRUE(p.next_deadline());
    now = *p.next_deadline();
    ASSERT_LE(now - died, detection_bound(c));
    if (p.on_timer(now) == ProbeRequest::kRecycle) p.on_qp_ready(now);
  }
  EXPECT_LE(now - died, detection_bound(c));
  EXPECT_EQ(detection_bound(c), milliseconds(100 * 3 + 50));
}

TEST(LivenessProbe, TimedOutProbeFailsAndIsRecycled) {
  LivenessProbe p(config(), t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  EXPECT_EQ(p.on_timer(t(150)), ProbeRequest::kRecycle);
  EXPECT_EQ(p.consecutive_failures(), 1u);
  // The late completion of the timed-out probe is not taken as an answer.
  EXPECT_EQ(p.on_result(ProbeOutcome::kAnswered, t(160)), ProbeRequest::kNone);
  EXPECT_EQ(p.state(), SenderState::kSuspect);
}

TEST(LivenessProbe, TrafficFromTheSenderAnswersForIt) {
  LivenessProbe p(config(), t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kNoAnswer, t(140));
  p.on_traffic(t(150));
  EXPECT_EQ(p.state(), SenderState::kAlive);
  EXPECT_EQ(p.counters().traffic, 1u);
}

TEST(LivenessProbe, NoProbeDuringMigrationOrItsGraceAndInFlightFailureIsExcused) {
  LivenessProbe p(config(), t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  p.on_migration_started(t(110));
  EXPECT_TRUE(p.migration_blocks(t(110)));
  EXPECT_EQ(p.on_result(ProbeOutcome::kNoAnswer, t(130)), ProbeRequest::kRecycle);
  p.on_qp_ready(t(131));
  EXPECT_EQ(p.consecutive_failures(), 0u);
  EXPECT_EQ(p.counters().excused, 1u);
  EXPECT_EQ(p.on_timer(t(200)), ProbeRequest::kNone);
  EXPECT_EQ(p.on_timer(t(900)), ProbeRequest::kNone);  // still migrating: no probe at all
  p.on_migration_finished(t(1000));
  EXPECT_EQ(p.next_deadline(), t(1300));  // the grace's end
  EXPECT_EQ(p.on_timer(t(1299)), ProbeRequest::kNone);
  EXPECT_EQ(p.on_timer(t(1300)), ProbeRequest::kIssue);
}

TEST(LivenessProbe, FailuresJustBeforeAMigrationAreForgiven) {
  LivenessProbe p(config(), t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kNoAnswer, t(140));
  p.on_qp_ready(t(141));
  ASSERT_EQ(p.state(), SenderState::kSuspect);
  p.on_migration_started(t(150));
  EXPECT_EQ(p.state(), SenderState::kAlive);
  EXPECT_EQ(p.counters().failed, 0u);
  EXPECT_EQ(p.counters().excused, 1u);
}

TEST(LivenessProbe, ADeadVerdictFromBeforeAMigrationMustBeFoundAgainAfterIt) {
  ProbeConfig c = config();
  c.retries = 0;
  LivenessProbe p(c, t(0));
  ASSERT_EQ(p.on_timer(t(100)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kNoAnswer, t(140));
  p.on_qp_ready(t(141));
  ASSERT_EQ(p.state(), SenderState::kDead);
  // The path was failing: the verdict may be its doing, not the sender's.
  p.on_migration_started(t(150));
  EXPECT_EQ(p.state(), SenderState::kAlive);
  p.on_migration_finished(t(200));
  // First probe at the grace's end (500); a sender really gone is dead again by then + bound.
  ASSERT_EQ(p.on_timer(t(500)), ProbeRequest::kIssue);
  p.on_result(ProbeOutcome::kNoAnswer, t(540));
  EXPECT_EQ(p.state(), SenderState::kDead);
  EXPECT_LE(t(540) - t(500), detection_bound(c));
}

TEST(LivenessProbe, CompletionStatusesMapToOutcomesPerKind) {
  using rdmap::WcStatus;
  EXPECT_EQ(probe_outcome_of(WcStatus::kSuccess, ProbeKind::kZeroLengthRead),
            ProbeOutcome::kAnswered);
  EXPECT_EQ(probe_outcome_of(WcStatus::kRemoteAccessError, ProbeKind::kInvalidRkeyRead),
            ProbeOutcome::kAnswered);
  // An rkey the peer never issued that reads fine proves nothing about the peer's checks.
  EXPECT_EQ(probe_outcome_of(WcStatus::kSuccess, ProbeKind::kInvalidRkeyRead),
            ProbeOutcome::kLocalError);
  EXPECT_EQ(probe_outcome_of(WcStatus::kRetryExceeded, ProbeKind::kZeroLengthRead),
            ProbeOutcome::kNoAnswer);
  EXPECT_EQ(probe_outcome_of(WcStatus::kRetryExceeded, ProbeKind::kInvalidRkeyRead),
            ProbeOutcome::kNoAnswer);
  EXPECT_EQ(probe_outcome_of(WcStatus::kFatalError, ProbeKind::kZeroLengthRead),
            ProbeOutcome::kLocalError);
}

TEST(LivenessProbe, ConfigErrorsAreSentences) {
  ProbeConfig c = config();
  EXPECT_FALSE(probe_config_error(c));
  c.timeout = milliseconds(200);
  ASSERT_TRUE(probe_config_error(c));
  EXPECT_NE(probe_config_error(c)->find("must not exceed the probe interval"), std::string::npos);
  c = config();
  c.interval = milliseconds(0);
  EXPECT_TRUE(probe_config_error(c));
  EXPECT_EQ(parse_probe_kind("invalid_rkey_read"), ProbeKind::kInvalidRkeyRead);
  EXPECT_FALSE(parse_probe_kind("ping"));
}

}  // namespace
}  // namespace rdma_interop::xrc
