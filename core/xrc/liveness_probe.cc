#include "core/xrc/liveness_probe.h"

#include <algorithm>

namespace rdma_interop::xrc {

std::string_view probe_kind_name(ProbeKind k) {
  switch (k) {
    case ProbeKind::kZeroLengthRead:
      return "zero_length_read";
    case ProbeKind::kInvalidRkeyRead:
      return "invalid_rkey_read";
  }
  return "unknown";
}

std::optional<ProbeKind> parse_probe_kind(std::string_view name) {
  for (auto k : {ProbeKind::kZeroLengthRead, ProbeKind::kInvalidRkeyRead}) {
    if (probe_kind_name(k) == name) return k;
  }
  return std::nullopt;
}

std::string_view probe_outcome_name(ProbeOutcome o) {
  switch (o) {
    case ProbeOutcome::kAnswered:
      return "answered";
    case ProbeOutcome::kNoAnswer:
      return "no_answer";
    case ProbeOutcome::kTimedOut:
      return "timed_out";
    case ProbeOutcome::kLocalError:
      return "local_error";
    case ProbeOutcome::kProbeQpNotReady:
      return "probe_qp_not_ready";
  }
  return "unknown";
}

ProbeOutcome probe_outcome_of(rdmap::WcStatus status, ProbeKind kind) {
  using rdmap::WcStatus;
  switch (status) {
    case WcStatus::kSuccess:
      return kind == ProbeKind::kZeroLengthRead ? ProbeOutcome::kAnswered
                                                : ProbeOutcome::kLocalError;
    case WcStatus::kRemoteAccessError:
      // The peer's QP checked the rkey and refused it: somebody is there.
      return kind == ProbeKind::kInvalidRkeyRead ? ProbeOutcome::kAnswered
                                                 : ProbeOutcome::kLocalError;
    case WcStatus::kRetryExceeded:
      return ProbeOutcome::kNoAnswer;
    default:
      return ProbeOutcome::kLocalError;
  }
}

std::string_view sender_state_name(SenderState s) {
  switch (s) {
    case SenderState::kAlive:
      return "alive";
    case SenderState::kSuspect:
      return "suspect";
    case SenderState::kDead:
      return "dead";
  }
  return "unknown";
}

std::optional<std::string> probe_config_error(const ProbeConfig& c) {
  if (c.interval <= Millis{0}) return "probe interval must be positive";
  if (c.timeout <= Millis{0}) return "probe timeout must be positive";
  if (c.timeout > c.interval) {
    return "probe timeout (" + std::to_string(c.timeout.count()) +
           " ms) must not exceed the probe interval (" + std::to_string(c.interval.count()) +
           " ms): one probe must be over before the next goes out";
  }
  if (c.retries > 1000) return "probe retries must be at most 1000";
  if (c.migration_grace < Millis{0}) return "migration grace must not be negative";
  return std::nullopt;
}

Millis detection_bound(const ProbeConfig& c) {
  return c.interval * (static_cast<std::int64_t>(c.retries) + 1) + c.timeout;
}

LivenessProbe::LivenessProbe(const ProbeConfig& config, TimePoint now)
    : config_(config), next_probe_(now + config.interval), last_answer_(now) {}

bool LivenessProbe::migration_blocks(TimePoint now) const {
  return migrating_ || (grace_end_ && now < *grace_end_);
}

ProbeRequest LivenessProbe::on_timer(TimePoint now) {
  if (outstanding_ && now >= *outstanding_ + config_.timeout) {
    // The probe QP may still be retrying; its late completion would be mistaken for the
    // next probe's, so it is recycled before the next one.
    return on_result(ProbeOutcome::kTimedOut, now);
  }
  if (outstanding_ || migration_blocks(now) || now < next_probe_) return ProbeRequest::kNone;
  // Keep the cadence, unless the driver came so late that it cannot be kept.
  next_probe_ = std::max(next_probe_ + config_.interval, now + config_.interval / 2);
  if (!qp_ready_) {
    fail(ProbeOutcome::kProbeQpNotReady, now);
    return ProbeRequest::kNone;
  }
  outstanding_ = now;
  outstanding_excused_ = false;
  ++counters_.issued;
  return ProbeRequest::kIssue;
}

ProbeRequest LivenessProbe::on_result(ProbeOutcome outcome, TimePoint now) {
  if (!outstanding_) return ProbeRequest::kNone;
  const bool excused = outstanding_excused_;
  outstanding_.reset();
  outstanding_excused_ = false;
  if (outcome == ProbeOutcome::kAnswered) {
    answer(now);
  } else if (excused) {
    ++counters_.excused;
  } else {
    fail(outcome, now);
  }
  // A zero-length Read that was answered leaves the QP as it was; anything else left it in
  // the error state (retry exceeded, or the class C NAK of an invalid rkey at both ends).
  if (outcome == ProbeOutcome::kAnswered && config_.kind == ProbeKind::kZeroLengthRead) {
    return ProbeRequest::kNone;
  }
  qp_ready_ = false;
  ++counters_.recycles;
  return ProbeRequest::kRecycle;
}

void LivenessProbe::on_traffic(TimePoint now) {
  ++counters_.traffic;
  failures_ = 0;
  state_ = SenderState::kAlive;
  last_answer_ = std::max(last_answer_, now);
}

void LivenessProbe::on_qp_ready(TimePoint) {
  qp_ready_ = true;
}

void LivenessProbe::on_migration_started(TimePoint) {
  migrating_ = true;
  if (outstanding_) outstanding_excused_ = true;
  // The failures just before may be the failing path's, the very thing that started the
  // migration: they are forgiven, also a dead verdict not yet acted on (the TQP may be held).
  // After the grace the probe starts afresh, so a sender that is really gone is found again
  // within detection_bound of the grace's end.
  if (state_ != SenderState::kAlive) {
    counters_.excused += failures_;
    counters_.failed -= failures_;
    failures_ = 0;
    state_ = SenderState::kAlive;
  }
}

void LivenessProbe::on_migration_finished(TimePoint now) {
  if (!migrating_) return;
  migrating_ = false;
  grace_end_ = now + config_.migration_grace;
  next_probe_ = std::max(next_probe_, *grace_end_);
}

std::optional<TimePoint> LivenessProbe::next_deadline() const {
  std::optional<TimePoint> d;
  if (outstanding_) d = *outstanding_ + config_.timeout;
  if (!migrating_ && !outstanding_) {
    TimePoint p = next_probe_;
    if (grace_end_) p = std::max(p, *grace_end_);
    d = d ? std::min(*d, p) : p;
  }
  return d;
}

void LivenessProbe::fail(ProbeOutcome, TimePoint now) {
  if (migration_blocks(now)) {
    ++counters_.excused;
    return;
  }
  ++counters_.failed;
  ++failures_;
  state_ = failures_ >= config_.retries + 1 ? SenderState::kDead : SenderState::kSuspect;
}

void LivenessProbe::answer(TimePoint now) {
  ++counters_.answered;
  failures_ = 0;
  state_ = SenderState::kAlive;
  last_answer_ = std::max(last_answer_, now);
}

}  // namespace rdma_interop::xrc
