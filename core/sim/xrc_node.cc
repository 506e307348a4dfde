#include "core/sim/xrc_node.h"

namespace rdma_interop::sim {
namespace {

constexpr std::uint32_t kSrqDepth = 64;
constexpr std::uint32_t kMessageSize = 4096;
// A recycle is a CM exchange (REQ, REP, RTU) with the sender's library; the fabric's own
// connect is instant, so the node waits this long before it. While the sender cannot be
// reached it tries again every quarter probe interval: often enough that a healed sender's
// next probe finds the QP ready, rarely enough to cost nothing.
constexpr Nanos kRecycleDelay = std::chrono::microseconds(30);

}  // namespace

XrcNode::XrcNode(Fabric& fabric, NodeId node, const xrc::ProbeConfig& probe)
    : fabric_(fabric),
      node_(node),
      daemon_(fabric.spawn(node)),
      engine_(xrc::XrcLifetime::create(probe).value()) {}

std::optional<xrc::DomainId> XrcNode::open_domain(Pid process, std::string_view name) {
  if (!fabric_.alive(process) || fabric_.node_of(process) != node_) return std::nullopt;
  auto d = engine_.open_domain(name, process, true, fabric_.now());
  if (!d) return std::nullopt;
  if (!xrcds_.count(*d)) {
    const XrcdId x = fabric_.open_xrcd(node_, name);
    xrcds_[*d] = x;
    const SrqNum srq = fabric_.create_xrc_srq(daemon_, x);
    srqs_[*d] = srq;
    for (std::uint32_t i = 0; i < kSrqDepth; ++i) fabric_.post_srq_recv(srq, i, kMessageSize);
  }
  pump();
  return *d;
}

bool XrcNode::close_domain(Pid process, xrc::DomainId domain) {
  const bool ok = !engine_.close_domain(domain, process, fabric_.now());
  pump();
  return ok;
}

std::optional<Qpn> XrcNode::create_target_qp(Pid process, xrc::DomainId domain, Pid sender,
                                                Qpn sender_ini) {
  auto x = xrcds_.find(domain);
  if (x == xrcds_.end() || !fabric_.alive(process)) return std::nullopt;
  const Qpn tqp = fabric_.create_xrc_tgt(x->second);
  if (!fabric_.connect(tqp, sender_ini)) {
    fabric_.destroy_qp(tqp);
    return std::nullopt;
  }
  if (auto e = engine_.create_target_qp(
          domain, tqp, process,
          "pid " + std::to_string(sender) + " qp " + std::to_string(sender_ini), fabric_.now())) {
    fabric_.destroy_qp(tqp);
    return std::nullopt;
  }
  // The sender's library makes the responder end of the probe pair with its initiator QP,
  // so the responder dies with the sender.
  ProbePair p;
  p.local = fabric_.create_rc_qp(daemon_);
  p.remote = fabric_.create_rc_qp(sender);
  fabric_.connect(p.local, p.remote);
  probes_[tqp] = p;
  pump();
  return tqp;
}

bool XrcNode::open_target_qp(Pid process, Qpn tqp) {
  const bool ok = !engine_.open_target_qp(tqp, process, fabric_.now());
  pump();
  return ok;
}

bool XrcNode::close_target_qp(Pid process, Qpn tqp) {
  const bool ok = !engine_.close_target_qp(tqp, process, fabric_.now());
  pump();
  return ok;
}

void XrcNode::sender_disconnected(Qpn tqp) {
  engine_.on_sender_disconnected(tqp, fabric_.now());
  pump();
}

std::optional<SrqNum> XrcNode::srq_of(xrc::DomainId domain) const {
  auto it = srqs_.find(domain);
  if (it == srqs_.end()) return std::nullopt;
  return it->second;
}

std::optional<Qpn> XrcNode::probe_qp_of(Qpn tqp) const {
  auto it = probes_.find(tqp);
  if (it == probes_.end()) return std::nullopt;
  return it->second.local;
}

std::optional<Qpn> XrcNode::tqp_of_probe(Qpn probe_qp) const {
  for (const auto& [tqp, p] : probes_) {
    if (p.local == probe_qp) return tqp;
  }
  return std::nullopt;
}

void XrcNode::handle(const AsyncEvent& e) {
  if (e.node != node_) return;
  const TimePoint now = fabric_.now();
  switch (e.type) {
    case AsyncType::kProcessExited:
      if (e.pid != daemon_) engine_.on_process_exit(e.pid, now);
      break;
    case AsyncType::kMigrationStarted:
    case AsyncType::kPathMigrated:
    case AsyncType::kPathMigError: {
      std::optional<Qpn> tqp;
      if (probes_.count(e.qpn)) tqp = e.qpn;
      if (!tqp) tqp = tqp_of_probe(e.qpn);
      if (tqp) migration_event(*tqp, e.qpn, e.type == AsyncType::kMigrationStarted);
      break;
    }
    case AsyncType::kQpFatal:
      break;  // a probe QP in error is recycled on its completion, not here
  }
  pump();
}

void XrcNode::migration_event(Qpn tqp, Qpn qpn, bool started) {
  ProbePair& p = probes_.at(tqp);
  const TimePoint now = fabric_.now();
  // The TQP's connection migrates while any of its QPs (target, probe) does.
  if (started) {
    if (p.migrating.empty()) engine_.on_migration_started(tqp, now);
    p.migrating.insert(qpn);
  } else if (p.migrating.erase(qpn) && p.migrating.empty()) {
    engine_.on_migration_finished(tqp, now);
  }
}

void XrcNode::handle(const SimCompletion& c) {
  const TimePoint now = fabric_.now();
  if (c.owner != daemon_) return;
  if (c.srq) {
    // A sender's message through the domain's SRQ: it is alive. The buffer goes back.
    if (c.status == rdmap::WcStatus::kSuccess) {
      engine_.on_traffic(c.qpn, now);
      fabric_.post_srq_recv(*c.srq, c.wr_id, kMessageSize);
    }
  } else if (auto tqp = tqp_of_probe(c.qpn)) {
    ProbePair& p = probes_.at(*tqp);
    // Flushes and completions of probes already timed out are not answers.
    if (c.status != rdmap::WcStatus::kFlushed && c.wr_id == p.wr_id) {
      p.wr_id = 0;
      engine_.on_probe_result(*tqp, xrc::probe_outcome_of(c.status, engine_.probe_config().kind),
                              now);
    }
  }
  pump();
}

void XrcNode::issue_probe(Qpn tqp) {
  ProbePair& p = probes_.at(tqp);
  const bool zero = engine_.probe_config().kind == xrc::ProbeKind::kZeroLengthRead;
  p.wr_id = next_wr_id_++;
  SimWr wr{p.wr_id, rdmap::WrOpcode::kRdmaRead, zero ? 0u : 1u, zero ? 0u : invalid_rkey_, {}};
  if (fabric_.post_send(p.local, wr)) {
    p.wr_id = 0;
    engine_.on_probe_result(tqp, xrc::ProbeOutcome::kLocalError, fabric_.now());
  }
}

void XrcNode::recycle(Qpn tqp, bool retry) {
  auto it = probes_.find(tqp);
  if (it == probes_.end() || it->second.recycling) return;
  it->second.recycling = true;
  it->second.wr_id = 0;
  const Nanos delay = retry ? Nanos(engine_.probe_config().interval / 4) : kRecycleDelay;
  fabric_.clock().after(delay, [this, tqp] {
    auto p = probes_.find(tqp);
    if (p == probes_.end()) return;  // reaped meanwhile
    p->second.recycling = false;
    if (fabric_.reconnect(p->second.local, p->second.remote)) {
      engine_.on_probe_qp_ready(tqp, fabric_.now());
    } else {
      // The sender is gone or cut off: keep trying, the engine counts the missed probes.
      recycle(tqp, true);
    }
    pump();
  });
}

void XrcNode::pump() {
  for (int round = 0; round < 8; ++round) {
    auto actions = engine_.take_actions();
    if (actions.empty()) break;
    for (const auto& a : actions) {
      switch (a.type) {
        case xrc::XrcActionType::kIssueProbe:
          issue_probe(a.tqp);
          break;
        case xrc::XrcActionType::kRecycleProbeQp:
          recycle(a.tqp);
          break;
        case xrc::XrcActionType::kDestroyTqp: {
          auto p = probes_.find(a.tqp);
          if (p != probes_.end()) {
            fabric_.destroy_qp(p->second.local);
            probes_.erase(p);
          }
          if (!fabric_.destroy_qp(a.tqp)) ++destroy_failures_;
          break;
        }
        case xrc::XrcActionType::kDestroyDomain: {
          if (!fabric_.destroy_srq(srqs_.at(a.domain))) ++destroy_failures_;
          if (!fabric_.destroy_xrcd(xrcds_.at(a.domain))) ++destroy_failures_;
          srqs_.erase(a.domain);
          xrcds_.erase(a.domain);
          break;
        }
      }
      if (action_hook_) action_hook_(a);
    }
  }
  const auto due = engine_.next_deadline();
  if (due == timer_at_) return;
  if (timer_) fabric_.clock().cancel(*timer_);
  timer_.reset();
  timer_at_ = due;
  if (due) {
    timer_ = fabric_.clock().at(*due, [this] {
      timer_.reset();
      timer_at_.reset();
      engine_.on_timer(fabric_.now());
      pump();
    });
  }
}

}  // namespace rdma_interop::sim
