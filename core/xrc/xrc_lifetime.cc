#include "core/xrc/xrc_lifetime.h"

#include <algorithm>
#include <numeric>

namespace rdma_interop::xrc {
namespace {

std::uint32_t total(const std::map<ProcessId, std::uint32_t>& refs) {
  return std::accumulate(refs.begin(), refs.end(), std::uint32_t{0},
                         [](std::uint32_t sum, const auto& kv) { return sum + kv.second; });
}

// Takes one reference of `process`; false when it holds none.
bool drop_one(std::map<ProcessId, std::uint32_t>& refs, ProcessId process) {
  auto it = refs.find(process);
  if (it == refs.end()) return false;
  if (--it->second == 0) refs.erase(it);
  return true;
}

void add(ProbeCounters& sum, const ProbeCounters& c) {
  sum.issued += c.issued;
  sum.answered += c.answered;
  sum.failed += c.failed;
  sum.excused += c.excused;
  sum.traffic += c.traffic;
  sum.recycles += c.recycles;
}

}  // namespace

std::string_view xrc_error_name(XrcError e) {
  switch (e) {
    case XrcError::kNoSuchDomain:
      return "no_such_domain";
    case XrcError::kNotHeld:
      return "not_held";
    case XrcError::kNoSuchTqp:
      return "no_such_tqp";
    case XrcError::kTqpExists:
      return "tqp_exists";
    case XrcError::kBadProbeConfig:
      return "bad_probe_config";
  }
  return "unknown";
}

std::string_view event_type_name(XrcEventType t) {
  switch (t) {
    case XrcEventType::kDomainCreated:
      return "domain_created";
    case XrcEventType::kDomainOpened:
      return "domain_opened";
    case XrcEventType::kDomainClosed:
      return "domain_closed";
    case XrcEventType::kDomainDestroyed:
      return "domain_destroyed";
    case XrcEventType::kTqpCreated:
      return "tqp_created";
    case XrcEventType::kTqpOpened:
      return "tqp_opened";
    case XrcEventType::kTqpClosed:
      return "tqp_closed";
    case XrcEventType::kTqpKept:
      return "tqp_kept";
    case XrcEventType::kSenderSuspect:
      return "sender_suspect";
    case XrcEventType::kSenderDead:
      return "sender_dead";
    case XrcEventType::kSenderAlive:
      return "sender_alive";
    case XrcEventType::kReapDeferred:
      return "reap_deferred";
    case XrcEventType::kTqpReaped:
      return "tqp_reaped";
    case XrcEventType::kMigrationStarted:
      return "migration_started";
    case XrcEventType::kMigrationFinished:
      return "migration_finished";
    case XrcEventType::kProcessExited:
      return "process_exited";
  }
  return "unknown";
}

std::string_view reason_name(XrcReason r) {
  switch (r) {
    case XrcReason::kNone:
      return "none";
    case XrcReason::kProcessRequest:
      return "process_request";
    case XrcReason::kProcessExit:
      return "process_exit";
    case XrcReason::kSenderAlive:
      return "sender_alive";
    case XrcReason::kSenderDead:
      return "sender_dead";
    case XrcReason::kSenderDisconnected:
      return "sender_disconnected";
    case XrcReason::kMigrating:
      return "migrating";
    case XrcReason::kProbe:
      return "probe";
    case XrcReason::kTraffic:
      return "traffic";
    case XrcReason::kUnused:
      return "unused";
  }
  return "unknown";
}

std::string XrcEvent::to_string() const {
  const auto ms = std::chrono::duration_cast<Millis>(at.time_since_epoch()).count();
  std::string s = "t=" + std::to_string(ms) + "ms " + std::string(event_type_name(type)) +
                  " domain=" + std::to_string(domain);
  if (tqp) s += " tqp=" + std::to_string(*tqp);
  if (process) s += " process=" + std::to_string(*process);
  if (reason != XrcReason::kNone) s += " reason=" + std::string(reason_name(reason));
  return s;
}

Expected<XrcLifetime, std::string> XrcLifetime::create(const ProbeConfig& probe) {
  if (auto e = probe_config_error(probe)) return unexpected(*e);
  return XrcLifetime(probe);
}

Expected<DomainId, XrcError> XrcLifetime::open_domain(std::string_view name, ProcessId process,
                                                      bool create, TimePoint now) {
  auto it = std::find_if(domains_.begin(), domains_.end(),
                         [&](const auto& kv) { return kv.second.name == name; });
  if (it == domains_.end()) {
    if (!create) return unexpected(XrcError::kNoSuchDomain);
    const DomainId id = next_domain_++;
    it = domains_.emplace(id, Domain{std::string(name), {}, {}}).first;
    ++counters_.domains_created;
    emit(now, XrcEventType::kDomainCreated, XrcReason::kProcessRequest, id, std::nullopt, process);
  }
  ++it->second.refs[process];
  emit(now, XrcEventType::kDomainOpened, XrcReason::kProcessRequest, it->first, std::nullopt,
       process);
  return it->first;
}

std::optional<XrcError> XrcLifetime::close_domain(DomainId domain, ProcessId process,
                                                  TimePoint now) {
  auto it = domains_.find(domain);
  if (it == domains_.end()) return XrcError::kNoSuchDomain;
  if (!drop_one(it->second.refs, process)) return XrcError::kNotHeld;
  emit(now, XrcEventType::kDomainClosed, XrcReason::kProcessRequest, domain, std::nullopt, process);
  maybe_destroy_domain(domain, now);
  return std::nullopt;
}

std::optional<XrcError> XrcLifetime::create_target_qp(DomainId domain, TqpNum tqp,
                                                      ProcessId process, std::string sender,
                                                      TimePoint now) {
  auto d = domains_.find(domain);
  if (d == domains_.end()) return XrcError::kNoSuchDomain;
  if (!d->second.refs.count(process)) return XrcError::kNotHeld;
  if (tqps_.count(tqp)) return XrcError::kTqpExists;
  Tqp t{domain, {{process, 1}}, std::move(sender), LivenessProbe(probe_, now)};
  tqps_.emplace(tqp, std::move(t));
  d->second.tqps.push_back(tqp);
  ++counters_.tqps_created;
  emit(now, XrcEventType::kTqpCreated, XrcReason::kProcessRequest, domain, tqp, process);
  return std::nullopt;
}

std::optional<XrcError> XrcLifetime::open_target_qp(TqpNum tqp, ProcessId process, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end()) return XrcError::kNoSuchTqp;
  Tqp& t = it->second;
  // ibv_open_qp goes through the domain: a process that does not hold it cannot name the QP.
  if (!domains_.at(t.domain).refs.count(process)) return XrcError::kNotHeld;
  ++t.refs[process];
  t.kept_reported = false;
  t.deferred_reported = false;
  emit(now, XrcEventType::kTqpOpened, XrcReason::kProcessRequest, t.domain, tqp, process);
  return std::nullopt;
}

