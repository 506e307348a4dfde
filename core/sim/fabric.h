// fabric.h - a deterministic simulated InfiniBand fabric: what TCP and the namespace lab
// cannot show.
//
// Nodes joined by up to two paths each (a primary and an alternate, for APM), processes on
// nodes, memory regions, RC queue pairs, and XRC domains, target QPs, initiator QPs and SRQs,
// with the IB behaviours the engines have to survive:
//   - RC transport retries: a request with no answer is sent again after the local ACK
//     timeout, retry_cnt times, then completes IBV_WC_RETRY_EXC_ERR and the QP goes to error;
//   - RNR NAK: a Send that finds no receive is NAKed, retried after min_rnr_timer, rnr_retry
//     times (7: for ever), then IBV_WC_RNR_RETRY_EXC_ERR;
//   - remote access error: a Read or Write with an rkey the responder's process did not
//     issue, or beyond its region, is NAKed; it is a class C error, so the requester and the
//     responder QP both go to error (as rxe and hardware do);
//   - a zero-length Read or Write is not rkey-checked (IB C9-88);
//   - APM: when a QP's path fails and an alternate is armed and up, the QP migrates after
//     the ACK timeout that noticed it (kMigrationStarted), taking migration_time
//     (kPathMigrated), or fails to (kPathMigError); requests wait, they do not fail;
//   - node crash, process exit (its QPs, SRQs and regions go; XRC target QPs and domains do
//     not, they belong to the domain), link partitions and healing.
// Nothing is random here: chance belongs to the scenario that drives the fabric (random.h),
// so a scenario's seed replays the same run. Every step goes into a trace hash (and, when
// tracing, a text trace) so two runs of a seed can be compared.
//
// The fabric runs in virtual time on its EventQueue; callers schedule their own events on it.
// Completions and async events go to handlers set by the caller, in virtual time order.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/rdmap/work_request.h"
#include "core/sim/event_queue.h"

namespace rdma_interop::sim {

using NodeId = std::uint32_t;
using Pid = std::uint64_t;
using Qpn = std::uint32_t;
using SrqNum = std::uint32_t;
using XrcdId = std::uint32_t;

struct FabricConfig {
  Nanos hop_latency{std::chrono::microseconds(5)};
  Nanos migration_time{std::chrono::milliseconds(20)};
};

struct RcAttrs {
  std::uint8_t retry_cnt = 7;                       // 0..7
  std::uint8_t rnr_retry = 7;                       // 0..7; 7 retries for ever (IB)
  Nanos ack_timeout{std::chrono::milliseconds(8)};  // 4.096 us x 2^timeout on hardware
  Nanos min_rnr_timer{std::chrono::milliseconds(1)};
};

enum class QpType : std::uint8_t { kRc, kXrcIni, kXrcTgt };
enum class QpState : std::uint8_t { kIdle, kRts, kError };  // kIdle: created, not connected

struct SimWr {
  std::uint64_t wr_id = 0;
  rdmap::WrOpcode opcode = rdmap::WrOpcode::kSend;  // kSend, kRdmaWrite or kRdmaRead
  std::uint32_t length = 0;
  std::uint32_t rkey = 0;            // Read, Write
  std::optional<SrqNum> remote_srq;  // XRC initiator Send: the target's SRQ
};

struct SimCompletion {
  Pid owner = 0;  // the process whose CQ gets it
  Qpn qpn = 0;
  std::optional<SrqNum> srq;  // receive through an SRQ
  std::uint64_t wr_id = 0;
  rdmap::WcOpcode opcode = rdmap::WcOpcode::kSend;
  rdmap::WcStatus status = rdmap::WcStatus::kSuccess;
  std::uint32_t byte_len = 0;
};

enum class AsyncType : std::uint8_t {
  kMigrationStarted,  // the QP's path failed and it is moving to its armed alternate
  kPathMigrated,      // IBV_EVENT_PATH_MIG
  kPathMigError,      // IBV_EVENT_PATH_MIG_ERR: the alternate was down too
  kQpFatal,           // the QP went to error (the responder side of a class C NAK)
  kProcessExited,     // what a pidfd tells the node
};
std::string_view async_type_name(AsyncType t);

struct AsyncEvent {
  AsyncType type = AsyncType::kQpFatal;
  NodeId node = 0;
  Qpn qpn = 0;  // QP events
  Pid pid = 0;  // kProcessExited; the QP's owner otherwise (0 for XRC target QPs)
};

class Fabric {
 public:
  explicit Fabric(const FabricConfig& config = {}) : config_(config) {}
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  EventQueue& clock() { return clock_; }
  TimePoint now() const { return clock_.now(); }
  // What the fabric was built with (ib_cm.h sends its CM messages with hop_latency).
  const FabricConfig& config() const { return config_; }
  // RNR NAKs responders have sent so far (each counted when sent, whether or not it arrives).
  std::uint64_t rnr_naks() const { return rnr_naks_; }
  void on_completion(std::function<void(const SimCompletion&)> handler) {
    completion_handler_ = std::move(handler);
  }
  void on_async(std::function<void(const AsyncEvent&)> handler) {
    async_handler_ = std::move(handler);
  }

