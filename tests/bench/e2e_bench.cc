// e2e_bench - the userspace iWARP provider against raw TCP, over loopback, in one run.
//
//   e2e_bench [--seconds S] [--connections N]
//
// Prints, for each measurement, our figure, the raw TCP baseline measured just before it
// in the same process, and the ratio (issue targets in brackets):
//   connection setup/s   rev 2 + Write RTR, connect until established on both sides,
//                        vs TCP connect + accept                              [>= 0.5x]
//   RDMA Write stream    64 KiB messages, CRC off and on, vs a TCP stream     [>= 0.9x, 0.75x]
//   64 B Send round trip vs a 64 B TCP ping-pong                              [<= 1.5x]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/transport/provider.h"

namespace {

using namespace rdma_interop;
using Clock = std::chrono::steady_clock;
using transport::Millis;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "e2e_bench: %s\n", why.c_str());
  std::exit(1);
}

// ---- raw TCP baselines ------------------------------------------------------------------

int tcp_listener(std::uint16_t& port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 512) != 0) {
    die("raw TCP listen failed");
  }
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return fd;
}

int tcp_connect(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("raw TCP connect failed");
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool read_all(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

bool write_all(int fd, const void* buf, std::size_t n) {
  auto* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t r = ::write(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

double tcp_connects_per_second(int n) {
  std::uint16_t port = 0;
  int lfd = tcp_listener(port);
  std::thread acceptor([&] {
    for (int i = 0; i < n; ++i) {
      int c = ::accept(lfd, nullptr, nullptr);
      char b;
      (void)read_all(c, &b, 1);  // the client's first octet: both ends are up
      ::close(c);
    }
  });
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    int fd = tcp_connect(port);
    char b = 1;
    (void)write_all(fd, &b, 1);
    ::close(fd);
  }
  acceptor.join();
  const double rate = n / seconds_since(t0);
  ::close(lfd);
  return rate;
}

double tcp_stream_gbps(double seconds, std::size_t chunk) {
  std::uint16_t port = 0;
  int lfd = tcp_listener(port);
  std::atomic<std::uint64_t> received{0};
  std::thread sink([&] {
    int c = ::accept(lfd, nullptr, nullptr);
    std::vector<char> buf(chunk);
    ssize_t r;
    while ((r = ::read(c, buf.data(), buf.size())) > 0) received += static_cast<std::uint64_t>(r);
    ::close(c);
  });
  int fd = tcp_connect(port);
  std::vector<char> data(chunk, 'x');
  const auto t0 = Clock::now();
  while (seconds_since(t0) < seconds) write_all(fd, data.data(), data.size());
  ::shutdown(fd, SHUT_WR);
  sink.join();
  const double gbps = received * 8.0 / seconds_since(t0) / 1e9;
  ::close(fd);
  ::close(lfd);
  return gbps;
}

double tcp_pingpong_us(int rounds) {
  std::uint16_t port = 0;
  int lfd = tcp_listener(port);
  std::thread echo([&] {
    int c = ::accept(lfd, nullptr, nullptr);
    int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char buf[64];
    while (read_all(c, buf, sizeof buf) && write_all(c, buf, sizeof buf)) {
    }
    ::close(c);
  });
  int fd = tcp_connect(port);
  char buf[64] = {};
  const auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    write_all(fd, buf, sizeof buf);
    read_all(fd, buf, sizeof buf);
  }
  const double us = seconds_since(t0) * 1e6 / rounds;
  ::close(fd);
  echo.join();
  ::close(lfd);
  return us;
}

// ---- our provider -------------------------------------------------------------------------

cm::MpaPolicy policy(bool crc) {
  cm::MpaPolicy p;
  p.crc = crc ? cm::CrcMode::kWant : cm::CrcMode::kOptional;
  p.peer_to_peer = cm::PeerToPeer::kOn;
  p.rtr_offer = {.write = true};
  return p;
}

// Two providers, as two hosts would have: each side gets its own event thread.
struct Lab {
  std::unique_ptr<transport::Provider> server;
  std::unique_ptr<transport::Provider> client;
  std::unique_ptr<transport::Listener> listener;
  transport::ProviderUri where;

  static std::unique_ptr<transport::Provider> open() {
    auto p = transport::open_provider("tcp");
    if (!p) die(p.error());
    return std::move(*p);
  }

  explicit Lab(bool crc) : server(open()), client(open()) {
    auto uri = transport::parse_provider_uri("tcp://127.0.0.1:0");
    auto l = server->listen(*uri, policy(crc), 512);
    if (!l) die(to_string(l.error()));
    listener = std::move(*l);
    where = *transport::parse_provider_uri("tcp://" + listener->local_address());
  }

  // Receives a side needs before the peer's first Send go in `caps.initial_recvs`: posted
  // after connect/accept returns, they could lose the race (DDP "no buffer").
  std::unique_ptr<transport::Connection> accept_one(const transport::QpCaps& caps = {}) {
    auto pending = listener->next_request(Millis(10000));
    if (!pending) die("no connect request arrived");
    auto c = pending->accept({}, caps);
    if (!c) die(to_string(c.error()));
    return std::move(*c);
  }

  std::unique_ptr<transport::Connection> connect(bool crc, const transport::QpCaps& caps = {}) {
    transport::ConnectOptions o;
    o.policy = policy(crc);
    o.caps = caps;
    auto c = client->connect(where, o);
    if (!c) die(to_string(c.error()));
    return std::move(*c);
  }
};

// Connect until established on both sides; the connections are closed after the clock
// stops (a raw TCP close costs nothing to wait for, an orderly iWARP close does).
double our_connects_per_second(int n) {
  Lab lab(true);
  std::vector<std::unique_ptr<transport::Connection>> accepted, connected;
  accepted.reserve(static_cast<std::size_t>(n));
  connected.reserve(static_cast<std::size_t>(n));
  const auto t0 = Clock::now();
  std::thread acceptor([&] {
    for (int i = 0; i < n; ++i) accepted.push_back(lab.accept_one());
  });
  for (int i = 0; i < n; ++i) connected.push_back(lab.connect(true));
  acceptor.join();
  const double rate = n / seconds_since(t0);
  connected.clear();
  accepted.clear();
  return rate;
}

// The sink advertises a 64 KiB region with a Send; the source streams RDMA Writes into it
// with up to `window` outstanding, then a final Send says how many octets went.
double our_write_stream_gbps(bool crc, double seconds, std::size_t chunk) {
  Lab lab(crc);
  std::vector<std::uint8_t> sink_buf(chunk), adv(16), done(16);
  std::uint64_t received = 0;
  std::thread sink([&] {
    auto c = lab.accept_one();
    const auto stag = c->register_memory(sink_buf.data(), sink_buf.size(),
                                         rdmap::kRemoteWrite | rdmap::kLocalWrite);
    const auto ctl = c->register_memory(done.data(), done.size(), rdmap::kLocalWrite);
    c->post_recv({.wr_id = 1, .sge = {reinterpret_cast<std::uint64_t>(done.data()), 16, ctl}});
    // Advertised by tagged offset (0 on the tcp provider), not by address.
    std::uint64_t msg[2] = {stag, c->tagged_offset(stag, sink_buf.data()).value_or(0)};
    const auto adv_key = c->register_memory(msg, sizeof msg, 0);
    c->post_send({.wr_id = 2, .opcode = rdmap::WrOpcode::kSend,
                  .sge = {reinterpret_cast<std::uint64_t>(msg), sizeof msg, adv_key}});
    for (;;) {
      auto wcs = c->poll_completions(16, Millis(30000));
      if (wcs.empty()) die("sink: no completion in 30 s");
      for (auto& wc : wcs) {
        if (wc.status != rdmap::WcStatus::kSuccess) {
          die("sink: completion " + std::string(rdmap::wc_status_name(wc.status)) + ": " +
              c->error_detail());
        }
        if (wc.opcode == rdmap::WcOpcode::kRecv) {
          std::memcpy(&received, done.data(), sizeof received);
          c->disconnect(Millis(1000));
          return;
        }
      }
    }
  });
  std::uint64_t remote[2] = {};
  transport::QpCaps caps;
  caps.initial_recvs.push_back({1, remote, sizeof remote});
  auto c = lab.connect(crc, caps);
  std::vector<std::uint8_t> src(chunk, 0x5a);
  const auto src_key = c->register_memory(src.data(), src.size(), 0);
  for (bool got = false; !got;) {
    for (auto& wc : c->poll_completions(4, Millis(10000))) got |= wc.opcode == rdmap::WcOpcode::kRecv;
  }
  constexpr int kWindow = 16;
  int outstanding = 0;
  std::uint64_t sent = 0;
  const auto t0 = Clock::now();
  while (seconds_since(t0) < seconds || outstanding > 0) {
    while (outstanding < kWindow && seconds_since(t0) < seconds) {
      if (c->post_send({.wr_id = 3, .opcode = rdmap::WrOpcode::kRdmaWrite,
                        .sge = {reinterpret_cast<std::uint64_t>(src.data()),
                                static_cast<std::uint32_t>(chunk), src_key},
                        .remote_stag = static_cast<std::uint32_t>(remote[0]),
                        .remote_addr = remote[1]})) {
        break;
      }
      ++outstanding;
    }
    for (auto& wc : c->poll_completions(kWindow, Millis(10000))) {
      if (wc.status != rdmap::WcStatus::kSuccess) {
        die("source: completion " + std::string(rdmap::wc_status_name(wc.status)) + ": " +
            c->error_detail());
      }
      --outstanding;
      sent += chunk;
    }
  }
  const double gbps = sent * 8.0 / seconds_since(t0) / 1e9;
  std::uint64_t total[2] = {sent, 0};
  const auto total_key = c->register_memory(total, sizeof total, 0);
  c->post_send({.wr_id = 4, .opcode = rdmap::WrOpcode::kSend,
                .sge = {reinterpret_cast<std::uint64_t>(total), sizeof total, total_key}});
  (void)c->poll_completions(1, Millis(10000));
  sink.join();
  if (received != sent) die("sink saw a different byte count than the source sent");
  c->disconnect(Millis(1000));
  return gbps;
}

double our_pingpong_us(int rounds) {
  Lab lab(true);
  std::thread echo([&] {
    std::vector<std::uint8_t> buf(64 * 8);
    transport::QpCaps caps;
    for (int i = 0; i < 8; ++i) caps.initial_recvs.push_back({std::uint64_t(i), &buf[64 * i], 64});
    auto c = lab.accept_one(caps);
    const auto key = c->register_memory(buf.data(), buf.size(), rdmap::kLocalWrite);
    auto addr = [&](int i) { return reinterpret_cast<std::uint64_t>(buf.data() + 64 * i); };
    for (int n = 0; n < rounds;) {
      for (auto& wc : c->poll_completions(8, Millis(10000))) {
        if (wc.opcode != rdmap::WcOpcode::kRecv) continue;
        const int i = static_cast<int>(wc.wr_id);
        c->post_send({.wr_id = 100, .opcode = rdmap::WrOpcode::kSend, .sge = {addr(i), 64, key},
                      .signaled = false});
        c->post_recv({.wr_id = std::uint64_t(i), .sge = {addr(i), 64, key}});
        ++n;
      }
    }
    c->disconnect(Millis(1000));
  });
  auto c = lab.connect(true);
  std::vector<std::uint8_t> buf(128);
  const auto key = c->register_memory(buf.data(), buf.size(), rdmap::kLocalWrite);
  const auto out = reinterpret_cast<std::uint64_t>(buf.data());
  const auto in = out + 64;
  const auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    c->post_recv({.wr_id = 1, .sge = {in, 64, key}});
    c->post_send({.wr_id = 2, .opcode = rdmap::WrOpcode::kSend, .sge = {out, 64, key},
                  .signaled = false});
    for (bool got = false; !got;) {
      for (auto& wc : c->poll_completions(4, Millis(10000))) got |= wc.opcode == rdmap::WcOpcode::kRecv;
    }
  }
  const double us = seconds_since(t0) * 1e6 / rounds;
  echo.join();
  c->disconnect(Millis(1000));
  return us;
}

void row(const char* what, double ours, double base, const char* unit, const char* target) {
  std::printf("%-34s %12.2f %12.2f %-8s %6.2fx  %s\n", what, ours, base, unit, ours / base,
              target);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0;
  int connections = 500;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--connections") {
      connections = std::atoi(argv[i + 1]);
    } else {
      die("usage: e2e_bench [--seconds S] [--connections N]");
    }
  }
  std::printf("%-34s %12s %12s %-8s %7s  %s\n", "loopback, same run", "ours", "raw TCP", "unit",
              "ratio", "target");
  const double tcp_c = tcp_connects_per_second(connections);
  row("connection setup (rev2 + RTR)", our_connects_per_second(connections), tcp_c, "conn/s",
      ">= 0.5x");
  const double tcp_s = tcp_stream_gbps(seconds, 64 * 1024);
  row("RDMA Write 64 KiB, CRC off", our_write_stream_gbps(false, seconds, 64 * 1024), tcp_s,
      "Gbit/s", ">= 0.9x");
  const double tcp_s2 = tcp_stream_gbps(seconds, 64 * 1024);
  row("RDMA Write 64 KiB, CRC on", our_write_stream_gbps(true, seconds, 64 * 1024), tcp_s2,
      "Gbit/s", ">= 0.75x");
  const int rounds = 20000;
  const double tcp_rtt = tcp_pingpong_us(rounds);
  row("64 B Send round trip", our_pingpong_us(rounds), tcp_rtt, "us", "<= 1.5x");
  return 0;
}
