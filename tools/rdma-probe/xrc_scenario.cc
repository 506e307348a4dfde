#include "tools/rdma-probe/xrc_scenario.h"

#include <algorithm>
#include <map>
#include <set>

#include "core/sim/fabric.h"
#include "core/sim/random.h"
#include "core/sim/xrc_node.h"

namespace rdma_interop::probe {

// The scenario is written in the simulator's vocabulary (Fabric, NodeId, Qpn, TimePoint...).
using namespace sim;

namespace {

using std::chrono::milliseconds;

constexpr std::size_t kMaxTqps = 12;
constexpr const char* kDomainNames[] = {"/dev/shm/xrc-a", "/dev/shm/xrc-b", "/dev/shm/xrc-c"};
// Timer callbacks land on the deadline itself; this covers events queued at the same instant.
constexpr Nanos kSlack = milliseconds(1);

std::string at(TimePoint t) {
  return "t=" +
         std::to_string(std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count()) +
         "ms";
}

// The seed's probe settings: the first thing a run draws from its generator.
xrc::ProbeConfig draw_probe(Random& rng) {
  xrc::ProbeConfig p;
  p.kind = rng.chance(50) ? xrc::ProbeKind::kZeroLengthRead : xrc::ProbeKind::kInvalidRkeyRead;
  p.interval = milliseconds(rng.between(50, 300));
  p.timeout = milliseconds(rng.between(static_cast<std::uint64_t>(p.interval.count() / 2),
                                       static_cast<std::uint64_t>(p.interval.count())));
  p.retries = static_cast<std::uint32_t>(rng.between(0, 3));
  p.migration_grace = milliseconds(rng.between(0, 500));
  return p;
}

class Scenario {
 public:
  explicit Scenario(const XrcScenarioOptions& o)
      : options_(o), rng_(o.seed), probe_(o.probe ? *o.probe : draw_probe(rng_)) {
    fabric_.set_tracing(o.trace);
    receiver_ = fabric_.add_node();
    const auto senders = rng_.between(2, 4);
    for (std::uint64_t i = 0; i < senders; ++i) {
      const NodeId n = fabric_.add_node();
      fabric_.link(receiver_, n, 2);
      sender_nodes_.push_back(n);
    }
    node_.emplace(fabric_, receiver_, probe_);
    fabric_.on_completion([this](const SimCompletion& c) { on_completion(c); });
    fabric_.on_async([this](const AsyncEvent& e) { on_async(e); });
    node_->on_action([this](const xrc::XrcAction& a) { on_action(a); });
    bound_ = xrc::detection_bound(probe_);
  }

  XrcScenarioResult run() {
    // A node already in use: a few processes holding domains, a few target QPs.
    const auto first_processes = rng_.between(1, 3);
    for (std::uint64_t i = 0; i < first_processes; ++i) new_process();
    const auto first_tqps = rng_.between(1, 4);
    for (std::uint64_t i = 0; i < first_tqps; ++i) create_tqp();
    refresh();
    snapshot_if_busiest();
    const TimePoint end = TimePoint{} + milliseconds(rng_.between(2000, 6000));
    while (ok() && fabric_.now() < end) {
      const TimePoint next = fabric_.now() + milliseconds(rng_.between(5, 80));
      fabric_.clock().run_until(next);
      if (!ok()) break;
      step();
      refresh();
      snapshot_if_busiest();
    }
    if (ok()) drain();
    return finish();
  }

 private:
  struct TqpModel {
    std::map<Pid, std::uint32_t> refs;
    xrc::DomainId domain = 0;
    Pid sender = 0;
    NodeId sender_node = 0;
    Qpn ini = 0;
    std::optional<TimePoint> refs_zero_at;  // when the last reference went
    std::optional<TimePoint> gone_at;       // the sender died, crashed or disconnected
    bool disconnected = false;
    std::optional<TimePoint> answerable_since;
    std::set<Qpn> migrating;
    std::optional<TimePoint> last_migration_end;
    std::optional<TimePoint> reaped_at;
  };
  struct RProcess {
    std::map<xrc::DomainId, std::uint32_t> domains;
    std::map<Qpn, std::uint32_t> tqps;
  };