  // Topology and faults.
  NodeId add_node();
  // Joins two nodes by `paths` (1 or 2) paths, all up. Path 0 is every new QP's primary.
  void link(NodeId a, NodeId b, unsigned paths = 2);
  void set_path_up(NodeId a, NodeId b, unsigned path, bool up);
  void partition(NodeId a, NodeId b);  // every path down
  void heal(NodeId a, NodeId b);       // every path up
  // The node stops: its processes, QPs, SRQs, regions and XRC domains vanish, unannounced.
  void crash(NodeId node);
  bool node_up(NodeId node) const;
  // Some path between a and b is up and both nodes are.
  bool reachable(NodeId a, NodeId b) const;
  bool path_up(NodeId a, NodeId b, unsigned path) const;

  // Processes. kill(): its RC and XRC initiator QPs, SRQs and regions are destroyed (the
  // peers see nothing: packets to a QP that is gone are dropped), and the node gets
  // kProcessExited.
  Pid spawn(NodeId node);
  void kill(Pid pid);
  bool alive(Pid pid) const;
  NodeId node_of(Pid pid) const;

  std::uint32_t register_mr(Pid pid, std::uint32_t length);  // the rkey

  // Queue pairs. Owners of RC and initiator QPs are processes; a target QP belongs to its
  // XRC domain (create_xrc_tgt) and is destroyed only by destroy_qp.
  Qpn create_rc_qp(Pid owner, const RcAttrs& attrs = {});
  Qpn create_xrc_ini(Pid owner, const RcAttrs& attrs = {});
  // Connects two idle QPs (RC-RC or initiator-target) on linked nodes, as a completed CM
  // exchange would: primary = the first path up, alternate = another up path, armed.
  // False (nothing changes) when either is missing or not idle, or no path is up.
  bool connect(Qpn a, Qpn b);
  // Reconnects a connected pair whose QPs went to error (a probe QP pair's recycling): both
  // back to RTS with empty queues. False unless both QPs exist and a path is up. A QP that
  // was migrating reports kPathMigError: the reset ended its migration.
  bool reconnect(Qpn a, Qpn b);
  bool destroy_qp(Qpn qpn);  // outstanding requests complete flushed (if the owner lives)
  bool qp_exists(Qpn qpn) const;
  std::optional<QpState> qp_state(Qpn qpn) const;
  std::optional<unsigned> qp_path(Qpn qpn) const;
  bool qp_migrating(Qpn qpn) const;

  // XRC. Domains are found by name per node (ibv_open_xrcd with O_CREAT): opened ones are
  // returned again; a domain goes only with destroy_xrcd (when it holds no target QP).
  XrcdId open_xrcd(NodeId node, std::string_view name);
  bool destroy_xrcd(XrcdId xrcd);
  Qpn create_xrc_tgt(XrcdId xrcd, const RcAttrs& attrs = {});
  SrqNum create_xrc_srq(Pid owner, XrcdId xrcd);
  bool destroy_srq(SrqNum srq);
  std::size_t tgt_qp_count(NodeId node) const;
  std::size_t xrcd_count(NodeId node) const;

  // Work requests. Errors are immediate and synchronous (no QP, QP not RTS, bad opcode);
  // everything else completes through the completion handler.
  std::optional<std::string> post_send(Qpn qpn, const SimWr& wr);
  std::optional<std::string> post_recv(Qpn qpn, std::uint64_t wr_id, std::uint32_t length);
  std::optional<std::string> post_srq_recv(SrqNum srq, std::uint64_t wr_id, std::uint32_t length);

