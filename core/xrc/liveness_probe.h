// liveness_probe.h - is the remote sender of a target QP still there? A sans-I/O probe
// schedule for one sender.
//
// The receive side of an XRC connection (the target QP) cannot send, and a failed RDMA
// operation moves the QP that issued it to the error state, so the probe runs on an RC
// queue pair of its own between this node and the sender process (which dies with the
// process), and comes in two kinds because devices differ:
//
//   kZeroLengthRead     an RDMA Read of 0 bytes. Not rkey-checked (IB C9-88): it completes
//                       when the peer's QP answers, ends in retry exceeded when nobody does.
//                       A success leaves every QP as it was.
//   kInvalidRkeyRead    an RDMA Read of >= 1 byte with an rkey the peer never issued, for
//                       devices that do not complete 0-byte Reads without a round trip. An
//                       alive peer answers NAK remote access error (class C: both probe QPs
//                       go to error), a dead one not at all (retry exceeded). So after every
//                       answer the probe QP pair is recycled (kRecycleProbeQp), which is why
//                       this never runs on a data QP.
//
// Schedule: a probe goes out every `interval` (the first one `interval` after start). One
// that has not completed `timeout` after it went out has failed. After `retries + 1`
// consecutive failures the sender is dead. Traffic from the sender counts as an answer. So a
// sender that stops answering at t is found dead by t + detection_bound(config):
//     interval x (retries + 1) + timeout
// (the probe in flight when it stopped may still have been answered; `timeout` is the last
// probe's own time to fail, and is at most `interval`).
//
// Path migration (APM): a probe sent while the connection migrates may fail only because the
// path is changing, and on a data QP a retry exceeded would kill a connection that was about
// to recover. So no probe goes out from migration start until `migration_grace` after its
// end, a failure of a probe that was in flight is excused (counted, not held against the
// sender), and the dead verdict cannot fall in that window. The failures before the
// migration started are forgiven too, a dead verdict included: they may be the failing
// path's doing, the very thing that started the migration. So after a migration a sender
// that is really gone is found dead within grace end + detection_bound.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/rdmap/work_request.h"

namespace rdma_interop::xrc {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;
using Millis = std::chrono::milliseconds;

enum class ProbeKind : std::uint8_t { kZeroLengthRead, kInvalidRkeyRead };
std::string_view probe_kind_name(ProbeKind k);  // "zero_length_read", "invalid_rkey_read"
std::optional<ProbeKind> parse_probe_kind(std::string_view name);

// What became of one probe.
enum class ProbeOutcome : std::uint8_t {
  kAnswered,         // the peer's QP answered: success, or remote access error (invalid rkey)
  kNoAnswer,         // retry exceeded: nobody answered
  kTimedOut,         // not complete after ProbeConfig::timeout (the engine decides this)
  kLocalError,       // the probe could not be posted or ended with another status
  kProbeQpNotReady,  // the probe QP was still being recycled when the next probe was due
};
std::string_view probe_outcome_name(ProbeOutcome o);
// The outcome a completion status means for a probe of `kind`. For kInvalidRkeyRead a success
// is a local error: the peer accepted an rkey it never issued, so the probe proves nothing.
ProbeOutcome probe_outcome_of(rdmap::WcStatus status, ProbeKind kind);

struct ProbeConfig {
  ProbeKind kind = ProbeKind::kZeroLengthRead;
  Millis interval{1000};
  std::uint32_t retries = 2;  // failures forgiven; dead after retries + 1 in a row
  Millis timeout{1000};       // <= interval
  Millis migration_grace{2000};
  friend bool operator==(const ProbeConfig&, const ProbeConfig&) = default;
};
// A sentence saying what is wrong with `c`, or nothing.
std::optional<std::string> probe_config_error(const ProbeConfig& c);
// interval x (retries + 1) + timeout: see the header comment.
Millis detection_bound(const ProbeConfig& c);

enum class SenderState : std::uint8_t {
  kAlive,    // answered within the last retries + 1 probes (or no probe has failed yet)
  kSuspect,  // the last probes failed, fewer than retries + 1 of them
  kDead,     // retries + 1 probes in a row failed
};
std::string_view sender_state_name(SenderState s);

// What the probe asks its driver to do.
enum class ProbeRequest : std::uint8_t {
  kNone,
  kIssue,    // post one probe of config().kind, report it with on_result()
  kRecycle,  // (kInvalidRkeyRead) reset and reconnect the probe QP pair, then on_qp_ready()
};

struct ProbeCounters {
  std::uint64_t issued = 0;
  std::uint64_t answered = 0;
  std::uint64_t failed = 0;   // counted against the sender
  std::uint64_t excused = 0;  // failed during a migration or its grace
  std::uint64_t traffic = 0;  // answers taken from the sender's own traffic
  std::uint64_t recycles = 0;
  friend bool operator==(const ProbeCounters&, const ProbeCounters&) = default;
};

class LivenessProbe {
 public:
  // Starts the schedule at `now`: the first probe is due at now + interval.
  LivenessProbe(const ProbeConfig& config, TimePoint now);

  // Due work at `now`: at most one request per call; call again until kNone. A probe still
  // out after its timeout fails here (kTimedOut).
  ProbeRequest on_timer(TimePoint now);
  // The probe issued last completed. Results with no probe outstanding (late ones, after a
  // timeout) are ignored. Returns kRecycle when the probe QP must be recycled.
  ProbeRequest on_result(ProbeOutcome outcome, TimePoint now);
  // Anything arrived from the sender: it is alive.
  void on_traffic(TimePoint now);
  void on_qp_ready(TimePoint now);
  void on_migration_started(TimePoint now);
  void on_migration_finished(TimePoint now);

  std::optional<TimePoint> next_deadline() const;
  SenderState state() const { return state_; }
  std::uint32_t consecutive_failures() const { return failures_; }
  bool probe_outstanding() const { return outstanding_.has_value(); }
  bool migrating() const { return migrating_; }
  // True while migrating or within migration_grace after the last migration ended.
  bool migration_blocks(TimePoint now) const;
  std::optional<TimePoint> grace_end() const { return grace_end_; }
  TimePoint last_answer() const { return last_answer_; }
  const ProbeCounters& counters() const { return counters_; }
  const ProbeConfig& config() const { return config_; }

 private:
  void fail(ProbeOutcome why, TimePoint now);
  void answer(TimePoint now);

  ProbeConfig config_;
  SenderState state_ = SenderState::kAlive;
  std::uint32_t failures_ = 0;
  TimePoint next_probe_;
  std::optional<TimePoint> outstanding_;  // when the probe out now was issued
  bool outstanding_excused_ = false;      // issued before a migration started
  bool qp_ready_ = true;
  bool migrating_ = false;
  std::optional<TimePoint> grace_end_;
  TimePoint last_answer_;
  ProbeCounters counters_;
};

}  // namespace rdma_interop::xrc
