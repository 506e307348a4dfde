#include "core/sim/ib_cm.h"

#include <algorithm>

namespace rdma_interop::sim {
namespace {

std::size_t index(CmMsgType t) {
  return static_cast<std::size_t>(t);
}

}  // namespace

std::string_view msg_name(CmMsgType t) {
  switch (t) {
    case CmMsgType::kReq:
      return "REQ";
    case CmMsgType::kMra:
      return "MRA";
    case CmMsgType::kRep:
      return "REP";
    case CmMsgType::kRtu:
      return "RTU";
    case CmMsgType::kRej:
      return "REJ";
    case CmMsgType::kDreq:
      return "DREQ";
    case CmMsgType::kDrep:
      return "DREP";
  }
  return "unknown";
}

std::string_view outcome_name(CmOutcome o) {
  switch (o) {
    case CmOutcome::kEstablished:
      return "established";
    case CmOutcome::kRejectedByApp:
      return "rejected_by_app";
    case CmOutcome::kRejectedBacklogFull:
      return "rejected_backlog_full";
    case CmOutcome::kRejectedNoListener:
      return "rejected_no_listener";
    case CmOutcome::kRejectedExpired:
      return "rejected_expired";
    case CmOutcome::kTimedOut:
      return "timed_out";
    case CmOutcome::kDropped:
      return "dropped";
    case CmOutcome::kAborted:
      return "aborted";
    case CmOutcome::kRtuTimeout:
      return "rtu_timeout";
    case CmOutcome::kPeerAbandoned:
      return "peer_abandoned";
    case CmOutcome::kQpFailed:
      return "qp_failed";
    case CmOutcome::kDisconnected:
      return "disconnected";
  }
  return "unknown";
}

IbCm::IbCm(Fabric& fabric, const CmConfig& config) : fabric_(fabric), config_(config) {}

// ---- listeners --------------------------------------------------------------------------

Expected<ListenerId, std::string> IbCm::listen(NodeId node, const ListenConfig& config) {
  if (!fabric_.node_up(node)) return unexpected("node " + std::to_string(node) + " is down");
  for (const auto& [lid, l] : listeners_) {
    if (l.node == node && l.service == config.service) {
      return unexpected("service " + std::to_string(config.service) + " is taken on node " +
                        std::to_string(node));
    }
  }
  const ListenerId lid = next_listener_++;
  listeners_.emplace(lid, Listener{node, config.service, cm::ListenBacklog(config.backlog)});
  return lid;
}

std::optional<CmId> IbCm::take_request(ListenerId listener) {
  auto it = listeners_.find(listener);
  if (it == listeners_.end() || it->second.queue.empty()) return std::nullopt;
  const CmId id = it->second.queue.front();
  it->second.queue.pop_front();
  return id;
}

std::size_t IbCm::queued_requests(ListenerId listener) const {
  auto it = listeners_.find(listener);
  return it == listeners_.end() ? 0 : it->second.queue.size();
}

cm::BacklogCounters IbCm::backlog_counters(ListenerId listener) const {
  auto it = listeners_.find(listener);
  return it == listeners_.end() ? cm::BacklogCounters{} : it->second.backlog.counters();
}

void IbCm::apply(ListenerId lid, const std::vector<cm::BacklogAction>& actions) {
  Listener& l = listeners_.at(lid);
  for (const cm::BacklogAction& a : actions) {
    auto it = conns_.find(a.id);
    if (it == conns_.end()) continue;
    Conn& c = it->second;
    switch (a.type) {
      case cm::BacklogActionType::kDeliver:
        c.state = CmState::kPending;
        l.queue.push_back(a.id);
        if (config_.auto_mra) arm_mra(a.id, config_.response_timeout / 2);
        break;
      case cm::BacklogActionType::kRejectOverflow: {
        CmMessage rej = message(c, a.id, CmMsgType::kRej);
        rej.backlog_full = true;
        send(rej);
        finish(a.id, CmOutcome::kRejectedBacklogFull);
        break;
      }
      case cm::BacklogActionType::kRejectExpired: {
        CmMessage rej = message(c, a.id, CmMsgType::kRej);
        rej.reason = RejReason::kTimeout;
        send(rej);
        finish(a.id, CmOutcome::kRejectedExpired);
        break;
      }
      case cm::BacklogActionType::kClose:  // waited over the backlog too long: no answer
        finish(a.id, CmOutcome::kDropped);
        break;
    }
  }
}

void IbCm::rearm(ListenerId lid) {
  Listener& l = listeners_.at(lid);
  if (l.timer) fabric_.clock().cancel(*l.timer);
  l.timer.reset();
  const auto due = l.backlog.next_deadline();
  if (!due) return;
  l.timer = fabric_.clock().at(*due, [this, lid] {
    listeners_.at(lid).timer.reset();
    apply(lid, listeners_.at(lid).backlog.on_timer(fabric_.now()));
    rearm(lid);
  });
}

// ---- the application's calls ------------------------------------------------------------

Expected<CmId, std::string> IbCm::connect(Pid owner, NodeId node, ServiceId service,
                                           const RcAttrs& attrs) {
  if (!fabric_.alive(owner)) return unexpected("pid " + std::to_string(owner) + " is not alive");
  const CmId id = next_id_++;
  Conn& c = conns_[id];
  c.node = fabric_.node_of(owner);
  c.peer_node = node;
  c.service = service;
  c.qpn = fabric_.create_rc_qp(owner, attrs);
  send(message(c, id, CmMsgType::kReq));
  arm(id, config_.response_timeout);
  return id;
}

std::optional<std::string> IbCm::accept(CmId id, Pid owner, const RcAttrs& attrs) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.state != CmState::kPending) {
    return "cm id " + std::to_string(id) + " is not a pending request";
  }
  Conn& c = it->second;
  if (!fabric_.alive(owner) || fabric_.node_of(owner) != c.node) {
    return "pid " + std::to_string(owner) + " is not alive on node " + std::to_string(c.node);
  }
  const ListenerId lid = *c.listener;
  std::vector<cm::BacklogAction> actions;
  if (!listeners_.at(lid).backlog.on_accepted(id, actions)) {
    return "the backlog no longer holds cm id " + std::to_string(id);
  }
  std::erase(listeners_.at(lid).queue, id);
  if (c.mra_timer) fabric_.clock().cancel(*c.mra_timer);
  c.mra_timer.reset();
  c.qpn = fabric_.create_rc_qp(owner, attrs);
  c.state = CmState::kRepSent;
  c.retries = 0;
  send(message(c, id, CmMsgType::kRep));
  arm(id, config_.response_timeout);
  apply(lid, actions);  // the freed slot goes to the oldest waiting request
  rearm(lid);
  return std::nullopt;
}