  // Every step so far, hashed (FNV-1a); the text only while tracing.
  void set_tracing(bool on) { tracing_ = on; }
  void note(std::string_view line);  // scenarios add their own steps
  std::uint64_t trace_hash() const { return hash_; }
  const std::vector<std::string>& trace() const { return trace_; }

 private:
  struct Path {
    bool up = true;
  };
  struct Link {
    std::vector<Path> paths;
  };
  struct Node {
    bool up = true;
  };
  struct Process {
    NodeId node = 0;
    bool alive = true;
  };
  struct Mr {
    Pid owner = 0;
    std::uint32_t length = 0;
  };
  struct Recv {
    std::uint64_t wr_id = 0;
    std::uint32_t length = 0;
  };
  struct Op {
    SimWr wr;
    std::uint64_t seq = 0;  // per requester QP: duplicates are recognised by it
    unsigned retries = 0;   // transport retries used
    unsigned rnr_retries = 0;
  };
  struct Qp {
    QpType type = QpType::kRc;
    QpState state = QpState::kIdle;
    Pid owner = 0;  // 0 for target QPs
    NodeId node = 0;
    XrcdId xrcd = 0;  // target QPs
    RcAttrs attrs;
    std::optional<Qpn> peer{};  // {}: designated initializers elsewhere must not warn
    NodeId remote_node = 0;
    unsigned path = 0;
    std::optional<unsigned> alt{};  // armed alternate path
    bool migrating = false;
    std::deque<Op> sq{};
    std::deque<Recv> rq{};
    std::uint64_t next_seq = 1;
    bool busy = false;               // the head request is on the wire or waiting to retry
    std::uint64_t attempt = 0;       // id of the attempt in flight; stale events ignore
    std::uint64_t executed_seq = 0;  // responder: highest request executed
  };
  struct Srq {
    Pid owner = 0;
    XrcdId xrcd = 0;
    std::deque<Recv> rq;
  };
  struct Xrcd {
    NodeId node = 0;
    std::string name;
  };
  enum class Answer : std::uint8_t { kAck, kRnr, kAccessError, kInvalidRequest };

  Qpn create_owned_qp(QpType type, Pid owner, const RcAttrs& attrs);  // RC and initiator QPs
  Link* link_of(NodeId a, NodeId b);
  const Link* link_of(NodeId a, NodeId b) const;
  Qp* qp(Qpn qpn);
  // The request of `requester` at the head of its send queue can reach its peer now.
  bool deliverable(Qpn requester_num, const Qp& requester) const;
  void retry_after(Qpn qpn, Nanos delay);
  void kick(Qpn qpn);  // start the head request if idle
  void send_attempt(Qpn qpn);
  void arrive(Qpn requester, std::uint64_t attempt);
  Answer execute(Qp& requester, Qp& responder, Qpn responder_num, const Op& op);
  void respond(Qpn requester, std::uint64_t attempt, Answer answer);
  void ack_timeout(Qpn qpn, std::uint64_t attempt);
  void complete_head(Qpn qpn, rdmap::WcStatus status);
  void to_error(Qpn qpn, bool announce);
  void flush(Qp& q, Qpn qpn);
  void deliver(const SimCompletion& c);
  void async(AsyncType type, NodeId node, Qpn qpn, Pid pid);
  void start_migration(Qpn qpn);

  FabricConfig config_;
  EventQueue clock_;
  std::vector<Node> nodes_;
  std::map<std::pair<NodeId, NodeId>, Link> links_;  // key: (min, max)
  std::map<Pid, Process> processes_;
  std::map<std::uint32_t, Mr> mrs_;
  std::map<Qpn, Qp> qps_;
  std::map<SrqNum, Srq> srqs_;
  std::map<XrcdId, Xrcd> xrcds_;
  Pid next_pid_ = 100;
  std::uint32_t next_rkey_ = 0x1000;
  Qpn next_qpn_ = 0x10;
  SrqNum next_srq_ = 1;
  XrcdId next_xrcd_ = 1;
  std::function<void(const SimCompletion&)> completion_handler_;
  std::function<void(const AsyncEvent&)> async_handler_;
  std::uint64_t rnr_naks_ = 0;
  bool tracing_ = false;
  std::vector<std::string> trace_;
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

}  // namespace rdma_interop::sim