  bool ok() const { return violation_.empty(); }
  void fail(const std::string& why) {
    if (ok()) violation_ = at(fabric_.now()) + ": " + why;
  }
  void note(const std::string& s) { fabric_.note("scenario: " + s); }

  template <class Map>
  auto pick(Map& m) -> decltype(m.begin()) {
    if (m.empty()) return m.end();
    auto it = m.begin();
    std::advance(it, static_cast<long>(rng_.below(m.size())));
    return it;
  }

  // ---- the random schedule ----------------------------------------------------------------

  void step() {
    ++actions_;
    switch (rng_.below(20)) {
      case 0:
      case 1:
        new_process();
        break;
      case 2:
      case 3:
        create_tqp();
        break;
      case 4:
      case 5:
        open_tqp();
        break;
      case 6:
      case 7:
        close_tqp();
        break;
      case 8:
        close_domain();
        break;
      case 9:
        kill_process();
        break;
      case 10:
      case 11:
      case 12:
        send_traffic();
        break;
      case 13:
        kill_sender();
        break;
      case 14:
        disconnect_sender();
        break;
      case 15:
      case 16:
        flip_path();
        break;
      case 17:
        partition_or_heal();
        break;
      case 18:
        if (rng_.chance(10)) crash_sender_node();
        break;
      default:
        break;  // a quiet moment
    }
  }

  void new_process() {
    const Pid pid = fabric_.spawn(receiver_);
    const char* name = kDomainNames[rng_.below(3)];
    auto d = node_->open_domain(pid, name);
    if (!d) return fail("open_domain failed for a live process");
    processes_[pid].domains[*d]++;
    note("pid " + std::to_string(pid) + " opens " + name);
  }

  void create_tqp() {
    if (live_tqps() >= kMaxTqps) return;
    auto p = pick(processes_);
    if (p == processes_.end() || p->second.domains.empty()) return;
    const xrc::DomainId domain = pick(p->second.domains)->first;
    const NodeId sn = sender_nodes_[rng_.below(sender_nodes_.size())];
    if (!fabric_.node_up(sn)) return;
    const Pid sender = fabric_.spawn(sn);
    const Qpn ini = fabric_.create_xrc_ini(sender);
    auto tqp = node_->create_target_qp(p->first, domain, sender, ini);
    if (!tqp) {
      // Only an unreachable sender node may refuse (the CM exchange cannot complete).
      if (fabric_.reachable(receiver_, sn))
        fail("create_target_qp failed with the sender reachable");
      fabric_.kill(sender);
      return;
    }
    TqpModel m;
    m.refs[p->first] = 1;
    m.domain = domain;
    m.sender = sender;
    m.sender_node = sn;
    m.ini = ini;
    tqps_[*tqp] = m;
    p->second.tqps[*tqp]++;
    note("pid " + std::to_string(p->first) + " creates tqp " + std::to_string(*tqp) +
         " for sender pid " + std::to_string(sender));
  }

  void open_tqp() {
    auto p = pick(processes_);
    if (p == processes_.end()) return;
    std::vector<Qpn> candidates;
    for (const auto& [num, m] : tqps_) {
      if (!m.reaped_at && p->second.domains.count(m.domain)) candidates.push_back(num);
    }
    if (candidates.empty()) return;
    const Qpn tqp = candidates[rng_.below(candidates.size())];
    if (!node_->open_target_qp(p->first, tqp)) return fail("ibv_open_qp of a live TQP refused");
    tqps_[tqp].refs[p->first]++;
    tqps_[tqp].refs_zero_at.reset();
    p->second.tqps[tqp]++;
    note("pid " + std::to_string(p->first) + " opens tqp " + std::to_string(tqp));
  }

