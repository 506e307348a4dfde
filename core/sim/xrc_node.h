// xrc_node.h - the XRC lifetime engine at work on one node of the simulated fabric.
//
// What a node daemon does over rdma-core, done over sim::Fabric: it owns the node's XRC
// domains and target QPs on behalf of its processes, turns the engine's actions into fabric
// calls (probe Reads on a probe QP pair per sender, probe QP recycling, destroying TQPs and
// domains) and the fabric's events into engine calls (process exits, path migrations, probe
// completions, the senders' traffic). The daemon is a process of the node itself, so it
// outlives the applications; each domain gets one SRQ of the daemon's, kept full of
// receives, which the senders Send into.
//
// Process-facing calls mirror verbs: open_domain ~ ibv_open_xrcd(fd, O_CREAT),
// create_target_qp ~ ibv_create_qp_ex(IBV_QPT_XRC_RECV) plus the CM exchange with the sender,
// open_target_qp ~ ibv_open_qp, close_* ~ ibv_destroy_qp / ibv_close_xrcd of a handle.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/sim/fabric.h"
#include "core/xrc/xrc_lifetime.h"

namespace rdma_interop::sim {

class XrcNode {
 public:
  // `probe` must be valid (xrc::probe_config_error): the caller checked it.
  XrcNode(Fabric& fabric, NodeId node, const xrc::ProbeConfig& probe);
  XrcNode(const XrcNode&) = delete;
  XrcNode& operator=(const XrcNode&) = delete;

  NodeId node() const { return node_; }
  Pid daemon() const { return daemon_; }

  std::optional<xrc::DomainId> open_domain(Pid process, std::string_view name);
  bool close_domain(Pid process, xrc::DomainId domain);
  // A target QP in `domain` for the sender process `sender`, whose XRC initiator QP
  // `sender_ini` is connected to it, with the probe QP pair between the daemon and the
  // sender. Returns the target QP's number, or nothing (domain not held, sender unreachable).
  std::optional<Qpn> create_target_qp(Pid process, xrc::DomainId domain, Pid sender,
                                      Qpn sender_ini);
  bool open_target_qp(Pid process, Qpn tqp);
  bool close_target_qp(Pid process, Qpn tqp);
  // The sender closed its connection in order (a CM DREQ).
  void sender_disconnected(Qpn tqp);
  // The SRQ of the domain a sender Sends into (SimWr::remote_srq).
  std::optional<SrqNum> srq_of(xrc::DomainId domain) const;

  // Feed every fabric event here (the node ignores other nodes' business).
  void handle(const AsyncEvent& e);
  void handle(const SimCompletion& c);

  // The daemon's probe QP for a target QP (while the TQP lives).
  std::optional<Qpn> probe_qp_of(Qpn tqp) const;
  // Destroys the engine asked for that the fabric refused (a leak or a double destroy): 0.
  std::uint64_t destroy_failures() const { return destroy_failures_; }

  // Called after each engine action the node carried out.
  void on_action(std::function<void(const xrc::XrcAction&)> f) { action_hook_ = std::move(f); }
  xrc::XrcLifetime& engine() { return engine_; }
  const xrc::XrcLifetime& engine() const { return engine_; }

 private:
  struct ProbePair {
    Qpn local = 0;            // the daemon's probe QP
    Qpn remote = 0;           // the sender's probe responder QP (dies with the sender)
    std::uint64_t wr_id = 0;  // the probe out now, 0 when none
    bool recycling = false;
    std::set<Qpn> migrating;  // the TQP's QPs (target, probe) now migrating
  };

  void pump();  // carry out the engine's actions, then re-arm its timer
  void issue_probe(Qpn tqp);
  void recycle(Qpn tqp, bool retry = false);
  void migration_event(Qpn tqp, Qpn qpn, bool started);
  std::optional<Qpn> tqp_of_probe(Qpn probe_qp) const;

  Fabric& fabric_;
  NodeId node_;
  Pid daemon_;
  xrc::XrcLifetime engine_;
  std::map<xrc::DomainId, XrcdId> xrcds_;
  std::map<xrc::DomainId, SrqNum> srqs_;
  std::map<Qpn, ProbePair> probes_;  // by target QP
  std::uint64_t next_wr_id_ = 1;
  std::uint32_t invalid_rkey_ = 0xFFFFFF00;  // never issued by Fabric::register_mr
  std::uint64_t destroy_failures_ = 0;
  std::optional<std::uint64_t> timer_;
  std::optional<TimePoint> timer_at_;
  std::function<void(const xrc::XrcAction&)> action_hook_;
};

}  // namespace rdma_interop::sim
