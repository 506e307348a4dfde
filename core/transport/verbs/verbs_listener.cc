#include "core/transport/verbs/verbs_listener.h"

#include <algorithm>
#include <cerrno>

#include "core/transport/verbs/cm_params.h"

namespace rdma_interop::transport::verbs {
namespace {

// How long accept() waits for ESTABLISHED at least: on IB the requester's RTU, on iWARP the
// MPA exchange (and RTR) the kernel runs.
constexpr Millis kMinAcceptWait{1000};

std::string device_list() {
  std::string s;
  for (const auto& d : rdma_device_names()) s += (s.empty() ? "" : ", ") + d;
  return s.empty() ? "none" : s;
}

wire::MpaFrame request_frame(const CmEvent& e) {
  wire::MpaFrame f;
  f.kind = wire::MpaFrameKind::kRequest;
  f.revision = 0;  // not visible through rdma_cm: see the header
  f.private_data = e.private_data;
  return f;
}

}  // namespace

// ---- PendingRequest ----------------------------------------------------------------------------

PendingRequest::PendingRequest(runtime::EventLoop& loop, CmChannel& channel,
                               std::weak_ptr<VerbsListenerState> listener, const CmEvent& request,
                               const cm::MpaPolicy& policy, VerbsOptions options)
    : loop_(loop),
      channel_(channel),
      listener_(std::move(listener)),
      policy_(policy),
      options_(options),
      request_(request_frame(request)),
      peer_address_(format_sockaddr(rdma_get_peer_addr(request.id))),
      // The CM reports a request in the acceptor's perspective (cma.c): initiator_depth is
      // how deep we may read from the requester (its IRD), responder_resources how many
      // Reads it will send us (its ORD).
      peer_ird_(request.initiator_depth),
      peer_ord_(request.responder_resources),
      id_(request.id) {}

Expected<std::shared_ptr<VerbsConnectionState>, ConnectError> PendingRequest::accept(
    std::vector<std::uint8_t> private_data, const QpCaps& caps) {
  auto result = std::make_shared<SetupRendezvous>();
  loop_.run([&] { accept_on_loop(std::move(private_data), caps, result); });
  SetupResult r = result->take();  // the connection state's setup deadline guarantees an answer
  if (r.connection) return r.connection;
  return unexpected(r.error.value_or(ConnectError{}));
}

void PendingRequest::accept_on_loop(std::vector<std::uint8_t> private_data, const QpCaps& caps,
                                    const std::shared_ptr<SetupRendezvous>& result) {
  auto refuse = [&](ConnectError error) {
    drop({});
    result->set(SetupResult{nullptr, std::move(error)});
  };
  if (id_ == nullptr) {
    return result->set(SetupResult{
        nullptr, connect_error(ConnectError::Kind::kSetup,
                               "the connection request went away before it was accepted: " + gone_,
                               cm::CmFailure::kConnectionClosed)});
  }
  auto qp = QueuePair::create(id_, caps);
  if (!qp) {
    return refuse(
        connect_error(ConnectError::Kind::kSetup, "cannot create the queue pair: " + qp.error()));
  }
  const QpDeviceLimits limits = (*qp)->limits();
  if (auto too_long = check_private_data(private_data, limits.iwarp, CmMessage::kReply)) {
    qp->reset();
    return refuse(connect_error(ConnectError::Kind::kInvalidArgument, *too_long));
  }
  if (policy_.strict_ird_ord && policy_.ord > peer_ird_) {
    qp->reset();
    return refuse(connect_error(ConnectError::Kind::kSetup,
                                "strict IRD/ORD: our ORD " + std::to_string(policy_.ord) +
                                    " exceeds the requester's IRD " + std::to_string(peer_ird_),
                                cm::CmFailure::kInsufficientIrd));
  }
  const Depths depths = accept_depths(policy_, limits, peer_ird_);
  rdma_cm_id* id = id_;
  id_ = nullptr;  // the connection state's from here on
  auto state = std::make_shared<VerbsConnectionState>(loop_, channel_, id, std::move(*qp), caps.cq);
  SetupParams params;
  params.role = Role::kPassive;
  params.ird = depths.ird;
  params.ord = depths.ord;
  params.peer_ird = peer_ird_;
  params.peer_ord = peer_ord_;
  params.sent_private_data = private_data;
  params.received_private_data = request_.private_data;
  const Millis wait = std::max(kMinAcceptWait, policy_.reply_timeout);
  state->begin_setup(std::move(params), runtime::Clock::now() + wait, result);
  if (auto error = state->start(caps)) {
    return state->fail_setup(connect_error(ConnectError::Kind::kSetup, *error));
  }
  if (auto error = apply_ack_timeout(id, options_)) {
    return state->fail_setup(connect_error(ConnectError::Kind::kSetup, *error));
  }
  rdma_conn_param param = conn_param(depths, options_, private_data);
  if (rdma_accept(id, &param) != 0) {
    const int err = errno;
    state->fail_setup(
        connect_error(ConnectError::Kind::kSetup, "rdma_accept failed: " + errno_sentence(err)));
  }
}

void PendingRequest::reject(std::vector<std::uint8_t> private_data) {
  loop_.run([&] { drop(private_data); });
}

void PendingRequest::drop(const std::vector<std::uint8_t>& private_data) {
  if (id_ == nullptr) return;
  const std::size_t limit = private_data_limit(
      id_->verbs != nullptr && id_->verbs->device->transport_type == IBV_TRANSPORT_IWARP,
      CmMessage::kReject);
  const auto length = static_cast<std::uint8_t>(std::min(private_data.size(), limit));
  rdma_reject(id_, length > 0 ? private_data.data() : nullptr, length);
  channel_.destroy_id(id_);
  id_ = nullptr;
}

void PendingRequest::on_cm_event(const CmEvent& e) {
  // Before accept() took the id, any event means the requester gave up or failed.
  if (id_ == nullptr) return;
  gone_ = describe(e);
  channel_.destroy_id(id_);
  id_ = nullptr;
  if (auto listener = listener_.lock()) listener->request_gone(shared_from_this(), gone_);
}

// ---- VerbsListenerState -------------------------------------------------------------------------

VerbsListenerState::VerbsListenerState(runtime::EventLoop& loop, CmChannel& channel,
                                       const cm::MpaPolicy& policy, VerbsOptions options,
                                       int backlog)
    : loop_(loop),
      channel_(channel),
      policy_(policy),
      options_(options),
      backlog_(static_cast<std::size_t>(std::max(backlog, 1))) {
  counters_.backlog = static_cast<std::uint32_t>(backlog_);
}

std::optional<ConnectError> VerbsListenerState::start(const CmAddress& where) {
  const std::string text = format_sockaddr(where.get());
  auto id = channel_.create_id(weak_from_this());
  if (!id) return connect_error(ConnectError::Kind::kUnreachable, id.error());
  id_ = *id;
  auto give_up = [&](ConnectError error) {
    channel_.destroy_id(id_);
    id_ = nullptr;
    return error;
  };
  if (rdma_bind_addr(id_, const_cast<sockaddr*>(where.get())) != 0) {
    const int err = errno;
    if (err == EADDRINUSE) {
      return give_up(connect_error(ConnectError::Kind::kAddressInUse,
                                   "cannot listen on " + text + ": " + errno_sentence(err)));
    }
    if (err == ENODEV || err == EADDRNOTAVAIL) {
      return give_up(connect_error(ConnectError::Kind::kUnreachable,
                                   "cannot listen on " + text +
                                       ": no RDMA device has this address (" + errno_sentence(err) +
                                       "; RDMA devices: " + device_list() + ")"));
    }
    ConnectError refused = connect_error(ConnectError::Kind::kInvalidArgument,
                                         "cannot listen on " + text + ": " + errno_sentence(err));
    refused.sys_errno = err;  // the system refused the address (provider.h)
    return give_up(std::move(refused));
  }
  if (!where.is_wildcard() && id_->verbs == nullptr) {
    return give_up(
        connect_error(ConnectError::Kind::kUnreachable, "cannot listen on " + text +
                                                            ": no RDMA device has this address "
                                                            "(RDMA devices: " +
                                                            device_list() + ")"));
  }
  // The kernel keeps a queue of its own under ours: iWARP's iw_cm sizes its pending-event pool
  // and siw its TCP listen queue by this number, and when that fills it turns a request away
  // itself, with a Reject that carries no backlog-full marker, before our backlog (the
  // engine that decides) has seen it. So the kernel's queue is made deeper than ours; the
  // device tier's storm on siw counted such rejects with the kernel's queue as deep as ours.
  const int kernel_backlog = static_cast<int>(std::max<std::size_t>(backlog_ * 4, 256));
  if (rdma_listen(id_, kernel_backlog) != 0) {
    const int err = errno;
    return give_up(connect_error(
        err == EADDRINUSE ? ConnectError::Kind::kAddressInUse : ConnectError::Kind::kUnreachable,
        "rdma_listen on " + text + " failed: " + errno_sentence(err)));
  }
  local_address_ = format_sockaddr(rdma_get_local_addr(id_));
  return std::nullopt;
}

void VerbsListenerState::on_cm_event(const CmEvent& e) {
  if (e.type != RDMA_CM_EVENT_CONNECT_REQUEST) return;  // DEVICE_REMOVAL etc.: nothing queued
  std::shared_ptr<PendingRequest> request;
  {
    std::lock_guard lock(mu_);
    counters_.requests++;
    if (!closed_ && ready_.size() < backlog_) {
      request =
          std::make_shared<PendingRequest>(loop_, channel_, weak_from_this(), e, policy_, options_);
    } else {
      counters_.overflow_rejected++;
    }
    if (!request && !closed_) {
      record_failure(format_sockaddr(rdma_get_peer_addr(e.id)),
                     connect_error(ConnectError::Kind::kSetup,
                                   "over the backlog of " + std::to_string(backlog_) +
                                       " waiting requests: rejected with the backlog-full marker",
                                   cm::CmFailure::kBacklogFull));
    }
  }
  if (!request) {
    // The overflow Reject carries cm::kBacklogFullMarker, as the tcp listener's does, so our
    // initiators report backlog_full (retry later) rather than the application's refusal.
    const auto marker = cm::backlog_full_private_data();
    rdma_reject(e.id, marker.data(), static_cast<std::uint8_t>(marker.size()));
    rdma_destroy_id(e.id);
    return;
  }
  channel_.attach(e.id, request);
  std::lock_guard lock(mu_);
  ready_.push_back(std::move(request));
  counters_.pending = static_cast<std::uint32_t>(ready_.size());
  counters_.high_water = std::max(counters_.high_water, counters_.pending);
  cv_.notify_one();
}

void VerbsListenerState::request_gone(const std::shared_ptr<PendingRequest>& request,
                                      const std::string& why) {
  std::lock_guard lock(mu_);
  const auto it = std::find(ready_.begin(), ready_.end(), request);
  if (it == ready_.end()) return;  // handed out: accept() reports it
  ready_.erase(it);
  counters_.pending = static_cast<std::uint32_t>(ready_.size());
  counters_.pending_aborted++;
  record_failure(request->peer_address(),
                 connect_error(ConnectError::Kind::kSetup,
                               "the requester gave up before the request was taken: " + why,
                               cm::CmFailure::kConnectionClosed));
}

void VerbsListenerState::record_failure(const std::string& peer, ConnectError error) {
  failures_.push_back(Listener::SetupFailure{peer, std::move(error), 0.0});
  while (failures_.size() > Listener::kMaxSetupFailures) failures_.pop_front();
}

std::shared_ptr<PendingRequest> VerbsListenerState::next_request(Millis timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return closed_ || !ready_.empty(); });
  if (ready_.empty()) return nullptr;
  auto request = std::move(ready_.front());
  ready_.pop_front();
  counters_.pending = static_cast<std::uint32_t>(ready_.size());
  counters_.accepted++;  // rdma_cm freed its slot when the event was read (see the header)
  return request;
}

