#include "core/transport/tcp/tcp_connector.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <thread>

#include "core/transport/connect_retry.h"
#include "core/transport/tcp/tcp_connection_state.h"

namespace rdma_interop::transport::tcp {

namespace {

SetupResult failed(ConnectError::Kind kind, std::string detail, int tcp_errno = 0) {
  ConnectError e = connect_error(kind, std::move(detail));
  e.sys_errno = tcp_errno;
  if (kind == ConnectError::Kind::kSetup) e.failure = cm::CmFailure::kConnectionReset;
  return SetupResult{nullptr, std::move(e), false};
}

// TCP connected, and MPA setup did not finish in time: the peer took the connection and then
// kept us waiting (no Reply, or no RTR), which is not what an unreachable peer does.
SetupResult timed_out(const sockaddr_in& peer, const ConnectOptions& options) {
  return failed(ConnectError::Kind::kTimeout,
                "TCP connected to " + runtime::format_address(peer) +
                    ", but MPA setup did not finish within " +
                    std::to_string(options.timeout.count()) + " ms");
}

// The TCP connect itself got no answer (no SYN-ACK: a blackholed port, a full accept queue):
// the peer is unreachable, not a listener that kept us waiting (provider.h, kUnreachable).
SetupResult syn_timed_out(const sockaddr_in& peer, const ConnectOptions& options) {
  return failed(ConnectError::Kind::kUnreachable,
                "TCP connect to " + runtime::format_address(peer) + " got no answer within " +
                    std::to_string(options.timeout.count()) + " ms",
                ETIMEDOUT);
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
      if (got == 0) return unexpected(syn_timed_out(peer, options));
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
  RetrySchedule schedule(options);
  for (std::uint32_t attempts = 1;; ++attempts) {
    SetupResult r = attempt(loop, peer, options);
    if (r.connection || !r.error) return r;
    r.error->attempts = attempts;
    const auto wait = schedule.after_failure(*r.error, attempts);
    if (!wait) return r;
    std::this_thread::sleep_for(*wait);
  }
}

}  // namespace rdma_interop::transport::tcp