std::optional<XrcError> XrcLifetime::close_target_qp(TqpNum tqp, ProcessId process, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end()) return XrcError::kNoSuchTqp;
  if (!drop_one(it->second.refs, process)) return XrcError::kNotHeld;
  emit(now, XrcEventType::kTqpClosed, XrcReason::kProcessRequest, it->second.domain, tqp, process);
  evaluate(tqp, now);
  return std::nullopt;
}

void XrcLifetime::on_process_exit(ProcessId process, TimePoint now) {
  ++counters_.process_exits;
  emit(now, XrcEventType::kProcessExited, XrcReason::kProcessExit, 0, std::nullopt, process);
  std::vector<TqpNum> touched;
  for (auto& [num, t] : tqps_) {
    auto r = t.refs.find(process);
    if (r == t.refs.end()) continue;
    counters_.refs_dropped_by_exit += r->second;
    t.refs.erase(r);
    emit(now, XrcEventType::kTqpClosed, XrcReason::kProcessExit, t.domain, num, process);
    touched.push_back(num);
  }
  std::vector<DomainId> domains;
  for (auto& [id, d] : domains_) {
    auto r = d.refs.find(process);
    if (r == d.refs.end()) continue;
    counters_.refs_dropped_by_exit += r->second;
    d.refs.erase(r);
    emit(now, XrcEventType::kDomainClosed, XrcReason::kProcessExit, id, std::nullopt, process);
    domains.push_back(id);
  }
  for (TqpNum tqp : touched) evaluate(tqp, now);
  for (DomainId d : domains) maybe_destroy_domain(d, now);
}