std::optional<std::string> IbCm::reject(CmId id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.state != CmState::kPending) {
    return "cm id " + std::to_string(id) + " is not a pending request";
  }
  const ListenerId lid = *it->second.listener;
  std::vector<cm::BacklogAction> actions;
  if (!listeners_.at(lid).backlog.on_rejected(id, actions)) {
    return "the backlog no longer holds cm id " + std::to_string(id);
  }
  send(message(it->second, id, CmMsgType::kRej));
  finish(id, CmOutcome::kRejectedByApp);
  apply(lid, actions);
  rearm(lid);
  return std::nullopt;
}

std::optional<std::string> IbCm::disconnect(CmId id) {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.state != CmState::kEstablished) {
    return "cm id " + std::to_string(id) + " is not established";
  }
  it->second.state = CmState::kDreqSent;
  it->second.retries = 0;
  send(message(it->second, id, CmMsgType::kDreq));
  arm(id, config_.response_timeout);
  return std::nullopt;
}

std::optional<CmState> IbCm::state(CmId id) const {
  auto it = conns_.find(id);
  if (it == conns_.end()) return std::nullopt;
  return it->second.state;
}

std::optional<Qpn> IbCm::qpn(CmId id) const {
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second.qpn == 0) return std::nullopt;
  return it->second.qpn;
}

std::uint64_t IbCm::count(NodeId node, CmOutcome o) const {
  auto it = counts_.find({node, o});
  return it == counts_.end() ? 0 : it->second;
}

// ---- messages ---------------------------------------------------------------------------

CmMessage IbCm::message(const Conn& c, CmId id, CmMsgType type) const {
  CmMessage m;
  m.type = type;
  m.from_node = c.node;
  m.to_node = c.peer_node;
  m.from = id;
  m.to = c.peer;
  m.service = c.service;
  m.qpn = c.qpn;
  m.service_timeout = config_.mra_service_timeout;
  return m;
}

void IbCm::send(const CmMessage& m) {
  ++sent_[index(m.type)];
  fabric_.note("cm " + std::string(msg_name(m.type)) + " " + std::to_string(m.from_node) + "->" +
               std::to_string(m.to_node) + " comm " + std::to_string(m.from) + "->" +
               std::to_string(m.to));
  if (!fabric_.reachable(m.from_node, m.to_node) || (lose_ && lose_(m))) {
    ++lost_[index(m.type)];
    return;
  }
  fabric_.clock().after(fabric_.config().hop_latency, [this, m] {
    if (!fabric_.reachable(m.from_node, m.to_node)) {
      ++lost_[index(m.type)];
      return;
    }
    receive(m);
  });
}

