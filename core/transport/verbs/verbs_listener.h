// verbs_listener.h - the passive side: an rdma_cm listening id, its connection requests
// queued for the application (next_request -> accept / reject).
//
// Each RDMA_CM_EVENT_CONNECT_REQUEST brings a new cm_id; it waits as a PendingRequest until
// the application accepts or rejects it. At most `backlog` wait (rdma_listen's backlog
// bounds the kernel's queue too); more are rejected with cm::kBacklogFullMarker as the
// Reject's private data (our initiators report that as backlog_full) and reported as setup
// failures. Only this overflow policy exists here: ListenOptions::overflow kDrop, the
// half-open limit and the decision and overflow timeouts are not applied (the provider
// refuses kDrop rather than ignore it). A
// request whose peer gives up while it waits (REJECTED, CONNECT_ERROR, DISCONNECTED on its
// id) is dropped and reported the same way.
//
// Counters (cm::BacklogCounters): requests counts CONNECT_REQUEST events (rdma_cm shows no
// half-open stage: half_open_* stay 0); over the backlog is overflow_rejected; a requester
// that gives up while queued is pending_aborted. rdma_cm frees the kernel's slot when user
// space reads the request, so a request taken by next_request() leaves the backlog then and
// is counted in `accepted` (the application's later decision is not seen here).
//
// request() is a synthesized MPA frame: rdma_cm shows the private data and the requested
// RDMA Read depths, not the MPA exchange (for iWARP the kernel does MPA; IB and RoCE have
// none). Its revision is 0 ("not visible"), without CRC, markers or enhanced parameters;
// only private_data is real (over IB/RoCE zero-padded to the CM's 56 octets).
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/transport/provider.h"
#include "core/transport/verbs/cm_address.h"
#include "core/transport/verbs/cm_channel.h"
#include "core/transport/verbs/verbs_connection.h"
#include "core/transport/verbs/verbs_context.h"
#include "core/transport/verbs/verbs_options.h"

namespace rdma_interop::transport::verbs {

class VerbsListenerState;

// One connection request. Event-thread state (the id) is touched only on the event thread;
// the request's description is immutable.
class PendingRequest : public CmHandler, public std::enable_shared_from_this<PendingRequest> {
 public:
  PendingRequest(runtime::EventLoop& loop, CmChannel& channel,
                 std::weak_ptr<VerbsListenerState> listener, const CmEvent& request,
                 const cm::MpaPolicy& policy, VerbsOptions options);

  const wire::MpaFrame& request() const { return request_; }
  const std::string& peer_address() const { return peer_address_; }

  // Application thread: accept, blocking until ESTABLISHED or failure.
  Expected<std::shared_ptr<VerbsConnectionState>, ConnectError> accept(
      std::vector<std::uint8_t> private_data, const QpCaps& caps);
  // Application thread.
  void reject(std::vector<std::uint8_t> private_data);

  // Event thread.
  void on_cm_event(const CmEvent& event) override;
  // Rejects (if still undecided) and destroys the id.
  void drop(const std::vector<std::uint8_t>& private_data);

 private:
  void accept_on_loop(std::vector<std::uint8_t> private_data, const QpCaps& caps,
                      const std::shared_ptr<SetupRendezvous>& result);

  runtime::EventLoop& loop_;
  CmChannel& channel_;
  std::weak_ptr<VerbsListenerState> listener_;
  const cm::MpaPolicy policy_;
  const VerbsOptions options_;
  const wire::MpaFrame request_;
  const std::string peer_address_;
  const std::uint8_t peer_ird_;  // the request's initiator_depth: how many Reads it accepts
  const std::uint8_t peer_ord_;  // the request's responder_resources: how many it will issue
  // Event thread.
  rdma_cm_id* id_;
  std::string gone_;  // why the request went away before a decision
};

class VerbsListenerState : public CmHandler,
                           public std::enable_shared_from_this<VerbsListenerState> {
 public:
  VerbsListenerState(runtime::EventLoop& loop, CmChannel& channel, const cm::MpaPolicy& policy,
                     VerbsOptions options, int backlog);

  // Event thread: bind and listen.
  std::optional<ConnectError> start(const CmAddress& where);

  // Application side, any thread.
  const std::string& local_address() const { return local_address_; }
  std::shared_ptr<PendingRequest> next_request(Millis timeout);
  Listener::Counters counters() const;
  std::vector<Listener::SetupFailure> take_setup_failures();
  void close();

  // Event thread.
  void on_cm_event(const CmEvent& event) override;
  // A queued or handed-out request went away before the application decided.
  void request_gone(const std::shared_ptr<PendingRequest>& request, const std::string& why);

 private:
  void record_failure(const std::string& peer, ConnectError error);  // mu_ held

  runtime::EventLoop& loop_;
  CmChannel& channel_;
  const cm::MpaPolicy policy_;
  const VerbsOptions options_;
  const std::size_t backlog_;
  rdma_cm_id* id_ = nullptr;   // event thread
  std::string local_address_;  // set by start()

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<PendingRequest>> ready_;
  Listener::Counters counters_;
  std::deque<Listener::SetupFailure> failures_;
  bool closed_ = false;
};

class VerbsListener final : public Listener {
 public:
  VerbsListener(std::shared_ptr<VerbsContext> context, std::shared_ptr<VerbsListenerState> state)
      : context_(std::move(context)), state_(std::move(state)) {}
  ~VerbsListener() override { state_->close(); }

  std::string local_address() const override { return state_->local_address(); }
  std::unique_ptr<PendingConnection> next_request(Millis timeout) override;
  Counters counters() const override { return state_->counters(); }
  std::vector<SetupFailure> take_setup_failures() override { return state_->take_setup_failures(); }
  void close() override { state_->close(); }

 private:
  std::shared_ptr<VerbsContext> context_;
  std::shared_ptr<VerbsListenerState> state_;
};

// A request handed to the application. Destroying it undecided rejects it.
class VerbsPendingConnection final : public PendingConnection {
 public:
  VerbsPendingConnection(std::shared_ptr<VerbsContext> context,
                         std::shared_ptr<PendingRequest> request)
      : context_(std::move(context)), request_(std::move(request)) {}
  ~VerbsPendingConnection() override;

  const wire::MpaFrame& request() const override { return request_->request(); }
  std::string peer_address() const override { return request_->peer_address(); }
  Expected<std::unique_ptr<Connection>, ConnectError> accept(std::vector<std::uint8_t> private_data,
                                                             const QpCaps& caps) override;
  void reject(std::vector<std::uint8_t> private_data) override;

 private:
  std::shared_ptr<VerbsContext> context_;
  std::shared_ptr<PendingRequest> request_;
  std::mutex mu_;
  bool decided_ = false;
};

}  // namespace rdma_interop::transport::verbs
