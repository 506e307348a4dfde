#include "tools/rdma-storm/raw_tcp_try.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

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

}  // namespace

TryResult raw_tcp_try(const transport::ProviderUri& target, Millis timeout, Millis hold) {
  sockaddr_in peer{};
  if (!resolve(target, peer)) return {Outcome::kOther, "unreachable"};
  SocketGuard s{::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
  if (s.fd < 0) return {Outcome::kOther, "socket"};
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(s.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);  // bounds connect() too
  ::setsockopt(s.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&peer), sizeof peer) != 0) {
    // SO_SNDTIMEO ran out before the SYN-ACK: the network's, not the server's doing.
    if (errno == EINPROGRESS || errno == ETIMEDOUT) return {Outcome::kTcpTimeout, {}};
    return {Outcome::kOther, "unreachable"};
  }
  char byte = 0;
  ssize_t n;
  do {
    n = ::recv(s.fd, &byte, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n != 1) return {Outcome::kExpired, {}};  // EOF, reset, or the timeout
  if (byte == 'R') return {Outcome::kOverflowRejected, {}};
  if (byte != 'A') return {Outcome::kOther, "unexpected_byte"};
  if (hold.count() > 0) std::this_thread::sleep_for(hold);
  return {Outcome::kConnected, {}};
}

}  // namespace rdma_interop::storm