void IbCm::receive(const CmMessage& m) {
  if (auto it = conns_.find(m.to); m.to != 0 && it != conns_.end() &&
                                   it->second.node == m.to_node &&
                                   it->second.peer_node == m.from_node) {
    if (it->second.side == CmSide::kActive) {
      on_active(m.to, it->second, m);
    } else {
      on_passive(m.to, it->second, m);
    }
    return;
  }
  // The active side names a passive end by its own comm id until it learns the passive's.
  if (auto p = passive_by_peer_.find({m.from_node, m.from}); p != passive_by_peer_.end()) {
    on_passive(p->second, conns_.at(p->second), m);
    return;
  }
  if (m.type == CmMsgType::kReq) {
    receive_req(m);
  } else if (m.type == CmMsgType::kDreq) {
    // The connection is gone here already: DREP anyway, so the peer stops resending.
    CmMessage drep{.type = CmMsgType::kDrep,
                   .from_node = m.to_node,
                   .to_node = m.from_node,
                   .from = 0,
                   .to = m.from};
    send(drep);
  }
  // Anything else for an end that is gone (a late REP, MRA or RTU) is dropped.
}

void IbCm::receive_req(const CmMessage& m) {
  auto l = std::find_if(listeners_.begin(), listeners_.end(), [&](const auto& kv) {
    return kv.second.node == m.to_node && kv.second.service == m.service;
  });
  if (l == listeners_.end()) {
    CmMessage rej{.type = CmMsgType::kRej,
                  .from_node = m.to_node,
                  .to_node = m.from_node,
                  .from = 0,
                  .to = m.from,
                  .reason = RejReason::kInvalidServiceId};
    send(rej);
    report(m.to_node, 0, CmSide::kPassive, CmOutcome::kRejectedNoListener);
    return;
  }
  const ListenerId lid = l->first;
  const CmId id = next_id_++;
  Conn& c = conns_[id];
  c.side = CmSide::kPassive;
  c.state = CmState::kWaiting;
  c.node = m.to_node;
  c.peer_node = m.from_node;
  c.peer = m.from;
  c.service = m.service;
  c.listener = lid;
  c.peer_qpn = m.qpn;
  passive_by_peer_[{m.from_node, m.from}] = id;
  // No half-open phase in IB: the REQ is one MAD, complete on arrival.
  const TimePoint now = fabric_.now();
  apply(lid, l->second.backlog.on_tcp_accepted(id, now));
  apply(lid, l->second.backlog.on_request_complete(id, now));
  rearm(lid);
}

void IbCm::on_active(CmId id, Conn& c, const CmMessage& m) {
  switch (m.type) {
    case CmMsgType::kMra:
      if (c.state != CmState::kReqSent) return;
      c.peer = m.from;
      arm(id, m.service_timeout);  // the current wait moves; retries are not given back
      return;
    case CmMsgType::kRep:
      if (c.state == CmState::kEstablished && c.peer == m.from) {
        send(message(c, id, CmMsgType::kRtu));  // our RTU was lost: the REP came again
        return;
      }
      if (c.state != CmState::kReqSent) return;
      cancel(c);
      c.peer = m.from;
      c.peer_qpn = m.qpn;
      if (!fabric_.connect(c.qpn, m.qpn)) {
        send(message(c, id, CmMsgType::kRej));
        finish(id, CmOutcome::kQpFailed);
        return;
      }
      c.state = CmState::kEstablished;
      send(message(c, id, CmMsgType::kRtu));
      report(c.node, id, CmSide::kActive, CmOutcome::kEstablished);
      return;
    case CmMsgType::kRej:
      if (c.state == CmState::kReqSent) {
        CmOutcome o = CmOutcome::kRejectedByApp;
        if (m.backlog_full) {
          o = CmOutcome::kRejectedBacklogFull;
        } else if (m.reason == RejReason::kInvalidServiceId) {
          o = CmOutcome::kRejectedNoListener;
        } else if (m.reason == RejReason::kTimeout) {
          o = CmOutcome::kRejectedExpired;
        }
        finish(id, o);
      } else {
        finish(id, CmOutcome::kPeerAbandoned);
      }
      return;
    case CmMsgType::kDreq:
    case CmMsgType::kDrep:
      on_disconnect(id, c, m);
      return;
    default:
      return;
  }
}

