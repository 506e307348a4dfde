// ib_cm.h - the InfiniBand Communication Manager (IBTA ch. 12, as Linux's ib_cm does it) over
// the simulated fabric, in virtual time.
//
// One IbCm holds the CM agent of every node. CM messages (REQ, MRA, REP, RTU, REJ, DREQ,
// DREP) travel between nodes with the fabric's hop latency and are lost when no path between
// the nodes is up or either node is down, at sending or at arrival (MADs are unreliable
// datagrams: the CM's own timers and retries are what makes it work).
//
//   active                                  passive (a listener with a cm::ListenBacklog)
//   connect() -- REQ ---------------------> new: backlog engine; kDeliver -> request queue
//             <------------------ MRA ----- duplicate REQ while waiting or pending; or auto
//             <------------------ REP ----- accept() (the slot is freed at the decision)
//   Fabric::connect, established
//             -- RTU ---------------------> established
//
// Timers. Every message that wants an answer (REQ, REP, DREQ) is sent again after
// response_timeout, max_retries times, then the exchange fails (IB_CM_REQ_ERROR /
// IB_CM_REP_ERROR). An MRA moves the active side's current deadline to now + the MRA's
// service timeout (as ib_cm's ib_modify_mad does); it does not give retries back.
//
// The passive side and the backlog. There is no half-open phase in IB: a REQ arrives in one
// MAD, complete, so the listener calls on_tcp_accepted and on_request_complete together.
// Over the backlog, kReject answers REJ (consumer-defined, private data kBacklogFullMarker);
// kDrop answers nothing and the REQ waits in the engine; the active side's retries are then
// recognised by (active node, active comm id), not counted again, and answered with an MRA.
// A duplicate REQ after the REP is answered with the REP again (its RTU or our REP was lost).
// A request that waited past overflow_timeout is forgotten (a later REQ is a new request).
//
// Auto-MRA (CmConfig::auto_mra): a request delivered to the application (kPending) gets an MRA
// response_timeout / 2 after delivery (a REQ answered at once never sees one), then one every
// mra_service_timeout / 2 (each lands before the previous one's extension runs out) until the
// application decides or decision_timeout rejects it. So a slow application costs the active
// side no REQ retries. Requests waiting over the backlog (kDrop) get no auto-MRA: the listener
// says nothing until a retried REQ shows the active side is still there.
//
// Giving up. The active side that runs out of REQ retries sends REJ (reason timeout), as
// ib_destroy_cm_id does in REQ_SENT, so the listener frees the request's slot at once
// (counted pending_aborted / overflow_dropped) instead of at its own timeout. The passive
// side that runs out of REP retries (the RTU was lost each time: the lost-RTU half-open case)
// destroys its QP and sends REJ (timeout); an active side that was already established takes
// that REJ as the end of its connection (kPeerAbandoned) and destroys its QP too.
//
// QPs. connect() creates the active RC QP (the REQ carries its number); accept() creates the
// passive one (the REP carries it). The active side connects the pair with Fabric::connect
// when the REP arrives: the fabric has no RTR state, so the passive QP is usable before its
// RTU, as a real QP in RTR already receives. A closed connection's QP is destroyed.
//
// Not modelled: a crashed node's CM state (its messages are simply lost both ways), LAP/APR,
// SIDR, peer-to-peer REQs, comm-id reuse and timewait.
//
// Outcomes go to the event handler (each as its own event, in virtual time, so the handler may
// call back in) and are counted per node; every message sent and lost is counted per type.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/cm/listen_backlog.h"
#include "core/sim/fabric.h"
#include "core/util/expected.h"

