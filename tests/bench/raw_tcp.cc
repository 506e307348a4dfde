#include "raw_tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "core/runtime/socket_util.h"

namespace rdma_interop::bench {
namespace {

using runtime::Fd;

std::string failed(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  return a;
}

// A listener on 127.0.0.1 with a kernel-chosen port, returned in `port`.
Expected<int, std::string> listen_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unexpected(failed("socket"));
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 512) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::string why = failed("listen on 127.0.0.1");
    ::close(fd);
    return unexpected(why);
  }
  port = ntohs(a.sin_port);
  return fd;
}

Expected<int, std::string> connect_loopback(std::uint16_t port, bool nodelay) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return unexpected(failed("socket"));
  const sockaddr_in a = loopback(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    std::string why = failed("connect to 127.0.0.1");
    ::close(fd);
    return unexpected(why);
  }
  const int one = 1;
  if (nodelay) ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Both ends of one loopback connection (`out` connected, `in` accepted).
struct Pair {
  Fd out;
  Fd in;
};

Expected<Pair, std::string> loopback_pair(bool nodelay) {
  std::uint16_t port = 0;
  auto lfd = listen_loopback(port);
  if (!lfd) return unexpected(lfd.error());
  const Fd listener(*lfd);
  auto fd = connect_loopback(port, nodelay);
  if (!fd) return unexpected(fd.error());
  Pair pair{Fd(*fd), Fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC))};
  if (!pair.in) return unexpected(failed("accept"));
  const int one = 1;
  if (nodelay) ::setsockopt(pair.in.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return pair;
}

bool read_all(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, std::size_t n) {
  const auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

}  // namespace

namespace {

// Connections/s: the client connects (TCP_NODELAY on both ends) and runs `talk` on each connection,
// one after the other; an acceptor thread accepts each and runs `answer` on it. Both return false
// when the exchange failed. `what` names the exchange in errors.
template <class Talk, class Answer>
Expected<Measured, std::string> connects_per_second(const CostMeter& meter, int n, Talk talk,
                                                    Answer answer, const std::string& what) {
  const auto before = meter.sample();
  std::uint16_t port = 0;
  auto lfd = listen_loopback(port);
  if (!lfd) return unexpected(lfd.error());
  Fd listener(*lfd);
  // Accepted sockets inherit it, as the tcp provider's do: no setsockopt per accept.
  const int one = 1;
  ::setsockopt(listener.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::atomic<int> accept_failures{0};
  const auto t0 = Clock::now();
  std::thread acceptor([&] {
    for (int i = 0; i < n; ++i) {
      const Fd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!c || !answer(c.get())) ++accept_failures;
    }
  });
  std::string error;
  for (int i = 0; i < n && error.empty(); ++i) {
    auto fd = connect_loopback(port, true);
    if (!fd) {
      error = fd.error();
      break;
    }
    const Fd c(*fd);
    if (!talk(c.get())) error = failed(what.c_str());
  }
  if (!error.empty()) ::shutdown(listener.get(), SHUT_RDWR);  // unblocks the acceptor
  acceptor.join();
  const double rate = n / seconds_since(t0);
  listener.reset();
  if (!error.empty()) return unexpected("raw TCP connect: " + error);
  if (accept_failures > 0) return unexpected("raw TCP " + what + " failed on the accepting side");
  return Measured{rate, per_op(before, meter.sample(), n)};
}

}  // namespace

Expected<Measured, std::string> tcp_connects_per_second(const CostMeter& meter, int n) {
  return connects_per_second(
      meter, n,
      [](int fd) {
        const char b = 1;
        return write_all(fd, &b, 1);
      },
      [](int fd) {
        char b;
        return read_all(fd, &b, 1);
      },
      "first octet");
}

Expected<Measured, std::string> tcp_mpa_shaped_connects_per_second(const CostMeter& meter,
                                                                   int n) {
  constexpr std::size_t kFrame = 20;  // an MPA frame without private data; an RTR is as long
  return connects_per_second(
      meter, n,
      [](int fd) {
        char frame[kFrame] = {};
        return write_all(fd, frame, kFrame) && read_all(fd, frame, kFrame) &&
               write_all(fd, frame, kFrame);
      },
      [](int fd) {  // TCP_NODELAY comes from the listener
        char frame[kFrame] = {};
        return read_all(fd, frame, kFrame) && write_all(fd, frame, kFrame) &&
               read_all(fd, frame, kFrame);
      },
      "MPA-shaped exchange");
}

Expected<Measured, std::string> tcp_stream_gbps(const CostMeter& meter, double seconds,
                                                std::size_t write_size) {
  auto pair = loopback_pair(false);
  if (!pair) return unexpected(pair.error());
  const int in = pair->in.get();
  const int out = pair->out.get();

  std::uint64_t received = 0;
  const auto before = meter.sample();
  const auto t0 = Clock::now();
  std::thread sink([&] {
    std::vector<char> buf(write_size);
    ssize_t r;
    while ((r = ::read(in, buf.data(), buf.size())) > 0)
      received += static_cast<std::uint64_t>(r);
  });
  std::vector<char> data(write_size, 'x');
  bool ok = true;
  while (ok && seconds_since(t0) < seconds) ok = write_all(out, data.data(), data.size());
  ::shutdown(out, SHUT_WR);
  sink.join();
  const double elapsed = seconds_since(t0);
  const auto after = meter.sample();
  if (!ok) return unexpected(failed("raw TCP stream write"));
  return Measured{received * 8.0 / elapsed / 1e9, per_op(before, after, received / 65536.0)};
}

Expected<Measured, std::string> tcp_round_trip_us(const CostMeter& meter, int rounds) {
  auto pair = loopback_pair(true);
  if (!pair) return unexpected(pair.error());
  const int server = pair->in.get();
  const int client = pair->out.get();

  std::thread echo([&] {
    char buf[64];
    while (read_all(server, buf, sizeof buf) && write_all(server, buf, sizeof buf)) {
    }
  });
  char buf[64] = {};
  bool ok = true;
  const auto before = meter.sample();
  const auto t0 = Clock::now();
  for (int i = 0; ok && i < rounds; ++i) {
    ok = write_all(client, buf, sizeof buf) && read_all(client, buf, sizeof buf);
  }
  const double us = seconds_since(t0) * 1e6 / rounds;
  const auto after = meter.sample();
  ::shutdown(client, SHUT_WR);  // the echo thread reads end of stream and returns
  echo.join();
  if (!ok) return unexpected(failed("raw TCP round trip"));
  return Measured{us, per_op(before, after, rounds)};
}

}  // namespace rdma_interop::bench