  void close_tqp() {
    auto p = pick(processes_);
    if (p == processes_.end() || p->second.tqps.empty()) return;
    auto t = pick(p->second.tqps);
    const Qpn tqp = t->first;
    if (--t->second == 0) p->second.tqps.erase(t);
    drop_ref(tqp, p->first, 1);
    if (!node_->close_target_qp(p->first, tqp)) fail("closing a held TQP handle was refused");
    note("pid " + std::to_string(p->first) + " closes tqp " + std::to_string(tqp));
  }

  void close_domain() {
    auto p = pick(processes_);
    if (p == processes_.end() || p->second.domains.empty()) return;
    auto d = pick(p->second.domains);
    const xrc::DomainId domain = d->first;
    if (--d->second == 0) p->second.domains.erase(d);
    if (!node_->close_domain(p->first, domain)) fail("closing a held domain was refused");
    note("pid " + std::to_string(p->first) + " closes domain " + std::to_string(domain));
  }

  void kill_process() {
    auto p = pick(processes_);
    if (p == processes_.end()) return;
    const Pid pid = p->first;
    for (const auto& [tqp, n] : p->second.tqps) drop_ref(tqp, pid, n);
    processes_.erase(p);
    note("kill pid " + std::to_string(pid));
    fabric_.kill(pid);
  }

  void drop_ref(Qpn tqp, Pid pid, std::uint32_t n) {
    TqpModel& m = tqps_.at(tqp);
    auto r = m.refs.find(pid);
    if (r == m.refs.end()) return;
    r->second -= std::min(r->second, n);
    if (r->second == 0) m.refs.erase(r);
    if (m.refs.empty()) m.refs_zero_at = fabric_.now();
  }

  std::vector<Qpn> live_senders() const {
    std::vector<Qpn> out;
    for (const auto& [num, m] : tqps_) {
      if (!m.gone_at && !m.reaped_at) out.push_back(num);
    }
    return out;
  }

  void send_traffic() {
    auto senders = live_senders();
    if (senders.empty()) return;
    const Qpn tqp = senders[rng_.below(senders.size())];
    const TqpModel& m = tqps_.at(tqp);
    auto srq = node_->srq_of(m.domain);
    if (!srq || fabric_.qp_state(m.ini) != QpState::kRts) return;
    fabric_.post_send(m.ini, SimWr{++wr_id_, rdmap::WrOpcode::kSend, 512, 0, *srq});
  }

  void kill_sender() {
    auto senders = live_senders();
    if (senders.empty()) return;
    const Qpn tqp = senders[rng_.below(senders.size())];
    const Pid sender = tqps_.at(tqp).sender;
    note("kill sender pid " + std::to_string(sender));
    for (auto& [num, m] : tqps_) {
      if (m.sender == sender && !m.gone_at) m.gone_at = fabric_.now();
    }
    fabric_.kill(sender);
  }

  void disconnect_sender() {
    auto senders = live_senders();
    if (senders.empty()) return;
    const Qpn tqp = senders[rng_.below(senders.size())];
    TqpModel& m = tqps_.at(tqp);
    m.gone_at = fabric_.now();
    m.disconnected = true;
    note("sender of tqp " + std::to_string(tqp) + " disconnects");
    fabric_.destroy_qp(m.ini);
    fabric_.kill(m.sender);
    node_->sender_disconnected(tqp);
  }

  void flip_path() {
    const NodeId sn = sender_nodes_[rng_.below(sender_nodes_.size())];
    const unsigned path = static_cast<unsigned>(rng_.below(2));
    fabric_.set_path_up(receiver_, sn, path, !fabric_.path_up(receiver_, sn, path));
  }

  void partition_or_heal() {
    const NodeId sn = sender_nodes_[rng_.below(sender_nodes_.size())];
    if (fabric_.reachable(receiver_, sn)) {
      fabric_.partition(receiver_, sn);
    } else {
      fabric_.heal(receiver_, sn);
    }
  }

  void crash_sender_node() {
    const NodeId sn = sender_nodes_[rng_.below(sender_nodes_.size())];
    if (!fabric_.node_up(sn)) return;
    for (auto& [num, m] : tqps_) {
      if (m.sender_node == sn && !m.gone_at) m.gone_at = fabric_.now();
    }
    fabric_.crash(sn);
  }

