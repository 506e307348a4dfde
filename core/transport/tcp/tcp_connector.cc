#include "core/transport/tcp/tcp_connector.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>

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

namespace {

SetupResult failed(ConnectError::Kind kind, std::string detail, int tcp_errno = 0) {
  ConnectError e;
  e.kind = kind;
  e.detail = std::move(detail);
  if (kind == ConnectError::Kind::kSetup) e.failure = cm::CmFailure::kConnectionReset;
  return SetupResult{nullptr, std::move(e), false, tcp_errno};
}

SetupResult timed_out(const sockaddr_in& peer, const ConnectOptions& options) {
  return failed(ConnectError::Kind::kTimeout, "no connection to " + runtime::format_address(peer) +
                                                  " within " +
                                                  std::to_string(options.timeout.count()) + " ms");
}

// How a nonblocking connect(2) that said EINPROGRESS ended, if it has: a zero-length send
// returns 0 once the socket is connected, the connect's error (SO_ERROR's, consumed) once it
// failed, and EAGAIN while it is still in progress. On loopback and a LAN the connect is
// usually done by the time connect(2) returns, so this one call replaces a poll(2) and a
// getsockopt(SO_ERROR).
int connect_outcome(int fd) {
  const char none = 0;
  for (;;) {
    if (::send(fd, &none, 0, MSG_NOSIGNAL) == 0) return 0;
    if (errno != EINTR) return errno;
  }
}

// A nonblocking connect, waited for in poll(2) until `until` if still in progress. The MPA
// handshake starts once it is done, so the Reply timeout never counts TCP's SYN retries.
Expected<SetupSocket, SetupResult> tcp_connect(const sockaddr_in& peer,
                                               const ConnectOptions& options,
                                               runtime::Clock::time_point until) {
  auto socket = runtime::make_tcp_socket();
  if (!socket) {
    return unexpected(failed(ConnectError::Kind::kUnreachable,
                             "cannot create a socket: " + runtime::errno_text(socket.error())));
  }
  runtime::Fd fd = std::move(*socket);
  if (const int err = runtime::tune_connection_socket(fd.get()); err != 0) {
    return unexpected(failed(ConnectError::Kind::kUnreachable,
                             "cannot set TCP_NODELAY: " + runtime::errno_text(err)));
  }
  int err = 0;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&peer), sizeof peer) != 0) {
    err = errno;
    if (err == EINPROGRESS) err = connect_outcome(fd.get());
    if (err == EAGAIN) {
      const short got = runtime::wait_for(fd.get(), POLLOUT, until);
      if (got == 0) return unexpected(timed_out(peer, options));
      err = got < 0 ? errno : runtime::socket_error(fd.get());
    }
  }
  if (err != 0) {
    return unexpected(failed(
        ConnectError::Kind::kUnreachable,
        "TCP connect to " + runtime::format_address(peer) + " failed: " + runtime::errno_text(err),
        err));
  }
  return SetupSocket{std::move(fd), peer, {}};
}

// One attempt: TCP connect and MPA setup, and the revision-1 reconnect it may ask for.
SetupResult attempt(runtime::EventLoop& loop, const sockaddr_in& peer,
                    const ConnectOptions& options) {
  const auto until = runtime::Clock::now() + options.timeout;
  for (bool fell_back = false;; fell_back = true) {
    auto socket = tcp_connect(peer, options, until);
    if (!socket) return std::move(socket.error());
    cm::MpaPolicy policy = options.policy;
    if (fell_back) policy.revision = wire::kMpaRevision1;
    auto session = std::make_shared<MpaSession>(
        loop, std::move(*socket),
        cm::MpaHandshake::initiator(policy, options.private_data, runtime::Clock::now()),
        options.caps, fell_back, MpaSession::Hooks{});
    auto result = session->run(until);
    if (!result) return timed_out(peer, options);
    if (!result->retry_revision1) return std::move(*result);
    if (fell_back) {
      return failed(ConnectError::Kind::kSetup, "the peer reset the revision-1 retry as well");
    }
  }
}

}  // namespace

SetupResult connect_on_caller(runtime::EventLoop& loop, const sockaddr_in& peer,
                              const ConnectOptions& options) {
  std::optional<std::mt19937_64> rng;  // seeded at the first retry: most connects need none
  for (std::uint32_t attempts = 1;; ++attempts) {
    SetupResult r = attempt(loop, peer, options);
    if (r.connection || !r.error || attempts > options.retries ||
        !retryable(*r.error, r.tcp_errno)) {
      if (r.error) r.error->attempts = attempts;
      return r;
    }
    if (!rng) rng.emplace(options.retry_seed != 0 ? options.retry_seed : fresh_seed());
    std::this_thread::sleep_for(retry_delay(options, attempts, *rng));
  }
}

}  // namespace rdma_interop::transport::tcp