void IbCm::on_passive(CmId id, Conn& c, const CmMessage& m) {
  switch (m.type) {
    case CmMsgType::kReq:
      // A retry of a request we hold: not a new request for the backlog.
      ++duplicate_reqs_;
      if (c.state == CmState::kWaiting || c.state == CmState::kPending) {
        send(message(c, id, CmMsgType::kMra));
      } else if (c.state == CmState::kRepSent) {
        send(message(c, id, CmMsgType::kRep));  // our REP was lost; retries are not spent
      }
      return;
    case CmMsgType::kRtu:
      if (c.state != CmState::kRepSent) return;
      cancel(c);
      c.state = CmState::kEstablished;
      report(c.node, id, CmSide::kPassive, CmOutcome::kEstablished);
      return;
    case CmMsgType::kRej:
      if (c.state == CmState::kWaiting || c.state == CmState::kPending) {
        // The active side gave up: free its slot (or its place in the queue) now.
        const ListenerId lid = *c.listener;
        auto actions = listeners_.at(lid).backlog.on_peer_gone(id);
        finish(id, CmOutcome::kAborted);
        apply(lid, actions);
        rearm(lid);
      } else {
        finish(id, c.state == CmState::kRepSent ? CmOutcome::kAborted : CmOutcome::kPeerAbandoned);
      }
      return;
    case CmMsgType::kDreq:
    case CmMsgType::kDrep:
      on_disconnect(id, c, m);
      return;
    default:
      return;
  }
}

void IbCm::on_disconnect(CmId id, Conn& c, const CmMessage& m) {
  if (m.type == CmMsgType::kDreq &&
      (c.state == CmState::kEstablished || c.state == CmState::kDreqSent)) {
    send(message(c, id, CmMsgType::kDrep));
    finish(id, CmOutcome::kDisconnected);
  } else if (m.type == CmMsgType::kDrep && c.state == CmState::kDreqSent) {
    finish(id, CmOutcome::kDisconnected);
  }
}

// ---- timers and endings -----------------------------------------------------------------

void IbCm::cancel(Conn& c) {
  if (c.timer) fabric_.clock().cancel(*c.timer);
  c.timer.reset();
}

void IbCm::arm(CmId id, Nanos delay) {
  Conn& c = conns_.at(id);
  cancel(c);
  c.timer = fabric_.clock().after(delay, [this, id] { expire(id); });
}

void IbCm::expire(CmId id) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  c.timer.reset();
  CmMsgType again = CmMsgType::kReq;
  CmOutcome gave_up = CmOutcome::kTimedOut;
  switch (c.state) {
    case CmState::kReqSent:
      break;
    case CmState::kRepSent:
      again = CmMsgType::kRep;
      gave_up = CmOutcome::kRtuTimeout;
      break;
    case CmState::kDreqSent:
      again = CmMsgType::kDreq;
      gave_up = CmOutcome::kDisconnected;  // no DREP: the connection is over all the same
      break;
    default:
      return;
  }
  if (c.retries < config_.max_retries) {
    ++c.retries;
    send(message(c, id, again));
    arm(id, config_.response_timeout);
    return;
  }
  if (again != CmMsgType::kDreq) {
    // As ib_destroy_cm_id does: tell the peer, so it frees what it holds for us now.
    CmMessage rej = message(c, id, CmMsgType::kRej);
    rej.reason = RejReason::kTimeout;
    send(rej);
  }
  finish(id, gave_up);
}

void IbCm::arm_mra(CmId id, Nanos delay) {
  conns_.at(id).mra_timer = fabric_.clock().after(delay, [this, id] {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    it->second.mra_timer.reset();
    if (it->second.state != CmState::kPending) return;
    send(message(it->second, id, CmMsgType::kMra));
    arm_mra(id, config_.mra_service_timeout / 2);
  });
}

void IbCm::finish(CmId id, CmOutcome o) {
  auto it = conns_.find(id);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  cancel(c);
  if (c.mra_timer) fabric_.clock().cancel(*c.mra_timer);
  if (c.qpn != 0) fabric_.destroy_qp(c.qpn);
  if (c.side == CmSide::kPassive) {
    passive_by_peer_.erase({c.peer_node, c.peer});
    if (c.listener) std::erase(listeners_.at(*c.listener).queue, id);
  }
  report(c.node, id, c.side, o);
  conns_.erase(it);
}

void IbCm::report(NodeId node, CmId id, CmSide side, CmOutcome o) {
  ++counts_[{node, o}];
  fabric_.note("cm " + std::string(outcome_name(o)) + " node " + std::to_string(node) + " comm " +
               std::to_string(id));
  const CmEvent e{id, node, side, o, fabric_.now()};
  fabric_.clock().after(Nanos{0}, [this, e] {
    if (handler_) handler_(e);
  });
}

}  // namespace rdma_interop::sim