namespace rdma_interop::sim {

using CmId = std::uint64_t;  // a connection end; also its local communication id
using ServiceId = std::uint64_t;
using ListenerId = std::uint32_t;

enum class CmMsgType : std::uint8_t { kReq, kMra, kRep, kRtu, kRej, kDreq, kDrep };
inline constexpr std::size_t kCmMsgTypes = 7;
std::string_view msg_name(CmMsgType t);  // "REQ", "MRA", ...

// REJ reasons used here, numbered as IBTA Table 112 (ib_cm's enum ib_cm_rej_reason).
enum class RejReason : std::uint8_t {
  kTimeout = 4,           // IB_CM_REJ_TIMEOUT: the sender gave up waiting
  kInvalidServiceId = 8,  // IB_CM_REJ_INVALID_SERVICE_ID: nobody listens
  kConsumerDefined = 28,  // IB_CM_REJ_CONSUMER_DEFINED: the application (or backlog full)
};

struct CmMessage {
  CmMsgType type = CmMsgType::kReq;
  NodeId from_node = 0;
  NodeId to_node = 0;
  CmId from = 0;             // the sender's local comm id
  CmId to = 0;               // the receiver's, 0 while unknown (REQ, an early REJ)
  ServiceId service = 0;     // REQ
  Qpn qpn = 0;               // REQ, REP: the sender's QP
  Nanos service_timeout{0};  // MRA: how much longer the receiver should wait
  RejReason reason = RejReason::kConsumerDefined;  // REJ
  bool backlog_full = false;                       // REJ: private data is cm::kBacklogFullMarker
};

enum class CmSide : std::uint8_t { kActive, kPassive };

// How a connection ended up. Each is counted once per connection end that reaches it, except
// that kEstablished may be followed by kDisconnected or kPeerAbandoned.
enum class CmOutcome : std::uint8_t {
  kEstablished,          // both: active at the REP (RTU sent), passive at the RTU
  kRejectedByApp,        // passive: our application rejected; active: the peer's did
  kRejectedBacklogFull,  // both: over the listener's backlog with policy kReject
  kRejectedNoListener,   // both: no listener for the service id (passive: no CmId exists)
  kRejectedExpired,      // both: the passive application did not decide in decision_timeout
  kTimedOut,             // active: no REP after 1 + max_retries REQs (REJ timeout sent)
  kDropped,              // passive: waited over the backlog (kDrop) past overflow_timeout
  kAborted,              // passive: the active side's REJ came before the RTU
  kRtuTimeout,           // passive: no RTU after 1 + max_retries REPs (REJ timeout sent)
  kPeerAbandoned,        // active: established, then the passive's REJ (it never got an RTU)
  kQpFailed,             // active: Fabric::connect refused the QP pair (a QP is gone)
  kDisconnected,         // both: DREQ answered (or DREP timed out), or the peer's DREQ
};
inline constexpr std::size_t kCmOutcomes = 12;
std::string_view outcome_name(CmOutcome o);  // "established", "rejected_by_app", ...

struct CmEvent {
  CmId id = 0;  // 0 for a passive kRejectedNoListener
  NodeId node = 0;
  CmSide side = CmSide::kActive;
  CmOutcome outcome = CmOutcome::kEstablished;
  TimePoint at{};
};

struct CmConfig {
  // How long a REQ, REP or DREQ waits for its answer before it is sent again (ib_cm derives it
  // from the REQ's CM response timeout fields; one value per run here).
  Nanos response_timeout{std::chrono::milliseconds(20)};
  unsigned max_retries = 3;  // resends after the first (max_cm_retries, 0..15)
  Nanos mra_service_timeout{std::chrono::milliseconds(100)};  // what our MRAs ask for
  bool auto_mra = true;                                       // see "Auto-MRA" above
};

struct ListenConfig {
  ServiceId service = 0;
  cm::BacklogConfig backlog;  // half_open_limit and request_timeout play no part (no half-open)
};

// Where a connection end is now.
enum class CmState : std::uint8_t {
  kReqSent,  // active: waiting for REP (or MRA, REJ)
  kWaiting,  // passive: over the backlog (kDrop), unanswered
  kPending,  // passive: holds a backlog slot; the application decides
  kRepSent,  // passive: accepted, waiting for RTU
  kEstablished,
  kDreqSent,
};

class IbCm {
 public:
  explicit IbCm(Fabric& fabric, const CmConfig& config = {});
  IbCm(const IbCm&) = delete;
  IbCm& operator=(const IbCm&) = delete;

  void on_event(std::function<void(const CmEvent&)> handler) { handler_ = std::move(handler); }
  // Tests' fault injection: a message for which `lose` returns true is lost (counted as lost).
  void set_loss(std::function<bool(const CmMessage&)> lose) { lose_ = std::move(lose); }