Listener::Counters VerbsListenerState::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

std::vector<Listener::SetupFailure> VerbsListenerState::take_setup_failures() {
  std::lock_guard lock(mu_);
  std::vector<Listener::SetupFailure> out(failures_.begin(), failures_.end());
  failures_.clear();
  return out;
}

void VerbsListenerState::close() {
  loop_.run([this] {
    std::deque<std::shared_ptr<PendingRequest>> waiting;
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      closed_ = true;
      waiting.swap(ready_);
      cv_.notify_all();
    }
    if (id_ != nullptr) {
      channel_.destroy_id(id_);
      id_ = nullptr;
    }
    for (auto& request : waiting) request->drop({});
  });
}

// ---- Application handles -------------------------------------------------------------------

std::unique_ptr<PendingConnection> VerbsListener::next_request(Millis timeout) {
  auto request = state_->next_request(timeout);
  if (!request) return nullptr;
  return std::make_unique<VerbsPendingConnection>(context_, std::move(request));
}

VerbsPendingConnection::~VerbsPendingConnection() {
  std::lock_guard lock(mu_);
  if (!decided_) request_->reject({});
}

Expected<std::unique_ptr<Connection>, ConnectError> VerbsPendingConnection::accept(
    std::vector<std::uint8_t> private_data, const QpCaps& caps) {
  std::lock_guard lock(mu_);
  if (decided_) {
    return unexpected(connect_error(ConnectError::Kind::kInvalidArgument,
                                    "this connection request was already accepted or rejected"));
  }
  decided_ = true;
  auto state = request_->accept(std::move(private_data), caps);
  if (!state) return unexpected(state.error());
  return std::unique_ptr<Connection>(
      std::make_unique<VerbsConnection>(context_, std::move(*state)));
}

void VerbsPendingConnection::reject(std::vector<std::uint8_t> private_data) {
  std::lock_guard lock(mu_);
  if (decided_) return;
  decided_ = true;
  request_->reject(std::move(private_data));
}

}  // namespace rdma_interop::transport::verbs
