// verbs_connection.h - one RC connection through rdma_cm and libibverbs: its cm_id, queue
// pair and device completion queue, from rdma_connect / rdma_accept to teardown.
//
// Setup. The connector (active side) or the pending request (passive side) creates the connection
// state once the cm_id has a device, lets it post the initial receives, calls begin_setup() and
// then rdma_connect / rdma_accept. The state answers the waiting connect() or accept() once:
// with itself on RDMA_CM_EVENT_ESTABLISHED, or with a ConnectError (REJECTED with the
// peer's private data, UNREACHABLE, CONNECT_ERROR, DISCONNECTED, the deadline). A Reject
// whose private data is cm::kBacklogFullMarker (IB/RoCE: zero-padded) is a listener's
// overflow Reject: failure backlog_full, not peer_rejected.
//
// Data path. post_send / post_recv go straight to ibv_post_send / ibv_post_recv from the
// caller's thread (under the state's mutex); post_sends chains its batch into one
// ibv_post_send (one doorbell). The device CQ (one per queue pair) is reaped
// into the connection's CompletionQueue (QpCaps::cq, possibly shared with other
// connections, tcp ones too, or one of its own) by poll_completions() on the caller's
// thread first, and by the event thread when the completion channel fires (what wakes a
// poll_completions() that found nothing, and serves a connection nobody polls). One reaper
// at a time (reap_mu_), so completions keep their order. Each posted request gets
// an internal sequence number as its verbs wr_id, so a completion (also an error completion,
// whose verbs opcode is undefined) is reported with the application's wr_id, opcode and
// message length; unsignaled requests older than a completion completed silently (RC
// completes in order).
//
// Memory. register_memory() is ibv_reg_mr on the connection's protection domain. The STag
// returned is the rkey when the region grants remote access, else the lkey; the lkey is
// kept, so a work request whose Sge::lkey carries a returned STag uses the region's real
// lkey. An Sge::lkey that is no STag of ours goes to the device unchanged (so tests can
// provoke a local protection error). Registration failures return STag 0.
//
// State. kConnected from ESTABLISHED. kError after a completion with an error status other
// than flushed (the QP is in error), a flushed send-queue request (the QP left RTS under
// it: on iWARP a Terminate from the peer ends outstanding requests that way), or the device
// went away. kClosed after RDMA_CM_EVENT_DISCONNECTED or the application's disconnect().
// Flushed receives change nothing: an orderly close flushes them too.
//
// Disconnect semantics (liveness probing depends on them): on DISCONNECTED from the peer
// the state becomes kClosed and error_detail() says so, but this provider does NOT move the
// QP to the error state. Requests the application posts afterwards go to the device as
// usual and end as the transport decides: on IB/RoCE a Read to a peer whose QP is gone
// ends in retry_exceeded after retry_count retries of the ACK timeout. (On iWARP the kernel
// ties the QP to its TCP connection: the peer's close moves our QP out of RTS by itself.)
// Only the application's disconnect() calls rdma_disconnect, which librdmacm implements by
// moving the QP to error (IB/RoCE) or SQD (iWARP) before the CM's DREQ / TCP close.
// A non-flush error completion after the peer disconnected turns kClosed into kError.
//
// terminate(cause) cannot send a Terminate: on iWARP the kernel owns the stream, and IB and
// RoCE have none. It disconnects (rdma_disconnect), moves the queue pair to error so every
// outstanding request completes flushed, and settles kError with a detail that says so and
// names the cause; the peer sees a disconnect, not the cause.
//
// Not visible through verbs, and reported as such: the MPA exchange (revision, CRC,
// markers, RTR: the kernel's siw/iw_cm decide them; IB and RoCE have no MPA), Terminate
// messages (terminate_received/sent are always empty), solicited-event flags on receive
// completions (ibv_wc has none), the peer's IRD/ORD on the active side of iWARP (0).
// ConnectionInfo::params.revision is 0 for "not visible"; sent_frame / received_frame are
// synthesized from the private data exchanged (over IB/RoCE zero-padded by the CM to its
// fixed field size, so a peer's private data may arrive longer than it was sent).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/runtime/event_loop.h"
#include "core/runtime/rendezvous.h"
#include "core/transport/completion_queue.h"
#include "core/transport/connection_handle.h"
#include "core/transport/provider.h"
#include "core/transport/verbs/cm_channel.h"
#include "core/transport/verbs/queue_pair.h"
#include "core/transport/verbs/verbs_options.h"

