// xrc_lifetime.h - who keeps an XRC target QP alive, and when it is reaped. Sans-I/O.
//
// XRC (eXtended Reliable Connected) lets many processes of a node share receive resources:
// a remote sender's initiator QP delivers into a target QP (TQP) that lives in an XRC domain,
// and any process of the domain consumes from the XRC SRQs. So the TQP must not die with the
// process that created it. Upstream Linux destroys it when the last process handle closes (a
// use count); the 2007 OFED API had explicit register/unregister; neither notices when the
// sender is gone, so a TQP nobody holds either dies under a live sender or lives forever.
//
// This engine keeps the node's truth and decides:
//   domains      opened by name (the ibv_open_xrcd(fd, O_CREAT) model: every process that
//                opens the same file gets the same domain), held by per-process references,
//                destroyed when no process holds it and no TQP lives in it;
//   target QPs   owned by their domain, not by a process; per-process references (the
//                creator's, and every ibv_open_qp); each has one remote sender, watched by a
//                LivenessProbe (liveness_probe.h);
//   the policy   a TQP with local references is kept, whatever its sender does;
//                a TQP with none and a live (or suspect) sender is kept;
//                a TQP with none and a dead or disconnected sender is reaped;
//                nothing is reaped while its connection migrates paths or within the grace
//                after a migration;
//   process death  the driver reports it (pidfd, or the provider's own notice) and every
//                reference of the process goes at once.
// Every decision is an event with its reason, and counted. The driver does what the actions
// say (post a probe, recycle the probe QP, destroy a TQP or domain) and reports results back.
// Nothing here blocks or reads a clock: `now` comes in with every call, and next_deadline()
// says when on_timer() is due.
//
// Guarantees (checked by the simulator's invariant runs, tests/unit/xrc_sim_random_test.cc):
//   - never reaped while a process holds a reference, or while its sender answered within
//     the last detection_bound (liveness_probe.h), or during a migration or its grace;
//   - reaped at most detection_bound after the sender stopped answering, once no reference
//     is left and no migration blocks it (plus one timer call's lateness);
//   - every domain and TQP created is destroyed exactly once, or is still held.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/expected.h"
#include "core/xrc/liveness_probe.h"

namespace rdma_interop::xrc {

using ProcessId = std::uint64_t;  // the driver's name for a process (pid and start time)
using DomainId = std::uint32_t;
using TqpNum = std::uint32_t;  // the target QP's number, given by the provider

enum class XrcError : std::uint8_t {
  kNoSuchDomain,  // open without create, and no domain of that name
  kNotHeld,       // the process holds no reference to it
  kNoSuchTqp,
  kTqpExists,  // create_target_qp with a number already in use
  kBadProbeConfig,
};
std::string_view xrc_error_name(XrcError e);

enum class XrcEventType : std::uint8_t {
  kDomainCreated,
  kDomainOpened,
  kDomainClosed,
  kDomainDestroyed,
  kTqpCreated,
  kTqpOpened,
  kTqpClosed,
  kTqpKept,  // the last local reference went; the sender keeps it
  kSenderSuspect,
  kSenderDead,
  kSenderAlive,   // probe verdict changes
  kReapDeferred,  // would be reaped, but a migration (or its grace) is in the way
  kTqpReaped,
  kMigrationStarted,
  kMigrationFinished,
  kProcessExited,
};
std::string_view event_type_name(XrcEventType t);

enum class XrcReason : std::uint8_t {
  kNone,
  kProcessRequest,      // the process asked (open, close, create)
  kProcessExit,         // the process died holding the reference
  kSenderAlive,         // kept: its sender answers
  kSenderDead,          // reaped: retries + 1 probes in a row unanswered
  kSenderDisconnected,  // reaped: the sender closed the connection
  kMigrating,           // deferred: migration or grace
  kProbe,               // a probe answered or failed
  kTraffic,             // the sender's own traffic answered for it
  kUnused,              // domain destroyed: no process and no TQP left
};
std::string_view reason_name(XrcReason r);

struct XrcEvent {
  TimePoint at{};
  XrcEventType type = XrcEventType::kDomainCreated;
  XrcReason reason = XrcReason::kNone;
  DomainId domain = 0;
  std::optional<TqpNum> tqp;
  std::optional<ProcessId> process;
  std::string to_string() const;  // one line: "t=1500ms tqp_reaped tqp=7 domain=1 reason=..."
  friend bool operator==(const XrcEvent&, const XrcEvent&) = default;
};

enum class XrcActionType : std::uint8_t {
  kIssueProbe,      // post one probe (ProbeConfig::kind) for `tqp`'s sender
  kRecycleProbeQp,  // reset and reconnect `tqp`'s probe QP pair, then on_probe_qp_ready
  kDestroyTqp,      // destroy the target QP (ibv_destroy_qp)
  kDestroyDomain,   // close the domain (ibv_close_xrcd)
};

struct XrcAction {
  XrcActionType type = XrcActionType::kIssueProbe;
  DomainId domain = 0;
  TqpNum tqp = 0;  // not for kDestroyDomain
  friend bool operator==(const XrcAction&, const XrcAction&) = default;
};

struct XrcCounters {
  std::uint64_t domains_created = 0, domains_destroyed = 0;
  std::uint64_t tqps_created = 0, tqps_reaped = 0;
  std::uint64_t kept_for_sender = 0;  // kTqpKept
  std::uint64_t reaped_sender_dead = 0, reaped_sender_disconnected = 0;
  std::uint64_t reaps_deferred = 0;
  std::uint64_t process_exits = 0;
  std::uint64_t refs_dropped_by_exit = 0;  // domain and TQP references together
  std::uint64_t probes_issued = 0, probes_answered = 0, probes_failed = 0, probes_excused = 0;
  std::uint64_t probe_recycles = 0;
  std::uint64_t migrations = 0;
  friend bool operator==(const XrcCounters&, const XrcCounters&) = default;
};

// What `rdma-probe xrc` shows: a consistent copy of the engine's state.
struct TqpSnapshot {
  TqpNum tqp = 0;
  DomainId domain = 0;
  std::map<ProcessId, std::uint32_t> refs;
  std::string sender;  // the driver's description of the remote sender
  SenderState sender_state = SenderState::kAlive;
  bool sender_disconnected = false;
  bool migrating = false;
  std::optional<TimePoint> grace_end;
  ProbeCounters probe;
  std::uint32_t consecutive_failures = 0;
  TimePoint last_answer{};
};
struct DomainSnapshot {
  DomainId domain = 0;
  std::string name;
  std::map<ProcessId, std::uint32_t> refs;
  std::vector<TqpNum> tqps;
};
struct XrcSnapshot {
  std::vector<DomainSnapshot> domains;
  std::vector<TqpSnapshot> tqps;
  XrcCounters counters;
  ProbeConfig probe;
};

class XrcLifetime {
 public:
  static constexpr std::size_t kMaxEvents = 4096;  // kept between take_events(); older dropped