  std::size_t live_tqps() const {
    return static_cast<std::size_t>(std::count_if(
        tqps_.begin(), tqps_.end(), [](const auto& kv) { return !kv.second.reaped_at; }));
  }

  // ---- the checker's own view ----------------------------------------------------------

  // Could a probe of this TQP's sender be answered now?
  bool answerable(const TqpModel& m, Qpn tqp) const {
    if (m.gone_at || !fabric_.alive(m.sender) || !fabric_.node_up(m.sender_node)) return false;
    if (!m.migrating.empty()) return true;
    auto probe = node_->probe_qp_of(tqp);
    if (probe && fabric_.qp_state(*probe) == QpState::kRts) {
      return fabric_.path_up(receiver_, m.sender_node, *fabric_.qp_path(*probe));
    }
    return fabric_.reachable(receiver_, m.sender_node);
  }

  void refresh() {
    const TimePoint now = fabric_.now();
    // The engine's decisions go into the trace (and its hash) as they happen.
    for (auto& e : node_->engine().take_events()) {
      fabric_.note("xrc: " + e.to_string());
      if (options_.trace) events_.push_back(std::move(e));
    }
    for (auto& [num, m] : tqps_) {
      if (m.reaped_at) continue;
      const bool a = answerable(m, num);
      if (a && !m.answerable_since) m.answerable_since = now;
      if (!a) m.answerable_since.reset();
    }
  }

  void on_completion(const SimCompletion& c) {
    node_->handle(c);
    refresh();
  }

  void on_async(const AsyncEvent& e) {
    if (e.node == receiver_ &&
        (e.type == AsyncType::kMigrationStarted || e.type == AsyncType::kPathMigrated ||
         e.type == AsyncType::kPathMigError)) {
      for (auto& [num, m] : tqps_) {
        const bool mine = e.qpn == num || node_->probe_qp_of(num) == e.qpn;
        if (!mine || m.reaped_at) continue;
        if (e.type == AsyncType::kMigrationStarted) {
          m.migrating.insert(e.qpn);
        } else if (m.migrating.erase(e.qpn) && m.migrating.empty()) {
          m.last_migration_end = fabric_.now();
        }
      }
    }
    node_->handle(e);
    refresh();
  }

  void on_action(const xrc::XrcAction& a) {
    if (a.type != xrc::XrcActionType::kDestroyTqp) return;
    ++reaps_checked_;
    const TimePoint now = fabric_.now();
    auto it = tqps_.find(a.tqp);
    if (it == tqps_.end()) return fail("reaped tqp " + std::to_string(a.tqp) + " it never made");
    TqpModel& m = it->second;
    const std::string who = "tqp " + std::to_string(a.tqp);
    if (m.reaped_at) return fail(who + " reaped twice");
    m.reaped_at = now;
    if (fabric_.qp_exists(a.tqp)) fail(who + ": the engine's destroy did not destroy it");
    if (!m.refs.empty()) {
      return fail(who + " reaped while process " + std::to_string(m.refs.begin()->first) +
                  " holds it");
    }
    if (!m.migrating.empty()) return fail(who + " reaped during a path migration");
    if (m.last_migration_end && now < *m.last_migration_end + probe_.migration_grace) {
      return fail(who + " reaped within the grace after a migration");
    }
    // answerable() is read live: a change not yet seen by refresh() only shortens the window.
    if (answerable(m, a.tqp) && m.answerable_since && *m.answerable_since + bound_ <= now) {
      return fail(who + " reaped with its sender answerable since " + at(*m.answerable_since));
    }
  }

