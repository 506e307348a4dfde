#include "core/transport/verbs/verbs_connector.h"

#include <algorithm>
#include <cerrno>

#include "core/transport/verbs/cm_params.h"

namespace rdma_interop::transport::verbs {
namespace {

// rdma_resolve_addr / rdma_resolve_route take a timeout of their own; no step needs more.
constexpr int kMaxStepMs = 5000;

}  // namespace

Connector::Connector(runtime::EventLoop& loop, CmChannel& channel, const CmAddress& peer,
                     std::optional<CmAddress> source, ConnectOptions options,
                     VerbsOptions verbs_options, std::shared_ptr<SetupRendezvous> result)
    : loop_(loop),
      channel_(channel),
      peer_(peer),
      source_(std::move(source)),
      options_(std::move(options)),
      verbs_options_(verbs_options),
      result_(std::move(result)),
      deadline_(runtime::Clock::now() + options_.timeout) {}

int Connector::step_timeout_ms() const {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - runtime::Clock::now())
          .count();
  return static_cast<int>(std::clamp<long long>(left, 1, kMaxStepMs));
}

void Connector::start() {
  self_ = shared_from_this();
  auto id = channel_.create_id(weak_from_this());
  if (!id) return fail(ConnectError::Kind::kUnreachable, id.error());
  id_ = *id;
  timer_ = loop_.add_timer(deadline_, [weak = weak_from_this()] {
    if (auto self = weak.lock()) {
      self->timer_.reset();
      self->fail(ConnectError::Kind::kTimeout,
                 "address and route resolution did not finish before the deadline");
    }
  });
  sockaddr* source = source_ ? source_->get() : nullptr;
  if (rdma_resolve_addr(id_, source, peer_.get(), step_timeout_ms()) != 0) {
    const int err = errno;
    return fail(ConnectError::Kind::kUnreachable,
                "cannot resolve " + format_sockaddr(peer_.get()) + " to an RDMA device" +
                    (source ? " from " + format_sockaddr(source) : std::string()) + ": " +
                    errno_sentence(err));
  }
}

void Connector::on_cm_event(const CmEvent& e) {
  if (done_) return;
  switch (e.type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      if (rdma_resolve_route(id_, step_timeout_ms()) != 0) {
        const int err = errno;
        fail(ConnectError::Kind::kUnreachable, "cannot resolve a route to " +
                                                   format_sockaddr(peer_.get()) + ": " +
                                                   errno_sentence(err));
      }
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
      on_route_resolved();
      return;
    case RDMA_CM_EVENT_ADDR_ERROR:
      return fail(ConnectError::Kind::kUnreachable,
                  "no RDMA device reaches " + format_sockaddr(peer_.get()) + " (" + describe(e) +
                      (e.status < 0 ? ": " + errno_sentence(-e.status) : std::string()) + ")");
    case RDMA_CM_EVENT_ROUTE_ERROR:
      return fail(ConnectError::Kind::kUnreachable,
                  "no route to " + format_sockaddr(peer_.get()) + " (" + describe(e) +
                      (e.status < 0 ? ": " + errno_sentence(-e.status) : std::string()) + ")");
    default:
      return fail(ConnectError::Kind::kSetup, "unexpected event while resolving: " + describe(e));
  }
}

void Connector::on_route_resolved() {
  auto qp = QueuePair::create(id_, options_.caps);
  if (!qp) return fail(ConnectError::Kind::kSetup, "cannot create the queue pair: " + qp.error());
  const QpDeviceLimits limits = (*qp)->limits();
  if (auto too_long =
          check_private_data(options_.private_data, limits.iwarp, CmMessage::kRequest)) {
    qp->reset();  // the QP goes before its id
    return fail(ConnectError::Kind::kInvalidArgument, *too_long);
  }
  // From here the connection state owns the id and answers the caller.
  done_ = true;
  const auto keep = std::move(self_);
  if (timer_) {
    loop_.cancel_timer(*timer_);
    timer_.reset();
  }
  rdma_cm_id* id = id_;
  id_ = nullptr;
  auto state =
      std::make_shared<VerbsConnectionState>(loop_, channel_, id, std::move(*qp), options_.caps.cq);
  const Depths depths = connect_depths(options_.policy, limits);
  SetupParams params;
  params.role = Role::kActive;
  params.ird = depths.ird;
  params.ord = depths.ord;
  params.sent_private_data = options_.private_data;
  state->begin_setup(std::move(params), deadline_, result_);
  auto invalid = [](std::string detail) {
    ConnectError e;
    e.kind = ConnectError::Kind::kSetup;
    e.detail = std::move(detail);
    return e;
  };
  if (auto error = state->start(options_.caps)) return state->fail_setup(invalid(*error));
  if (auto error = apply_ack_timeout(id, verbs_options_)) return state->fail_setup(invalid(*error));
  rdma_conn_param param = conn_param(depths, verbs_options_, options_.private_data);
  if (rdma_connect(id, &param) != 0) {
    const int err = errno;
    ConnectError e;
    // siw makes its TCP connection inside rdma_connect: a refusal shows up here.
    e.kind = (err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH)
                 ? ConnectError::Kind::kUnreachable
                 : ConnectError::Kind::kSetup;
    if (e.kind == ConnectError::Kind::kUnreachable) e.sys_errno = err;
    e.detail =
        "rdma_connect to " + format_sockaddr(peer_.get()) + " failed: " + errno_sentence(err);
    state->fail_setup(std::move(e));
  }
}

void Connector::fail(ConnectError::Kind kind, std::string detail) {
  if (done_) return;
  done_ = true;
  if (timer_) {
    loop_.cancel_timer(*timer_);
    timer_.reset();
  }
  if (id_ != nullptr) {
    channel_.destroy_id(id_);
    id_ = nullptr;
  }
  ConnectError e;
  e.kind = kind;
  e.detail = std::move(detail);
  result_->set(SetupResult{nullptr, std::move(e)});
  const auto keep = std::move(self_);  // we may go when this returns
}

}  // namespace rdma_interop::transport::verbs