  // `probe` applies to every TQP (one engine per device: devices differ, nodes do not).
  static Expected<XrcLifetime, std::string> create(const ProbeConfig& probe);

  // ibv_open_xrcd: the domain called `name`, made if `create` and absent. Each call is one
  // reference of `process`.
  Expected<DomainId, XrcError> open_domain(std::string_view name, ProcessId process, bool create,
                                           TimePoint now);
  std::optional<XrcError> close_domain(DomainId domain, ProcessId process, TimePoint now);
  // A TQP of `domain` created by `process` (which must hold the domain): one reference for
  // it; its probe starts now. `sender` describes the remote end, for humans.
  std::optional<XrcError> create_target_qp(DomainId domain, TqpNum tqp, ProcessId process,
                                           std::string sender, TimePoint now);
  // ibv_open_qp / ibv_destroy_qp of a process's handle.
  std::optional<XrcError> open_target_qp(TqpNum tqp, ProcessId process, TimePoint now);
  std::optional<XrcError> close_target_qp(TqpNum tqp, ProcessId process, TimePoint now);
  void on_process_exit(ProcessId process, TimePoint now);

  void on_sender_disconnected(TqpNum tqp, TimePoint now);  // DREQ / orderly close
  void on_traffic(TqpNum tqp, TimePoint now);
  void on_probe_result(TqpNum tqp, ProbeOutcome outcome, TimePoint now);
  void on_probe_qp_ready(TqpNum tqp, TimePoint now);
  // The TQP's connection began / ended a path migration (port error or path_mig_state
  // leaving ARMED; IBV_EVENT_PATH_MIG or IBV_EVENT_PATH_MIG_ERR).
  void on_migration_started(TqpNum tqp, TimePoint now);
  void on_migration_finished(TqpNum tqp, TimePoint now);

  void on_timer(TimePoint now);
  std::optional<TimePoint> next_deadline() const;

  std::vector<XrcAction> take_actions();
  std::vector<XrcEvent> take_events();
  std::uint64_t events_dropped() const { return events_dropped_; }
  XrcCounters counters() const;  // the probe figures summed over every TQP, reaped or not
  XrcSnapshot snapshot() const;
  bool has_tqp(TqpNum tqp) const { return tqps_.count(tqp) != 0; }
  bool has_domain(DomainId d) const { return domains_.count(d) != 0; }
  std::size_t tqp_count() const { return tqps_.size(); }
  std::size_t domain_count() const { return domains_.size(); }
  const ProbeConfig& probe_config() const { return probe_; }

 private:
  struct Tqp {
    DomainId domain = 0;
    std::map<ProcessId, std::uint32_t> refs;
    std::string sender;
    LivenessProbe probe;
    SenderState reported = SenderState::kAlive;  // the verdict the last event told
    bool disconnected = false;
    bool kept_reported = false;  // kTqpKept told since the last reference went
    bool deferred_reported = false;
  };
  struct Domain {
    std::string name;
    std::map<ProcessId, std::uint32_t> refs;
    std::vector<TqpNum> tqps;
  };

  explicit XrcLifetime(const ProbeConfig& probe) : probe_(probe) {}
  void emit(TimePoint now, XrcEventType type, XrcReason reason, DomainId domain,
            std::optional<TqpNum> tqp = std::nullopt,
            std::optional<ProcessId> process = std::nullopt);
  void act(XrcActionType type, DomainId domain, TqpNum tqp = 0);
  void handle_probe_request(TqpNum tqp, Tqp& t, ProbeRequest r);
  void report_verdict(TqpNum tqp, Tqp& t, XrcReason why, TimePoint now);
  // Applies the policy to one TQP (after anything that may change its fate).
  void evaluate(TqpNum tqp, TimePoint now);
  // Its sender disconnected or was found dead: reaped once unheld and no migration blocks.
  static bool sender_gone(const Tqp& t);
  void reap(TqpNum tqp, XrcReason why, TimePoint now);
  void maybe_destroy_domain(DomainId d, TimePoint now);

  ProbeConfig probe_;
  std::map<DomainId, Domain> domains_;
  std::map<TqpNum, Tqp> tqps_;
  DomainId next_domain_ = 1;
  XrcCounters counters_;
  ProbeCounters retired_probe_counters_;  // of TQPs already reaped
  std::vector<XrcAction> actions_;
  std::deque<XrcEvent> events_;
  std::uint64_t events_dropped_ = 0;
};

}  // namespace rdma_interop::xrc
