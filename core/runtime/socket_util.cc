#include "core/runtime/socket_util.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rdma_interop::runtime {

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Expected<sockaddr_in, std::string> resolve_ipv4(const std::string& host, std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &address.sin_addr) == 1) return address;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return unexpected("cannot resolve '" + host +
                      "' to an IPv4 address: " + std::string(::gai_strerror(rc)));
  }
  address.sin_addr = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
  ::freeaddrinfo(found);
  return address;
}

std::string format_address(const sockaddr_in& address) {
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

std::string local_address_of(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  return format_address(address);
}

std::string peer_address_of(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "?";
  return format_address(address);
}

std::string errno_text(int err) {
  const char* name = ::strerrorname_np(err);
  return std::string(::strerror(err)) + " (" + (name != nullptr ? name : "?") + ")";
}

Expected<Fd, int> make_tcp_socket() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return unexpected(errno);
  return Fd(fd);
}

int tune_connection_socket(int fd) {
  const int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return errno;
  return 0;
}

int socket_error(int fd) {
  int err = 0;
  socklen_t length = sizeof err;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &length) != 0) return errno;
  return err;
}

void set_abortive_close(int fd) {
  const linger abort_now{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_now, sizeof abort_now);
}

void close_abortive(Fd& fd) {
  if (!fd) return;
  set_abortive_close(fd.get());
  fd.reset();
}

void close_graceful(Fd& fd) {
  if (!fd) return;
  ::shutdown(fd.get(), SHUT_WR);
  fd.reset();
}

IoResult read_some(int fd, std::span<std::uint8_t> into) {
  for (;;) {
    const ssize_t n = ::recv(fd, into.data(), into.size(), 0);
    if (n > 0) return IoResult{static_cast<std::size_t>(n)};
    if (n == 0) return IoResult{0, false, true};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult{0, true};
    return IoResult{0, false, false, errno};
  }
}

IoResult read_some(int fd, std::span<const iovec> parts) {
  for (;;) {
    const ssize_t n = ::readv(fd, parts.data(), static_cast<int>(parts.size()));
    if (n > 0) return IoResult{static_cast<std::size_t>(n)};
    if (n == 0) return IoResult{0, false, true};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult{0, true};
    return IoResult{0, false, false, errno};
  }
}

IoResult write_some(int fd, std::span<const iovec> parts) {
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(parts.data());
  message.msg_iovlen = parts.size();
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n >= 0) return IoResult{static_cast<std::size_t>(n)};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IoResult{0, true};
    return IoResult{0, false, false, errno};
  }
}

short wait_for(int fd, short events, std::chrono::steady_clock::time_point until) {
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    // poll(2) takes an int of milliseconds: a longer wait is done in day-long pieces.
    const auto piece = std::min<std::chrono::milliseconds::rep>(left.count(), 86'400'000);
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(piece));
    if (n > 0) return p.revents;
    if (n < 0 && errno != EINTR) return -1;
  }
}

bool write_all(int fd, std::span<const std::uint8_t> data,
               std::chrono::steady_clock::time_point until) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data = data.subspan(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EAGAIN) {
      if (wait_for(fd, POLLOUT, until) == 0) return false;
    } else if (n == 0 || errno != EINTR) {
      return false;
    }
  }
  return true;
}

}  // namespace rdma_interop::runtime
