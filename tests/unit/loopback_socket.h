// loopback_socket.h - plain TCP sockets on 127.0.0.1 for tests that play a peer by hand.
//
// A test that checks what our providers and listeners do with a peer that is not ours (one
// that sends garbage, never speaks, cuts a Write where it likes, or is a plain TCP client)
// opens that peer's socket here. The descriptors are the caller's to close. A failed call is
// a test failure (EXPECT), and the descriptor is still returned, so the test goes on to fail
// on what it meant to check rather than on a crash.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

namespace rdma_interop::test_util {

inline sockaddr_in loopback_address(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A connected socket to 127.0.0.1:`port` (blocking, close-on-exec).
inline int connect_loopback(std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in a = loopback_address(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0)
      << "connect to 127.0.0.1:" << port;
  return fd;
}

// A listening socket on 127.0.0.1, on a port the kernel chose (stored in `port`).
inline int listen_loopback(std::uint16_t& port, int backlog = 4) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = loopback_address(0);
  EXPECT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(fd, backlog), 0);
  socklen_t length = sizeof a;
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &length), 0);
  port = ntohs(a.sin_port);
  return fd;
}

}  // namespace rdma_interop::test_util