void XrcLifetime::on_sender_disconnected(TqpNum tqp, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end() || it->second.disconnected) return;
  it->second.disconnected = true;
  evaluate(tqp, now);
}

void XrcLifetime::on_traffic(TqpNum tqp, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end()) return;
  it->second.probe.on_traffic(now);
  report_verdict(tqp, it->second, XrcReason::kTraffic, now);
}

void XrcLifetime::on_probe_result(TqpNum tqp, ProbeOutcome outcome, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end()) return;  // reaped while the probe was out
  handle_probe_request(tqp, it->second, it->second.probe.on_result(outcome, now));
  report_verdict(tqp, it->second, XrcReason::kProbe, now);
  evaluate(tqp, now);
}

void XrcLifetime::on_probe_qp_ready(TqpNum tqp, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it != tqps_.end()) it->second.probe.on_qp_ready(now);
}

void XrcLifetime::on_migration_started(TqpNum tqp, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end() || it->second.probe.migrating()) return;
  ++counters_.migrations;
  it->second.probe.on_migration_started(now);
  emit(now, XrcEventType::kMigrationStarted, XrcReason::kNone, it->second.domain, tqp);
  report_verdict(tqp, it->second, XrcReason::kMigrating, now);
}

void XrcLifetime::on_migration_finished(TqpNum tqp, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end() || !it->second.probe.migrating()) return;
  it->second.probe.on_migration_finished(now);
  emit(now, XrcEventType::kMigrationFinished, XrcReason::kNone, it->second.domain, tqp);
}

void XrcLifetime::on_timer(TimePoint now) {
  std::vector<TqpNum> nums;
  nums.reserve(tqps_.size());
  for (const auto& kv : tqps_) nums.push_back(kv.first);
  for (TqpNum num : nums) {
    auto it = tqps_.find(num);
    if (it == tqps_.end()) continue;
    Tqp& t = it->second;
    if (!t.disconnected) {
      // At most: a timeout, then the next probe; the bound keeps a driver bug from spinning.
      for (int i = 0; i < 4; ++i) {
        ProbeRequest r = t.probe.on_timer(now);
        report_verdict(num, t, XrcReason::kProbe, now);
        if (r == ProbeRequest::kNone) break;
        handle_probe_request(num, t, r);
      }
    }
    evaluate(num, now);
  }
}

std::optional<TimePoint> XrcLifetime::next_deadline() const {
  std::optional<TimePoint> d;
  auto consider = [&](std::optional<TimePoint> t) {
    if (t && (!d || *t < *d)) d = t;
  };
  for (const auto& [num, t] : tqps_) {
    if (!t.disconnected) consider(t.probe.next_deadline());
    // A reap held back by the grace is due when the grace ends.
    if (t.refs.empty() && t.probe.grace_end() && !t.probe.migrating()) {
      if (sender_gone(t)) consider(t.probe.grace_end());
    }
  }
  return d;
}

std::vector<XrcAction> XrcLifetime::take_actions() {
  std::vector<XrcAction> out;
  out.swap(actions_);
  return out;
}

std::vector<XrcEvent> XrcLifetime::take_events() {
  std::vector<XrcEvent> out(events_.begin(), events_.end());
  events_.clear();
  return out;
}

XrcCounters XrcLifetime::counters() const {
  XrcCounters c = counters_;
  ProbeCounters p = retired_probe_counters_;
  for (const auto& kv : tqps_) add(p, kv.second.probe.counters());
  c.probes_issued = p.issued;
  c.probes_answered = p.answered;
  c.probes_failed = p.failed;
  c.probes_excused = p.excused;
  c.probe_recycles = p.recycles;
  return c;
}

XrcSnapshot XrcLifetime::snapshot() const {
  XrcSnapshot s;
  for (const auto& [id, d] : domains_) s.domains.push_back({id, d.name, d.refs, d.tqps});
  for (const auto& [num, t] : tqps_) {
    s.tqps.push_back({num, t.domain, t.refs, t.sender, t.probe.state(), t.disconnected,
                      t.probe.migrating(), t.probe.grace_end(), t.probe.counters(),
                      t.probe.consecutive_failures(), t.probe.last_answer()});
  }
  s.counters = counters();
  s.probe = probe_;
  return s;
}

