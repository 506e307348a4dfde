#include "core/transport/tcp/tcp_connector.h"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>

#include "core/transport/tcp/connection_core.h"

namespace rdma_interop::transport::tcp {

bool retryable(const ConnectError& error, int tcp_errno) {
  switch (error.kind) {
    case ConnectError::Kind::kUnreachable:
      return tcp_errno == ECONNREFUSED || tcp_errno == ECONNRESET;
    case ConnectError::Kind::kSetup:
      // A reset during setup: a listener that evicted us from its half-open queue, closed
      // a Request that waited too long, or an older listener resetting over its backlog.
      return error.failure == cm::CmFailure::kBacklogFull ||
             error.failure == cm::CmFailure::kReplyTimeout ||
             error.failure == cm::CmFailure::kConnectionReset;
    case ConnectError::Kind::kTimeout:  // the Request went unanswered (drop policy)
      return true;
    case ConnectError::Kind::kAddressInUse:
    case ConnectError::Kind::kInvalidArgument:
      return false;
  }
  return false;
}

namespace {

std::uint64_t fresh_seed() {
  // std::random_device once per thread, not per connect (it reads the kernel's entropy each
  // time); then splitmix64 over a counter, which gives every connect a different seed.
  thread_local std::uint64_t state =
      (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

Millis retry_delay(const ConnectOptions& options, std::uint32_t retry, std::mt19937_64& rng) {
  const std::int64_t base = std::max<std::int64_t>(options.retry_backoff.count(), 0);
  const std::int64_t cap = std::max<std::int64_t>(options.retry_backoff_max.count(), 0);
  std::int64_t ceiling = base;
  for (std::uint32_t i = 1; i < retry && ceiling < cap; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap);
  // Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"): spreads a storm
  // of clients that all failed at once over the whole window.
  return Millis(std::uniform_int_distribution<std::int64_t>(0, ceiling)(rng));
}

Connector::Connector(runtime::EventLoop& loop, const sockaddr_in& peer, ConnectOptions options,
                     std::shared_ptr<runtime::Rendezvous<SetupResult>> result)
    : loop_(loop),
      peer_(peer),
      options_(std::move(options)),
      result_(std::move(result)),
      rng_(options_.retry_seed != 0 ? options_.retry_seed : fresh_seed()) {}

void Connector::start() { begin_attempt(); }

void Connector::begin_attempt() {
  ++attempts_;
  retried_ = false;
  attempt_over_ = false;
  tcp_errno_ = 0;
  // The timer holds the connector until the attempt has ended.
  deadline_ =
      loop_.add_timer(runtime::Clock::now() + options_.timeout, [self = shared_from_this()] {
        self->deadline_.reset();
        if (self->session_) self->session_->abort("connect timed out");
        self->fail(ConnectError::Kind::kTimeout,
                   "no connection to " + runtime::format_address(self->peer_) + " within " +
                       std::to_string(self->options_.timeout.count()) + " ms");
      });
  attempt();
}

void Connector::attempt() {
  auto socket = runtime::make_tcp_socket();
  if (!socket) {
    fail(ConnectError::Kind::kUnreachable,
         "cannot create a socket: " + runtime::errno_text(socket.error()));
    return;
  }
  fd_ = std::move(*socket);
  if (const int err = runtime::tune_connection_socket(fd_.get()); err != 0) {
    fail(ConnectError::Kind::kUnreachable, "cannot set TCP_NODELAY: " + runtime::errno_text(err));
    return;
  }
  if (::connect(fd_.get(), reinterpret_cast<const sockaddr*>(&peer_), sizeof peer_) == 0) {
    on_connected();
    return;
  }
  if (errno != EINPROGRESS) {
    const int err = errno;
    fail(
        ConnectError::Kind::kUnreachable,
        "TCP connect to " + runtime::format_address(peer_) + " failed: " + runtime::errno_text(err),
        err);
    return;
  }
  const auto token = loop_.watch(fd_.get(), EPOLLOUT, shared_from_this());
  if (!token) {
    fail(ConnectError::Kind::kUnreachable,
         "cannot watch the socket: " + runtime::errno_text(token.error()));
    return;
  }
  token_ = *token;
  watching_ = true;
}

void Connector::on_io(std::uint32_t) {
  if (attempt_over_) return;
  const int err = runtime::socket_error(fd_.get());
  if (err != 0) {
    stop_watching();
    fail(
        ConnectError::Kind::kUnreachable,
        "TCP connect to " + runtime::format_address(peer_) + " failed: " + runtime::errno_text(err),
        err);
    return;
  }
  on_connected();
}

void Connector::on_connected() {
  cm::MpaPolicy policy = options_.policy;
  if (retried_) policy.revision = wire::kMpaRevision1;
  auto handshake =
      cm::MpaHandshake::initiator(policy, options_.private_data, runtime::Clock::now());
  std::weak_ptr<Connector> weak = shared_from_this();
  MpaSession::Hooks hooks;
  hooks.on_finished = [weak](const std::shared_ptr<MpaSession>&, const SetupResult& result) {
    if (auto self = weak.lock()) self->on_session_finished(result);
  };
  session_ = std::make_shared<MpaSession>(loop_, std::move(fd_), std::move(handshake),
                                          options_.caps, retried_, std::move(hooks));
  // The socket's watch passes to the session (epoll_ctl MOD, not DEL + ADD).
  std::optional<runtime::EventLoop::Token> token;
  if (watching_) token = token_;
  watching_ = false;
  session_->start(token);
}

void Connector::on_session_finished(const SetupResult& result) {
  if (attempt_over_) return;
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
  end_attempt(result);
}

void Connector::fail(ConnectError::Kind kind, std::string detail, int tcp_errno) {
  ConnectError e;
  e.kind = kind;
  e.detail = std::move(detail);
  if (kind == ConnectError::Kind::kSetup) e.failure = cm::CmFailure::kConnectionReset;
  tcp_errno_ = tcp_errno;
  end_attempt(SetupResult{nullptr, std::move(e)});
}

void Connector::end_attempt(SetupResult result) {
  if (attempt_over_ || done_) return;
  const auto self = shared_from_this();  // cancelling the deadline drops the timer's reference
  attempt_over_ = true;
  stop_watching();
  fd_.reset();
  session_.reset();
  if (deadline_) {
    loop_.cancel_timer(*deadline_);
    deadline_.reset();
  }
  if (!result.connection && result.error && attempts_ <= options_.retries &&
      retryable(*result.error, tcp_errno_)) {
    const Millis pause = retry_delay(options_, attempts_, rng_);
    loop_.add_timer(runtime::Clock::now() + pause, [self] { self->begin_attempt(); });
    return;
  }
  done_ = true;
  if (result.error) result.error->attempts = attempts_;
  result_->set(std::move(result));
}

void Connector::stop_watching() {
  if (!watching_) return;
  loop_.unwatch(token_);
  watching_ = false;
}

}  // namespace rdma_interop::transport::tcp
