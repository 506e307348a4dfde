#include "core/sim/fabric.h"

#include <algorithm>

namespace rdma_interop::sim {
namespace {

using rdmap::WcOpcode;
using rdmap::WcStatus;
using rdmap::WrOpcode;

WcOpcode wc_opcode_of(WrOpcode op) {
  switch (op) {
    case WrOpcode::kRdmaWrite:
      return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead:
      return WcOpcode::kRdmaRead;
    default:
      return WcOpcode::kSend;
  }
}

std::pair<NodeId, NodeId> key(NodeId a, NodeId b) {
  return {std::min(a, b), std::max(a, b)};
}

}  // namespace

std::string_view async_type_name(AsyncType t) {
  switch (t) {
    case AsyncType::kMigrationStarted:
      return "migration_started";
    case AsyncType::kPathMigrated:
      return "path_migrated";
    case AsyncType::kPathMigError:
      return "path_mig_error";
    case AsyncType::kQpFatal:
      return "qp_fatal";
    case AsyncType::kProcessExited:
      return "process_exited";
  }
  return "unknown";
}

// ---- topology and faults ---------------------------------------------------------------

NodeId Fabric::add_node() {
  nodes_.push_back(Node{});
  return static_cast<NodeId>(nodes_.size() - 1);
}

void Fabric::link(NodeId a, NodeId b, unsigned paths) {
  links_[key(a, b)].paths.assign(std::clamp(paths, 1u, 2u), Path{});
}

Fabric::Link* Fabric::link_of(NodeId a, NodeId b) {
  auto it = links_.find(key(a, b));
  return it == links_.end() ? nullptr : &it->second;
}
const Fabric::Link* Fabric::link_of(NodeId a, NodeId b) const {
  auto it = links_.find(key(a, b));
  return it == links_.end() ? nullptr : &it->second;
}

bool Fabric::path_up(NodeId a, NodeId b, unsigned path) const {
  const Link* l = link_of(a, b);
  return l && path < l->paths.size() && l->paths[path].up;
}

bool Fabric::node_up(NodeId node) const {
  return node < nodes_.size() && nodes_[node].up;
}

bool Fabric::reachable(NodeId a, NodeId b) const {
  const Link* l = link_of(a, b);
  if (!l || !node_up(a) || !node_up(b)) return false;
  return std::any_of(l->paths.begin(), l->paths.end(), [](const Path& p) { return p.up; });
}

void Fabric::set_path_up(NodeId a, NodeId b, unsigned path, bool up) {
  Link* l = link_of(a, b);
  if (!l || path >= l->paths.size() || l->paths[path].up == up) return;
  l->paths[path].up = up;
  note("path " + std::to_string(a) + "-" + std::to_string(b) + "/" + std::to_string(path) +
       (up ? " up" : " down"));
  for (auto& [num, q] : qps_) {
    if (q.state != QpState::kRts || key(q.node, q.remote_node) != key(a, b)) continue;
    if (!up && q.path == path && q.alt && path_up(a, b, *q.alt) && !q.migrating) {
      // The HCA notices at the next ACK timeout, then moves to the armed alternate.
      const Qpn n = num;
      clock_.after(q.attrs.ack_timeout, [this, n] { start_migration(n); });
    } else if (up && !q.alt && q.path != path) {
      q.alt = path;  // re-armed (path_mig_state back to ARMED with a fresh alternate)
    }
  }
}

void Fabric::partition(NodeId a, NodeId b) {
  if (Link* l = link_of(a, b)) {
    for (unsigned p = 0; p < l->paths.size(); ++p) set_path_up(a, b, p, false);
  }
}

void Fabric::heal(NodeId a, NodeId b) {
  if (Link* l = link_of(a, b)) {
    for (unsigned p = 0; p < l->paths.size(); ++p) set_path_up(a, b, p, true);
  }
}

void Fabric::crash(NodeId node) {
  if (!node_up(node)) return;
  nodes_[node].up = false;
  note("node " + std::to_string(node) + " crashed");
  for (auto& [pid, p] : processes_) {
    if (p.node == node) p.alive = false;
  }
  std::erase_if(qps_, [&](const auto& kv) { return kv.second.node == node; });
  std::erase_if(srqs_, [&](const auto& kv) { return node_of(kv.second.owner) == node; });
  std::erase_if(mrs_, [&](const auto& kv) { return node_of(kv.second.owner) == node; });
  std::erase_if(xrcds_, [&](const auto& kv) { return kv.second.node == node; });
}

// ---- processes and memory -------------------------------------------------------------

Pid Fabric::spawn(NodeId node) {
  const Pid pid = next_pid_++;
  processes_[pid] = Process{node, node_up(node)};
  note("spawn pid " + std::to_string(pid) + " on node " + std::to_string(node));
  return pid;
}

bool Fabric::alive(Pid pid) const {
  auto it = processes_.find(pid);
  return it != processes_.end() && it->second.alive;
}

NodeId Fabric::node_of(Pid pid) const {
  auto it = processes_.find(pid);
  return it == processes_.end() ? NodeId{0xFFFFFFFF} : it->second.node;
}

void Fabric::kill(Pid pid) {
  auto it = processes_.find(pid);
  if (it == processes_.end() || !it->second.alive) return;
  it->second.alive = false;
  note("kill pid " + std::to_string(pid));
  // The kernel tears the process's objects down; its peers see only silence.
  std::erase_if(qps_, [&](const auto& kv) { return kv.second.owner == pid; });
  std::erase_if(srqs_, [&](const auto& kv) { return kv.second.owner == pid; });
  std::erase_if(mrs_, [&](const auto& kv) { return kv.second.owner == pid; });
  async(AsyncType::kProcessExited, it->second.node, 0, pid);
}

std::uint32_t Fabric::register_mr(Pid pid, std::uint32_t length) {
  const std::uint32_t rkey = next_rkey_++;
  if (alive(pid)) mrs_[rkey] = Mr{pid, length};
  return rkey;
}

// ---- queue pairs ------------------------------------------------------------------------

Fabric::Qp* Fabric::qp(Qpn qpn) {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : &it->second;
}

Qpn Fabric::create_owned_qp(QpType type, Pid owner, const RcAttrs& attrs) {
  const Qpn n = next_qpn_++;
  if (alive(owner))
    qps_[n] = Qp{.type = type, .owner = owner, .node = node_of(owner), .attrs = attrs};
  return n;
}

Qpn Fabric::create_rc_qp(Pid owner, const RcAttrs& attrs) {
  return create_owned_qp(QpType::kRc, owner, attrs);
}

Qpn Fabric::create_xrc_ini(Pid owner, const RcAttrs& attrs) {
  return create_owned_qp(QpType::kXrcIni, owner, attrs);
}

Qpn Fabric::create_xrc_tgt(XrcdId xrcd, const RcAttrs& attrs) {
  const Qpn n = next_qpn_++;
  auto it = xrcds_.find(xrcd);
  if (it != xrcds_.end()) {
    qps_[n] = Qp{.type = QpType::kXrcTgt, .node = it->second.node, .xrcd = xrcd, .attrs = attrs};
  }
  return n;
}

bool Fabric::connect(Qpn a, Qpn b) {
  Qp* qa = qp(a);
  Qp* qb = qp(b);
  if (!qa || !qb || a == b || qa->state != QpState::kIdle || qb->state != QpState::kIdle) {
    return false;
  }
  const bool rc = qa->type == QpType::kRc && qb->type == QpType::kRc;
  const bool xrc = (qa->type == QpType::kXrcIni && qb->type == QpType::kXrcTgt) ||
                   (qa->type == QpType::kXrcTgt && qb->type == QpType::kXrcIni);
  if ((!rc && !xrc) || !reachable(qa->node, qb->node)) return false;
  return reconnect(a, b);
}

bool Fabric::reconnect(Qpn a, Qpn b) {
  Qp* qa = qp(a);
  Qp* qb = qp(b);
  if (!qa || !qb || !reachable(qa->node, qb->node)) return false;
  if (qa->state != QpState::kIdle && qa->peer != b) return false;
  if (qb->state != QpState::kIdle && qb->peer != a) return false;
  const Link* l = link_of(qa->node, qb->node);
  std::vector<unsigned> up;
  for (unsigned p = 0; p < l->paths.size(); ++p) {
    if (l->paths[p].up) up.push_back(p);
  }
  for (auto [self, other, q] : {std::tuple{a, b, qa}, std::tuple{b, a, qb}}) {
    flush(*q, self);
    if (q->migrating) async(AsyncType::kPathMigError, q->node, self, q->owner);
    q->state = QpState::kRts;
    q->peer = other;
    q->remote_node = self == a ? qb->node : qa->node;
    q->path = up[0];
    q->alt = up.size() > 1 ? std::optional<unsigned>(up[1]) : std::nullopt;
    q->migrating = false;
    q->busy = false;
    ++q->attempt;
    q->next_seq = 1;
    q->executed_seq = 0;
  }
  note("connect qp " + std::to_string(a) + " <-> " + std::to_string(b) + " path " +
       std::to_string(up[0]));
  return true;
}

bool Fabric::destroy_qp(Qpn qpn) {
  Qp* q = qp(qpn);
  if (!q) return false;
  flush(*q, qpn);
  qps_.erase(qpn);
  note("destroy qp " + std::to_string(qpn));
  return true;
}

bool Fabric::qp_exists(Qpn qpn) const {
  return qps_.count(qpn) != 0;
}

std::optional<QpState> Fabric::qp_state(Qpn qpn) const {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return std::nullopt;
  return it->second.state;
}

std::optional<unsigned> Fabric::qp_path(Qpn qpn) const {
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return std::nullopt;
  return it->second.path;
}

bool Fabric::qp_migrating(Qpn qpn) const {
  auto it = qps_.find(qpn);
  return it != qps_.end() && it->second.migrating;
}

// ---- XRC --------------------------------------------------------------------------------

XrcdId Fabric::open_xrcd(NodeId node, std::string_view name) {
  for (const auto& [id, x] : xrcds_) {
    if (x.node == node && x.name == name) return id;
  }
  const XrcdId id = next_xrcd_++;
  if (node_up(node)) xrcds_[id] = Xrcd{node, std::string(name)};
  return id;
}

bool Fabric::destroy_xrcd(XrcdId xrcd) {
  if (!xrcds_.count(xrcd)) return false;
  for (const auto& kv : qps_) {
    if (kv.second.type == QpType::kXrcTgt && kv.second.xrcd == xrcd) return false;
  }
  for (const auto& kv : srqs_) {
    if (kv.second.xrcd == xrcd) return false;
  }
  xrcds_.erase(xrcd);
  note("destroy xrcd " + std::to_string(xrcd));
  return true;
}

SrqNum Fabric::create_xrc_srq(Pid owner, XrcdId xrcd) {
  const SrqNum n = next_srq_++;
  auto x = xrcds_.find(xrcd);
  if (alive(owner) && x != xrcds_.end() && x->second.node == node_of(owner)) {
    srqs_[n] = Srq{owner, xrcd, {}};
  }
  return n;
}

bool Fabric::destroy_srq(SrqNum srq) {
  return srqs_.erase(srq) != 0;
}

std::size_t Fabric::tgt_qp_count(NodeId node) const {
  return static_cast<std::size_t>(std::count_if(qps_.begin(), qps_.end(), [&](const auto& kv) {
    return kv.second.type == QpType::kXrcTgt && kv.second.node == node;
  }));
}

std::size_t Fabric::xrcd_count(NodeId node) const {
  return static_cast<std::size_t>(std::count_if(
      xrcds_.begin(), xrcds_.end(), [&](const auto& kv) { return kv.second.node == node; }));
}

// ---- work requests ----------------------------------------------------------------------

std::optional<std::string> Fabric::post_send(Qpn qpn, const SimWr& wr) {
  Qp* q = qp(qpn);
  if (!q) return "no QP " + std::to_string(qpn);
  if (q->type == QpType::kXrcTgt) return "an XRC target QP has no send queue";
  if (q->state != QpState::kRts) return "QP " + std::to_string(qpn) + " is not in RTS";
  if (wr.opcode != WrOpcode::kSend && wr.opcode != WrOpcode::kRdmaWrite &&
      wr.opcode != WrOpcode::kRdmaRead) {
    return "the simulator posts Send, RDMA Write and RDMA Read only";
  }
  if (q->type == QpType::kXrcIni && wr.opcode == WrOpcode::kSend && !wr.remote_srq) {
    return "an XRC Send names the target's SRQ (remote_srq)";
  }
  q->sq.push_back(Op{wr, q->next_seq++, 0, 0});
  kick(qpn);
  return std::nullopt;
}

std::optional<std::string> Fabric::post_recv(Qpn qpn, std::uint64_t wr_id, std::uint32_t length) {
  Qp* q = qp(qpn);
  if (!q) return "no QP " + std::to_string(qpn);
  if (q->type != QpType::kRc) return "XRC QPs receive through an SRQ";
  if (q->state == QpState::kError) return "QP " + std::to_string(qpn) + " is in error";
  q->rq.push_back(Recv{wr_id, length});
  return std::nullopt;
}

std::optional<std::string> Fabric::post_srq_recv(SrqNum srq, std::uint64_t wr_id,
                                                 std::uint32_t length) {
  auto it = srqs_.find(srq);
  if (it == srqs_.end()) return "no SRQ " + std::to_string(srq);
  it->second.rq.push_back(Recv{wr_id, length});
  return std::nullopt;
}

// ---- the RC transport -------------------------------------------------------------------

bool Fabric::deliverable(Qpn requester_num, const Qp& requester) const {
  if (requester.state != QpState::kRts || requester.migrating || !requester.peer) return false;
  if (!node_up(requester.node) || !path_up(requester.node, requester.remote_node, requester.path)) {
    return false;
  }
  auto r = qps_.find(*requester.peer);
  // A packet for a QP that is gone, or that was reconnected elsewhere, is dropped.
  return r != qps_.end() && r->second.state == QpState::kRts && r->second.peer == requester_num &&
         node_up(r->second.node);
}

void Fabric::kick(Qpn qpn) {
  Qp* q = qp(qpn);
  if (q && q->state == QpState::kRts && !q->busy && !q->migrating && !q->sq.empty()) {
    send_attempt(qpn);
  }
}

void Fabric::send_attempt(Qpn qpn) {
  Qp* q = qp(qpn);
  if (!q || q->state != QpState::kRts || q->sq.empty() || q->migrating) return;
  q->busy = true;
  const std::uint64_t a = ++q->attempt;
  clock_.after(q->attrs.ack_timeout, [this, qpn, a] { ack_timeout(qpn, a); });
  if (deliverable(qpn, *q)) clock_.after(config_.hop_latency, [this, qpn, a] { arrive(qpn, a); });
}

void Fabric::retry_after(Qpn qpn, Nanos delay) {
  Qp* q = qp(qpn);
  const std::uint64_t a = ++q->attempt;
  q->busy = true;
  clock_.after(delay, [this, qpn, a] {
    Qp* q2 = qp(qpn);
    if (!q2 || q2->attempt != a) return;
    q2->busy = false;
    kick(qpn);
  });
}

void Fabric::arrive(Qpn requester, std::uint64_t attempt) {
  Qp* q = qp(requester);
  if (!q || q->attempt != attempt || !q->busy || !deliverable(requester, *q)) return;
  const Qpn responder = *q->peer;
  const Answer answer = execute(*q, qps_.at(responder), responder, q->sq.front());
  if (answer == Answer::kRnr) ++rnr_naks_;
  clock_.after(config_.hop_latency,
               [this, requester, attempt, answer] { respond(requester, attempt, answer); });
}

Fabric::Answer Fabric::execute(Qp& req, Qp& resp, Qpn resp_num, const Op& op) {
  // A retransmission of a request already executed (its ACK was lost) is answered again
  // without executing twice (IB C9-105, duplicate requests).
  if (op.seq <= resp.executed_seq) return Answer::kAck;
  Answer answer = Answer::kAck;
  switch (op.wr.opcode) {
    case WrOpcode::kSend: {
      std::deque<Recv>* rq = nullptr;
      Pid owner = resp.owner;
      std::optional<SrqNum> srq;
      if (resp.type == QpType::kXrcTgt) {
        auto s = op.wr.remote_srq ? srqs_.find(*op.wr.remote_srq) : srqs_.end();
        if (s == srqs_.end() || s->second.xrcd != resp.xrcd) return Answer::kInvalidRequest;
        rq = &s->second.rq;
        owner = s->second.owner;
        srq = s->first;
      } else if (resp.type == QpType::kRc) {
        rq = &resp.rq;
      } else {
        return Answer::kInvalidRequest;
      }
      if (rq->empty()) return Answer::kRnr;
      const Recv r = rq->front();
      rq->pop_front();
      const bool fits = op.wr.length <= r.length;
      deliver(SimCompletion{owner, resp_num, srq, r.wr_id, WcOpcode::kRecv,
                            fits ? WcStatus::kSuccess : WcStatus::kLocalLengthError,
                            fits ? op.wr.length : 0});
      if (!fits) answer = Answer::kInvalidRequest;
      break;
    }
    case WrOpcode::kRdmaRead:
    case WrOpcode::kRdmaWrite: {
      if (resp.type != QpType::kRc) return Answer::kInvalidRequest;
      if (op.wr.length == 0) break;  // C9-88: no rkey check for a zero-length transfer
      auto mr = mrs_.find(op.wr.rkey);
      if (mr == mrs_.end() || mr->second.owner != resp.owner || op.wr.length > mr->second.length) {
        // Class C: the responder QP goes to error too.
        to_error(resp_num, true);
        (void)req;
        return Answer::kAccessError;
      }
      break;
    }
    default:
      return Answer::kInvalidRequest;
  }
  resp.executed_seq = op.seq;
  return answer;
}

void Fabric::respond(Qpn requester, std::uint64_t attempt, Answer answer) {
  Qp* q = qp(requester);
  if (!q || q->attempt != attempt || !q->busy) return;
  if (!node_up(q->node) || !path_up(q->node, q->remote_node, q->path)) return;  // lost
  q->busy = false;
  ++q->attempt;
  switch (answer) {
    case Answer::kAck:
      complete_head(requester, WcStatus::kSuccess);
      kick(requester);
      return;
    case Answer::kRnr: {
      Op& op = q->sq.front();
      ++op.rnr_retries;
      if (q->attrs.rnr_retry != 7 && op.rnr_retries > q->attrs.rnr_retry) {
        complete_head(requester, WcStatus::kRnrRetryExceeded);
        to_error(requester, false);
        return;
      }
      retry_after(requester, q->attrs.min_rnr_timer);
      return;
    }
    case Answer::kAccessError:
      complete_head(requester, WcStatus::kRemoteAccessError);
      to_error(requester, false);
      return;
    case Answer::kInvalidRequest:
      complete_head(requester, WcStatus::kRemoteInvalidRequest);
      to_error(requester, false);
      return;
  }
}

void Fabric::ack_timeout(Qpn qpn, std::uint64_t attempt) {
  Qp* q = qp(qpn);
  if (!q || q->attempt != attempt || !q->busy) return;
  q->busy = false;
  ++q->attempt;
  if (q->migrating) return;  // the migration's end sends it again
  Op& op = q->sq.front();
  if (++op.retries > q->attrs.retry_cnt) {
    complete_head(qpn, WcStatus::kRetryExceeded);
    to_error(qpn, false);
    return;
  }
  send_attempt(qpn);
}

void Fabric::complete_head(Qpn qpn, WcStatus status) {
  Qp* q = qp(qpn);
  if (!q || q->sq.empty()) return;
  const Op op = q->sq.front();
  q->sq.pop_front();
  deliver(SimCompletion{q->owner, qpn, std::nullopt, op.wr.wr_id, wc_opcode_of(op.wr.opcode),
                        status, status == WcStatus::kSuccess ? op.wr.length : 0});
}

void Fabric::to_error(Qpn qpn, bool announce) {
  Qp* q = qp(qpn);
  if (!q || q->state == QpState::kError) return;
  q->state = QpState::kError;
  q->busy = false;
  q->migrating = false;
  ++q->attempt;
  flush(*q, qpn);
  note("qp " + std::to_string(qpn) + " error");
  if (announce) async(AsyncType::kQpFatal, q->node, qpn, q->owner);
}

void Fabric::flush(Qp& q, Qpn qpn) {
  for (const Op& op : q.sq) {
    deliver(SimCompletion{q.owner, qpn, std::nullopt, op.wr.wr_id, wc_opcode_of(op.wr.opcode),
                          WcStatus::kFlushed, 0});
  }
  for (const Recv& r : q.rq) {
    deliver(
        SimCompletion{q.owner, qpn, std::nullopt, r.wr_id, WcOpcode::kRecv, WcStatus::kFlushed, 0});
  }
  q.sq.clear();
  q.rq.clear();
}

void Fabric::start_migration(Qpn qpn) {
  Qp* q = qp(qpn);
  if (!q || q->state != QpState::kRts || q->migrating || !q->alt) return;
  if (path_up(q->node, q->remote_node, q->path)) return;   // the path came back in time
  if (!path_up(q->node, q->remote_node, *q->alt)) return;  // nowhere to go: RC retries decide
  q->migrating = true;
  q->busy = false;
  ++q->attempt;  // the attempt in flight is abandoned, not counted
  async(AsyncType::kMigrationStarted, q->node, qpn, q->owner);
  clock_.after(config_.migration_time, [this, qpn] {
    Qp* m = qp(qpn);
    if (!m || !m->migrating) return;
    m->migrating = false;
    const bool ok = path_up(m->node, m->remote_node, *m->alt);
    if (ok) m->path = *m->alt;
    m->alt.reset();
    async(ok ? AsyncType::kPathMigrated : AsyncType::kPathMigError, m->node, qpn, m->owner);
    kick(qpn);
  });
}

void Fabric::deliver(const SimCompletion& c) {
  if (c.owner != 0 && !alive(c.owner)) return;  // nobody polls a dead process's CQ
  note("wc qp " + std::to_string(c.qpn) + " wr " + std::to_string(c.wr_id) + " " +
       std::string(rdmap::wc_status_name(c.status)));
  // Handlers run as their own event: they may call back into the fabric freely.
  clock_.after(Nanos{0}, [this, c] {
    if (completion_handler_) completion_handler_(c);
  });
}

void Fabric::async(AsyncType type, NodeId node, Qpn qpn, Pid pid) {
  note(std::string(async_type_name(type)) + " node " + std::to_string(node) + " qp " +
       std::to_string(qpn) + " pid " + std::to_string(pid));
  const AsyncEvent e{type, node, qpn, pid};
  clock_.after(Nanos{0}, [this, e] {
    if (async_handler_) async_handler_(e);
  });
}

void Fabric::note(std::string_view line) {
  const auto t = std::to_string(clock_.now().time_since_epoch().count());
  auto mix = [this](std::string_view s) {
    for (unsigned char c : s) {
      hash_ ^= c;
      hash_ *= 0x100000001b3ULL;
    }
  };
  mix(t);
  mix(" ");
  mix(line);
  mix("\n");
  if (tracing_) trace_.push_back(t + "ns " + std::string(line));
}

}  // namespace rdma_interop::sim
