#include "tools/rdma-storm/raw_tcp_try.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <thread>

#include "core/cm/cm_failure.h"

namespace rdma_interop::storm {
namespace {

// Closes the socket on every path out.
struct SocketGuard {
  int fd;
  ~SocketGuard() {
    if (fd >= 0) ::close(fd);
  }
};

bool resolve(const transport::ProviderUri& target, sockaddr_in& out) {
  out = {};
  out.sin_family = AF_INET;
  out.sin_port = htons(target.port);
  if (inet_pton(AF_INET, target.host.c_str(), &out.sin_addr) == 1) return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(target.host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    return false;
  }
  out.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return true;
}

// The failure a provider's connect would report for the same event, so that the raw
// baseline is classified and retried (core/transport/connect_retry.h) as our provider is.
TryResult failed(transport::ConnectError::Kind kind, int sys_errno,
                 std::optional<cm::CmFailure> failure = std::nullopt) {
  transport::ConnectError error;
  error.kind = kind;
  error.sys_errno = sys_errno;
  error.failure = failure;
  return classify(error);
}

}  // namespace

TryResult raw_tcp_try(const transport::ProviderUri& target, Millis timeout, Millis hold) {
  using Kind = transport::ConnectError::Kind;
  sockaddr_in peer{};
  if (!resolve(target, peer)) return failed(Kind::kUnreachable, 0);
  SocketGuard s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) {
    return {Outcome::kOther, "socket", failed(Kind::kInvalidArgument, errno).failure};
  }
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // bounds connect() too
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&peer), sizeof peer) != 0) {
    // SO_SNDTIMEO ran out before the SYN-ACK: the network's, not the server's doing.
    if (errno == EINPROGRESS || errno == ETIMEDOUT) return failed(Kind::kUnreachable, ETIMEDOUT);
    return failed(Kind::kUnreachable, errno);
  }
  char byte = 0;
  ssize_t n;
  do {
    n = ::recv(s.fd, &byte, 1, 0);
  } while (n < 0 && errno == EINTR);
  // No byte: as a provider's setup that the listener closed, reset or left unanswered.
  if (n == 0) return failed(Kind::kSetup, 0, cm::CmFailure::kConnectionClosed);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    return failed(Kind::kSetup, 0, cm::CmFailure::kReplyTimeout);
  }
  if (n < 0) return failed(Kind::kSetup, 0, cm::CmFailure::kConnectionReset);
  if (byte == 'R') return failed(Kind::kSetup, 0, cm::CmFailure::kBacklogFull);
  if (byte != 'A') {
    return {Outcome::kOther, "unexpected_byte",
            failed(Kind::kSetup, 0, cm::CmFailure::kUnexpectedFrame).failure};
  }
  if (hold.count() > 0) std::this_thread::sleep_for(hold);
  return {Outcome::kConnected};
}

}  // namespace rdma_interop::storm