  // Listens for `config.service` on `node`. Error: the node is down, or the service is taken.
  Expected<ListenerId, std::string> listen(NodeId node, const ListenConfig& config);
  // The oldest request delivered to the application and not yet taken (it keeps its slot
  // until accept() or reject()).
  std::optional<CmId> take_request(ListenerId listener);
  std::size_t queued_requests(ListenerId listener) const;
  cm::BacklogCounters backlog_counters(ListenerId listener) const;

  // Active side: creates `owner`'s RC QP with `attrs` and sends REQ to `service` on `node`.
  // Error: the owner is not alive. The outcome comes as an event.
  Expected<CmId, std::string> connect(Pid owner, NodeId node, ServiceId service,
                                      const RcAttrs& attrs = {});
  // Passive side, for a request in kPending: creates `owner`'s RC QP (on the listener's node)
  // and sends REP. Error (nothing changed): not a pending request (it expired, or its peer
  // gave up first), or the owner is not alive on that node.
  std::optional<std::string> accept(CmId id, Pid owner, const RcAttrs& attrs = {});
  // Sends REJ (consumer-defined). Error: not a pending request.
  std::optional<std::string> reject(CmId id);
  // Sends DREQ for an established connection. Error: not established.
  std::optional<std::string> disconnect(CmId id);

  std::optional<CmState> state(CmId id) const;  // nothing once the connection has ended
  std::optional<Qpn> qpn(CmId id) const;
  std::size_t connections() const { return conns_.size(); }  // ends not yet ended

  std::uint64_t count(NodeId node, CmOutcome o) const;
  std::uint64_t sent(CmMsgType t) const { return sent_[static_cast<std::size_t>(t)]; }
  std::uint64_t lost(CmMsgType t) const { return lost_[static_cast<std::size_t>(t)]; }
  // REQs recognised as a retry of a request this side already holds.
  std::uint64_t duplicate_reqs() const { return duplicate_reqs_; }

 private:
  struct Conn {
    CmSide side = CmSide::kActive;
    CmState state = CmState::kReqSent;
    NodeId node = 0;
    NodeId peer_node = 0;
    CmId peer = 0;  // the peer's comm id, 0 until known
    ServiceId service = 0;
    std::optional<ListenerId> listener{};  // passive
    Qpn qpn = 0;                           // 0: none yet (passive before accept)
    Qpn peer_qpn = 0;
    unsigned retries = 0;
    std::optional<std::uint64_t> timer{};
    std::optional<std::uint64_t> mra_timer{};
  };
  struct Listener {
    NodeId node = 0;
    ServiceId service = 0;
    cm::ListenBacklog backlog;
    std::deque<CmId> queue{};
    std::optional<std::uint64_t> timer{};
  };

  CmMessage message(const Conn& c, CmId id, CmMsgType type) const;  // from c to its peer
  void send(const CmMessage& m);
  void receive(const CmMessage& m);
  void receive_req(const CmMessage& m);  // a REQ no end here knows yet
  void on_active(CmId id, Conn& c, const CmMessage& m);
  void on_passive(CmId id, Conn& c, const CmMessage& m);
  void on_disconnect(CmId id, Conn& c, const CmMessage& m);
  void cancel(Conn& c);
  void arm(CmId id, Nanos delay);
  void expire(CmId id);  // resend, or give up
  void arm_mra(CmId id, Nanos delay);
  void apply(ListenerId lid, const std::vector<cm::BacklogAction>& actions);
  void rearm(ListenerId lid);         // the listener's timer at its backlog's next deadline
  void finish(CmId id, CmOutcome o);  // counts, reports, destroys the QP, forgets the end
  void report(NodeId node, CmId id, CmSide side, CmOutcome o);

  Fabric& fabric_;
  CmConfig config_;
  std::map<CmId, Conn> conns_;
  std::map<std::pair<NodeId, CmId>, CmId> passive_by_peer_;  // (active node, active id)
  std::map<ListenerId, Listener> listeners_;
  CmId next_id_ = 1;
  ListenerId next_listener_ = 1;
  std::map<std::pair<NodeId, CmOutcome>, std::uint64_t> counts_;
  std::array<std::uint64_t, kCmMsgTypes> sent_{};
  std::array<std::uint64_t, kCmMsgTypes> lost_{};
  std::uint64_t duplicate_reqs_ = 0;
  std::function<void(const CmEvent&)> handler_;
  std::function<bool(const CmMessage&)> lose_;
};

}  // namespace rdma_interop::sim