void XrcLifetime::emit(TimePoint now, XrcEventType type, XrcReason reason, DomainId domain,
                       std::optional<TqpNum> tqp, std::optional<ProcessId> process) {
  if (events_.size() >= kMaxEvents) {
    events_.pop_front();
    ++events_dropped_;
  }
  events_.push_back(XrcEvent{now, type, reason, domain, tqp, process});
}

void XrcLifetime::act(XrcActionType type, DomainId domain, TqpNum tqp) {
  actions_.push_back(XrcAction{type, domain, tqp});
}

void XrcLifetime::handle_probe_request(TqpNum tqp, Tqp& t, ProbeRequest r) {
  if (r == ProbeRequest::kIssue) act(XrcActionType::kIssueProbe, t.domain, tqp);
  if (r == ProbeRequest::kRecycle) act(XrcActionType::kRecycleProbeQp, t.domain, tqp);
}

void XrcLifetime::report_verdict(TqpNum tqp, Tqp& t, XrcReason why, TimePoint now) {
  const SenderState s = t.probe.state();
  if (s == t.reported) return;
  t.reported = s;
  const XrcEventType type = s == SenderState::kDead      ? XrcEventType::kSenderDead
                            : s == SenderState::kSuspect ? XrcEventType::kSenderSuspect
                                                         : XrcEventType::kSenderAlive;
  emit(now, type, why, t.domain, tqp);
  // A sender back from the dead (a healed partition) earns a fresh "kept" report.
  if (s == SenderState::kAlive) t.deferred_reported = false;
}

bool XrcLifetime::sender_gone(const Tqp& t) {
  return t.disconnected || t.probe.state() == SenderState::kDead;
}

void XrcLifetime::evaluate(TqpNum tqp, TimePoint now) {
  auto it = tqps_.find(tqp);
  if (it == tqps_.end()) return;
  Tqp& t = it->second;
  if (total(t.refs) > 0) return;
  if (!sender_gone(t)) {
    if (!t.kept_reported) {
      t.kept_reported = true;
      ++counters_.kept_for_sender;
      emit(now, XrcEventType::kTqpKept, XrcReason::kSenderAlive, t.domain, tqp);
    }
    return;
  }
  if (t.probe.migration_blocks(now)) {
    if (!t.deferred_reported) {
      t.deferred_reported = true;
      ++counters_.reaps_deferred;
      emit(now, XrcEventType::kReapDeferred, XrcReason::kMigrating, t.domain, tqp);
    }
    return;
  }
  reap(tqp, t.disconnected ? XrcReason::kSenderDisconnected : XrcReason::kSenderDead, now);
}

void XrcLifetime::reap(TqpNum tqp, XrcReason why, TimePoint now) {
  auto it = tqps_.find(tqp);
  const DomainId domain = it->second.domain;
  add(retired_probe_counters_, it->second.probe.counters());
  tqps_.erase(it);
  auto& list = domains_.at(domain).tqps;
  list.erase(std::remove(list.begin(), list.end(), tqp), list.end());
  ++counters_.tqps_reaped;
  if (why == XrcReason::kSenderDisconnected) {
    ++counters_.reaped_sender_disconnected;
  } else {
    ++counters_.reaped_sender_dead;
  }
  act(XrcActionType::kDestroyTqp, domain, tqp);
  emit(now, XrcEventType::kTqpReaped, why, domain, tqp);
  maybe_destroy_domain(domain, now);
}

void XrcLifetime::maybe_destroy_domain(DomainId domain, TimePoint now) {
  auto it = domains_.find(domain);
  if (it == domains_.end() || !it->second.refs.empty() || !it->second.tqps.empty()) return;
  domains_.erase(it);
  ++counters_.domains_destroyed;
  act(XrcActionType::kDestroyDomain, domain);
  emit(now, XrcEventType::kDomainDestroyed, XrcReason::kUnused, domain);
}

}  // namespace rdma_interop::xrc