namespace rdma_interop::transport::verbs {

class VerbsConnectionState;

// The one answer to a connect() or accept().
struct SetupResult {
  std::shared_ptr<VerbsConnectionState> connection;
  std::optional<ConnectError> error;
};
using SetupRendezvous = runtime::Rendezvous<SetupResult>;

enum class Role : std::uint8_t { kActive, kPassive };

// What the side setting up the connection knew before ESTABLISHED, for ConnectionInfo.
struct SetupParams {
  Role role = Role::kActive;
  std::uint8_t ird = 0;  // the responder_resources we passed
  std::uint8_t ord = 0;  // the initiator_depth we passed
  // Passive side: the request's view of the peer (its IRD and ORD, from the CM).
  std::uint8_t peer_ird = 0;
  std::uint8_t peer_ord = 0;
  std::vector<std::uint8_t> sent_private_data;
  std::vector<std::uint8_t> received_private_data;  // passive: the request's
};

class VerbsConnectionState : public runtime::IoHandler,
                             public CmHandler,
                             public std::enable_shared_from_this<VerbsConnectionState> {
 public:
  // Takes the QP resources; `id` stays the state's from here on (it destroys it). Completions
  // go to `cq` (QpCaps::cq); null: a queue of the state's own, unbounded.
  VerbsConnectionState(runtime::EventLoop& loop, CmChannel& channel, rdma_cm_id* id,
                       std::unique_ptr<QueuePair> qp, std::shared_ptr<CompletionQueue> cq);
  ~VerbsConnectionState() override;

  // ---- Event thread, during setup ----
  // Routes the id's CM events and the completion channel to this state, registers and posts
  // the initial receives. The error is a sentence (the caller then calls fail_setup).
  std::optional<std::string> start(const QpCaps& caps);
  // From now until ESTABLISHED, a failure or `deadline`, the connection state answers `result`.
  void begin_setup(SetupParams params, runtime::TimePoint deadline,
                   std::shared_ptr<SetupRendezvous> result);
  // Answers `result` (if begun) with `error` and tears everything down.
  void fail_setup(ConnectError error);
  const QpDeviceLimits& limits() const { return qp_->limits(); }

  // ---- Application side, any thread ----
  const ConnectionInfo& info() const { return info_; }  // set before the state is handed out
  std::uint32_t register_memory(void* addr, std::size_t length, std::uint32_t access);
  bool deregister_memory(std::uint32_t stag);
  std::optional<rdmap::PostError> post_send(const rdmap::SendWr& wr);  // a batch of one
  // Connection::post_sends: the requests chained into one ibv_post_send.
  Connection::PostBatch post_sends(std::span<const rdmap::SendWr> wrs);
  std::optional<rdmap::PostError> post_recv(const rdmap::RecvWr& wr);
  std::vector<rdmap::WorkCompletion> poll_completions(std::size_t max, Millis timeout);
  ConnectionState state() const;
  std::string error_detail() const;
  void disconnect(Millis timeout);
  // Disconnects and moves the QP to error (see the header comment). Does not wait.
  void terminate(const wire::TerminateCause& cause);
  // The application object is going away: disconnect if still connected, destroy the QP,
  // memory regions and cm_id. Blocks until the event thread did it.
  void release();

  // ---- Event thread ----
  void on_io(std::uint32_t events) override;  // the completion channel
  void on_cm_event(const CmEvent& event) override;

 private:
  enum class Phase : std::uint8_t { kCreated, kSetup, kEstablished, kTornDown };
  // A posted request, until its completion (or a later one proves it done).
  struct Tracked {
    std::uint64_t seq = 0;
    std::uint64_t wr_id = 0;
    rdmap::WcOpcode opcode = rdmap::WcOpcode::kSend;
    std::uint32_t length = 0;
  };
  static constexpr std::uint64_t kRecvBit = 1ULL << 63;

  void on_setup_event(const CmEvent& event);
  void on_established(const CmEvent& event);
  // Reaps the CQ into cq_ under reap_mu_ (one reaper at a time keeps completions in order):
  // the event thread after a channel event, and a poll_completions() caller before it waits.
  // Takes mu_ per batch; does nothing once the QP is torn down.
  void drain_cq();
  void complete(const ibv_wc& wc);  // mu_ held
  void record_final_state(ConnectionState state, std::string detail,
                          bool overrides_peer_close);  // mu_ held
  void teardown();                                   // event thread
  std::uint32_t lkey_for(std::uint32_t stag) const;  // mu_ held
  ConnectError setup_error(const CmEvent& event) const;

  runtime::EventLoop& loop_;
  CmChannel& channel_;
  const std::shared_ptr<CompletionQueue> cq_;  // set once: polled without mu_

  rdma_cm_id* id_;                 // event thread; null after teardown
  // Set during setup on the event thread; reset by teardown() under reap_mu_, so a reaper
  // that holds reap_mu_ and finds it set may poll its CQ (or by the destructor, when no
  // reaper can be left: each holds a reference).
  std::unique_ptr<QueuePair> qp_;
  std::mutex reap_mu_;  // lock order: reap_mu_, then mu_
  runtime::EventLoop::Token token_ = 0;
  bool watching_ = false;

  // Setup (event thread).
  SetupParams setup_;
  std::shared_ptr<SetupRendezvous> result_;
  std::optional<runtime::EventLoop::TimerId> setup_timer_;
  ConnectionInfo info_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Phase phase_ = Phase::kCreated;
  std::unordered_map<std::uint32_t, ibv_mr*> regions_;  // by STag
  std::vector<ibv_mr*> initial_regions_;                // the initial receives'
  std::deque<Tracked> sq_;
  std::deque<Tracked> rq_;
  std::uint64_t next_seq_ = 1;
  std::optional<ConnectionState> final_state_;
  std::string detail_;
  bool peer_closed_ = false;  // kClosed came from the peer's DISCONNECTED
  bool app_closed_ = false;   // disconnect() or terminate() was called
  bool disconnected_event_ = false;
  bool released_ = false;
};

// The application's handle: the shared forwarding (connection_handle.h). The kernel handles
// Terminates (iWARP) and NAKs (IB): none is visible here.
class VerbsConnection final : public ConnectionHandle<VerbsConnectionState> {
 public:
  // `context` keeps the event thread and the CM channel alive while the handle exists.
  VerbsConnection(std::shared_ptr<void> context, std::shared_ptr<VerbsConnectionState> state)
      : ConnectionHandle(std::move(context), std::move(state)) {}

  std::optional<wire::TerminateMessage> terminate_received() const override { return std::nullopt; }
  std::optional<wire::TerminateMessage> terminate_sent() const override { return std::nullopt; }
};

}  // namespace rdma_interop::transport::verbs