  std::optional<TimePoint> deadline(const TqpModel& m) const {
    if (!m.gone_at || !m.refs.empty() || !m.migrating.empty()) return std::nullopt;
    if (m.disconnected) {
      // No probing needed: it goes when the last reference and any migration grace do.
      TimePoint d = std::max(*m.gone_at, m.refs_zero_at.value_or(*m.gone_at));
      if (m.last_migration_end) d = std::max(d, *m.last_migration_end + probe_.migration_grace);
      return d + kSlack;
    }
    TimePoint start = *m.gone_at;
    if (m.last_migration_end)
      start = std::max(start, *m.last_migration_end + probe_.migration_grace);
    TimePoint d = start + bound_;
    if (m.refs_zero_at) d = std::max(d, *m.refs_zero_at);
    return d + kSlack;
  }

  void snapshot_if_busiest() {
    if (node_->engine().tqp_count() > busiest_.tqps.size()) busiest_ = node_->engine().snapshot();
  }

  // ---- the end -----------------------------------------------------------------------------

  void drain() {
    note("drain: every sender and process goes");
    for (auto& [num, m] : tqps_) {
      if (!m.gone_at) m.gone_at = fabric_.now();
      fabric_.kill(m.sender);
    }
    refresh();
    std::vector<Pid> pids;
    for (const auto& kv : processes_) pids.push_back(kv.first);
    for (Pid pid : pids) {
      for (const auto& [tqp, n] : processes_.at(pid).tqps) drop_ref(tqp, pid, n);
      fabric_.kill(pid);
    }
    processes_.clear();
    const TimePoint until =
        fabric_.now() + bound_ + probe_.migration_grace + milliseconds(200) + milliseconds(1000);
    while (ok() && fabric_.now() < until && fabric_.clock().run_next()) {
      if (fabric_.now() > until) break;
    }
    if (!ok()) return;
    for (const auto& [num, m] : tqps_) {
      const std::string who = "tqp " + std::to_string(num);
      auto d = deadline(m);
      if (!m.reaped_at) return fail(who + " was never reaped (sender gone " + at(*m.gone_at) + ")");
      if (d && *m.reaped_at > *d) {
        return fail(who + " reaped at " + at(*m.reaped_at) + ", after its bound " + at(*d));
      }
    }
    if (node_->engine().tqp_count() != 0) fail("the engine still holds TQPs");
    if (node_->engine().domain_count() != 0) fail("the engine still holds domains");
    if (fabric_.tgt_qp_count(receiver_) != 0) fail("target QPs leaked on the node");
    if (fabric_.xrcd_count(receiver_) != 0) fail("XRC domains leaked on the node");
    if (node_->destroy_failures() != 0) fail("a destroy the engine asked for failed");
  }

  XrcScenarioResult finish() {
    XrcScenarioResult r;
    r.seed = options_.seed;
    r.ok = ok();
    r.violation = violation_;
    r.trace_hash = fabric_.trace_hash();
    r.trace = fabric_.trace();
    r.probe = probe_;
    r.counters = node_->engine().counters();
    r.busiest = busiest_;
    r.actions = actions_;
    r.reaps_checked = reaps_checked_;
    r.fabric_events = fabric_.clock().executed();
    r.virtual_seconds = std::chrono::duration<double>(fabric_.now().time_since_epoch()).count();
    refresh();
    r.events = std::move(events_);
    return r;
  }

  XrcScenarioOptions options_;
  Random rng_;
  xrc::ProbeConfig probe_;
  Fabric fabric_;
  NodeId receiver_ = 0;
  std::vector<NodeId> sender_nodes_;
  std::optional<XrcNode> node_;
  Nanos bound_{};
  std::map<Pid, RProcess> processes_;
  std::map<Qpn, TqpModel> tqps_;
  std::vector<xrc::XrcEvent> events_;
  std::uint64_t wr_id_ = 0;
  std::uint64_t actions_ = 0;
  std::uint64_t reaps_checked_ = 0;
  xrc::XrcSnapshot busiest_;
  std::string violation_;
};

}  // namespace

XrcScenarioResult run_xrc_scenario(const XrcScenarioOptions& options) {
  return Scenario(options).run();
}

xrc::ProbeConfig xrc_scenario_probe(std::uint64_t seed) {
  Random rng(seed);
  return draw_probe(rng);
}

}  // namespace rdma_interop::probe
