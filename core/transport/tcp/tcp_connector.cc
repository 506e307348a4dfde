#include "core/transport/tcp/tcp_connector.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>

#include "core/transport/tcp/connection_core.h"

namespace rdma_interop::transport::tcp {

Connector::Connector(EventLoop& loop, const sockaddr_in& peer, ConnectOptions options,
                     std::shared_ptr<Rendezvous<SetupResult>> result)
    : loop_(loop), peer_(peer), options_(std::move(options)), result_(std::move(result)) {}

void Connector::start() {
  // The timer holds the connector until it has delivered its result.
  deadline_ = loop_.add_timer(Clock::now() + options_.timeout, [self = shared_from_this()] {
    self->deadline_.reset();
    if (self->session_) self->session_->abort("connect timed out");
    self->fail(ConnectError::Kind::kTimeout,
               "no connection to " + format_address(self->peer_) + " within " +
                   std::to_string(self->options_.timeout.count()) + " ms");
  });
  attempt();
}

void Connector::attempt() {
  auto socket = make_tcp_socket();
  if (!socket) {
    fail(ConnectError::Kind::kUnreachable, "cannot create a socket: " + errno_text(socket.error()));
    return;
  }
  fd_ = std::move(*socket);
  if (const int err = tune_connection_socket(fd_.get()); err != 0) {
    fail(ConnectError::Kind::kUnreachable, "cannot set TCP_NODELAY: " + errno_text(err));
    return;
  }
  if (::connect(fd_.get(), reinterpret_cast<const sockaddr*>(&peer_), sizeof peer_) == 0) {
    on_connected();
    return;
  }
  if (errno != EINPROGRESS) {
    fail(ConnectError::Kind::kUnreachable,
         "TCP connect to " + format_address(peer_) + " failed: " + errno_text(errno));
    return;
  }
  token_ = loop_.watch(fd_.get(), EPOLLOUT, shared_from_this());
  watching_ = true;
}

void Connector::on_io(std::uint32_t) {
  if (done_) return;
  const int err = socket_error(fd_.get());
  stop_watching();
  if (err != 0) {
    fail(ConnectError::Kind::kUnreachable,
         "TCP connect to " + format_address(peer_) + " failed: " + errno_text(err));
    return;
  }
  on_connected();
}

void Connector::on_connected() {
  cm::MpaPolicy policy = options_.policy;
  if (retried_) policy.revision = wire::kMpaRevision1;
  auto handshake = cm::MpaHandshake::initiator(policy, options_.private_data, Clock::now());
  std::weak_ptr<Connector> weak = shared_from_this();
  MpaSession::Hooks hooks;
  hooks.on_finished = [weak](const std::shared_ptr<MpaSession>&, const SetupResult& result) {
    if (auto self = weak.lock()) self->on_session_finished(result);
  };
  session_ = std::make_shared<MpaSession>(loop_, std::move(fd_), std::move(handshake),
                                          options_.caps, retried_, std::move(hooks));
  session_->start();
}

void Connector::on_session_finished(const SetupResult& result) {
  if (done_) return;
  if (result.retry_revision1 && !retried_) {
    retried_ = true;
    session_.reset();
    attempt();
    return;
  }
  if (result.retry_revision1) {
    fail(ConnectError::Kind::kSetup, "the peer reset the revision-1 retry as well");
    return;
  }
  deliver(result);
}

void Connector::fail(ConnectError::Kind kind, std::string detail) {
  ConnectError e;
  e.kind = kind;
  e.detail = std::move(detail);
  if (kind == ConnectError::Kind::kSetup) e.failure = cm::CmFailure::kConnectionReset;
  deliver(SetupResult{nullptr, std::move(e)});
}

void Connector::deliver(SetupResult result) {
  if (done_) return;
  const auto self = shared_from_this();  // cancelling the deadline drops the timer's reference
  done_ = true;
  stop_watching();
  fd_.reset();
  session_.reset();
  result_->set(std::move(result));
  if (deadline_) {
    loop_.cancel_timer(*deadline_);
    deadline_.reset();
  }
}

void Connector::stop_watching() {
  if (!watching_) return;
  loop_.unwatch(token_);
  watching_ = false;
}

}  // namespace rdma_interop::transport::tcp
