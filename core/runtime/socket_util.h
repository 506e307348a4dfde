// socket_util.h - the few socket operations the providers need, with errors as values.
//
// Every socket is nonblocking and close-on-exec; connection sockets have TCP_NODELAY (an
// FPDU is a message: Nagle would hold a small Send behind the ACK of the previous one).
#pragma once

#include <netinet/in.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/util/expected.h"

namespace rdma_interop::runtime {

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// "198.18.0.2" or a host name (first IPv4 address) plus port.
Expected<sockaddr_in, std::string> resolve_ipv4(const std::string& host, std::uint16_t port);
std::string format_address(const sockaddr_in& address);  // "198.18.0.2:7174"
std::string local_address_of(int fd);
std::string peer_address_of(int fd);
std::string errno_text(int err);  // "Connection refused (ECONNREFUSED)"

// A nonblocking TCP socket, not yet connected.
Expected<Fd, int> make_tcp_socket();
// TCP_NODELAY on a connection socket (made nonblocking by socket() or accept4(), never
// by fcntl: two syscalls per connection saved); 0 or errno.
int tune_connection_socket(int fd);
// The pending error of a nonblocking connect (SO_ERROR): 0 when connected.
int socket_error(int fd);

// The peer sees an RST: SO_LINGER with a zero timeout, then close.
void close_abortive(Fd& fd);
// SO_LINGER with a zero timeout only: the RST goes out when the descriptor is closed.
void set_abortive_close(int fd);
// The peer sees a FIN after everything written so far; the kernel finishes the close.
void close_graceful(Fd& fd);

struct IoResult {
  std::size_t bytes = 0;
  bool would_block = false;  // EAGAIN: nothing (more) now
  bool eof = false;          // read: orderly close by the peer
  int error = 0;             // errno of a hard failure (ECONNRESET, EPIPE...)
};
IoResult read_some(int fd, std::span<std::uint8_t> into);
// One read filling `parts` in order (readv): a header, a payload read straight to its place,
// whatever follows it.
IoResult read_some(int fd, std::span<const iovec> parts);
// sendmsg with MSG_NOSIGNAL: a peer reset is an error value, never SIGPIPE.
IoResult write_some(int fd, std::span<const iovec> parts);

// poll(2) on one socket until `until` (a signal does not end the wait early): the revents
// (POLLIN, POLLOUT, POLLERR, POLLHUP), 0 when `until` passed first, -1 (errno set) when
// poll itself failed.
short wait_for(int fd, short events, std::chrono::steady_clock::time_point until);
// Writes all of `data` to a non-blocking socket (MSG_NOSIGNAL), waiting for room until
// `until`. False when it passed first or the socket failed.
bool write_all(int fd, std::span<const std::uint8_t> data,
               std::chrono::steady_clock::time_point until);

}  // namespace rdma_interop::runtime
