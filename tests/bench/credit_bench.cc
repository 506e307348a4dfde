// credit_bench - message endpoints with end-to-end credits (issue 6) on loopback, each figure
// next to a baseline measured in the same run.
//
//   credit_bench [--seconds S] [--size N] [--window W]...   (default windows 16, 256, 1024)
//   credit_bench --profile ours ...   our message rate only, for a profiler (no baseline)
//
//   64 B message rate   one MessageEndpoint sending to another as fast as credits allow, one
//                       direction, vs raw TCP messages pipelined over one connection (a 4-octet
//                       length then the payload, one write() per message, the reader parsing
//                       them out of 64 KiB reads)      [window 16: >= 0.8x; 256 and up: >= 0.95x]
//                       once per --window (receive buffers per peer: the credits), with how
//                       often send() was refused (queue full), how many standalone credit
//                       updates came back, and what a message costs the process (both sides):
//                       context switches (a message or grant handed from one thread to
//                       another is one at least) and syscalls, ours and raw TCP's
//   healthy peers       one endpoint sending unthrottled to three receivers, round robin,
//                       kTryAgain skipping a peer until on_ready; the messages/s the two
//                       healthy receivers get while the third stops consuming (it holds every
//                       message and never answers), vs the same with the third healthy
//
// Each endpoint has a tcp provider of its own (its own event thread), as separate processes
// would. Messages go with the default MPA policy (CRC on). Build Release for numbers that mean
// anything; tools/bench-credit.sh runs it.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/messaging/message_endpoint.h"
#include "core/transport/provider.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/op_cost.h"

namespace {

using namespace rdma_interop;
using bench::Clock;
using bench::die;
using bench::seconds_since;
using messaging::MessageEndpoint;
using messaging::PeerId;
using messaging::SendStatus;
using transport::Millis;

// ---- raw TCP baseline ---------------------------------------------------------------------

struct Rate {
  double messages_per_s = 0;
  bench::PerOp cost;  // per message delivered, the whole process (sender and receiver)
};

Rate tcp_message_rate(const bench::CostMeter& meter, double seconds, std::uint32_t size) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 4) != 0) {
    die("raw TCP listen failed");
  }
  socklen_t len = sizeof a;
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  int cfd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(cfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("raw TCP connect");
  int one = 1;
  ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  int sfd = ::accept(lfd, nullptr, nullptr);
  ::close(lfd);

  std::atomic<std::uint64_t> received{0};
  std::thread reader([&] {
    // Parses length-prefixed messages out of whatever the stream hands over, as a messaging
    // layer on TCP must: the per-message work the baseline pays.
    std::vector<std::uint8_t> buf(64 * 1024);
    std::size_t have = 0;
    std::uint64_t count = 0;
    for (;;) {
      ssize_t r = ::read(sfd, buf.data() + have, buf.size() - have);
      if (r <= 0) break;
      have += static_cast<std::size_t>(r);
      std::size_t at = 0;
      while (have - at >= 4) {
        std::uint32_t n;
        std::memcpy(&n, buf.data() + at, 4);
        n = ntohl(n);
        if (have - at < 4 + n) break;
        at += 4 + n;
        ++count;
      }
      std::memmove(buf.data(), buf.data() + at, have - at);
      have -= at;
      received.store(count, std::memory_order_relaxed);
    }
  });

  std::vector<std::uint8_t> msg(4 + size, 0x5a);
  const std::uint32_t n = htonl(size);
  std::memcpy(msg.data(), &n, 4);
  const auto t0 = Clock::now();
  const auto start_count = received.load();
  const auto cost_before = meter.sample();
  while (seconds_since(t0) < seconds) {
    // One message per write(): the sender does not know what comes next, as with post_send.
    for (int i = 0; i < 64; ++i) {
      if (::write(cfd, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) {
        die("raw TCP write failed");
      }
    }
  }
  const double elapsed = seconds_since(t0);
  const auto cost_after = meter.sample();
  const double delivered = static_cast<double>(received.load() - start_count);
  ::shutdown(cfd, SHUT_WR);
  reader.join();
  ::close(cfd);
  ::close(sfd);
  return Rate{delivered / elapsed, bench::per_op(cost_before, cost_after, delivered)};
}

// ---- message endpoints --------------------------------------------------------------------

std::unique_ptr<transport::Provider> tcp_provider() {
  auto p = transport::open_provider("tcp");
  if (!p) die(p.error());
  return std::move(*p);
}

messaging::EndpointConfig endpoint_config(std::uint32_t window) {
  messaging::EndpointConfig c;
  c.max_message = 4096;
  c.receive_window = window;
  c.send_queue_depth = window + c.control_send_slots;
  return c;
}

// A receiving endpoint with its own provider and listener; counts what arrives. A stalled one
// holds every message and never answers: its credits stop coming back.
struct Receiver {
  std::unique_ptr<transport::Provider> provider = tcp_provider();
  std::unique_ptr<transport::Listener> listener;
  std::unique_ptr<MessageEndpoint> endpoint;
  std::atomic<std::uint64_t> received{0};
  std::atomic<bool> stalled{false};

  Receiver(std::uint32_t window)
      : endpoint(std::make_unique<MessageEndpoint>(endpoint_config(window))) {
    endpoint->on_message([this](const messaging::Message& m) {
      if (stalled.load(std::memory_order_relaxed)) {
        endpoint->hold(m.id);
        return;
      }
      received.fetch_add(1, std::memory_order_relaxed);
    });
    auto uri = transport::parse_provider_uri("tcp://127.0.0.1:0");
    auto l = provider->listen(*uri, cm::MpaPolicy{}, transport::ListenOptions(4));
    if (!l) die("listen: " + transport::to_string(l.error()));
    listener = std::move(*l);
  }
};

// Connects `sender` to `r`; returns the sender's id for it.
PeerId connect(MessageEndpoint& sender, transport::Provider& provider, Receiver& r,
               const std::string& name) {
  auto uri = transport::parse_provider_uri("tcp://" + r.listener->local_address());
  std::optional<PeerId> id;
  std::string error;
  std::thread caller([&] {
    auto c = sender.connect(provider, *uri, transport::ConnectOptions{}, name);
    if (c) {
      id = *c;
    } else {
      error = transport::to_string(c.error());
    }
  });
  auto pending = r.listener->next_request(Millis(10000));
  if (!pending) die("no connect request");
  auto a = r.endpoint->accept(*pending, "sender");
  caller.join();
  if (!a) die("accept: " + transport::to_string(a.error()));
  if (!id) die("connect: " + error);
  return *id;
}

// Sends to every peer in `ids` as fast as credits allow for `seconds`, round robin: a peer that
// refuses is skipped until on_ready says it has room (or 10 ms pass).
void send_unthrottled(MessageEndpoint& ep, const std::vector<PeerId>& ids, std::mutex& mu,
                      std::condition_variable& ready, std::uint64_t& ready_events,
                      std::uint32_t size, double seconds) {
  std::vector<std::uint8_t> payload(size, 0x5a);
  std::vector<bool> blocked(ids.size(), false);
  const auto t0 = Clock::now();
  while (seconds_since(t0) < seconds) {
    bool progress = false;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (blocked[i]) continue;
      const auto s = ep.send(ids[i], payload);
      if (s == SendStatus::kOk) {
        progress = true;
      } else if (s == SendStatus::kTryAgain) {
        blocked[i] = true;
      } else {
        die(std::string("send: ") + std::string(messaging::status_name(s)));
      }
    }
    if (progress) continue;
    std::unique_lock lock(mu);
    const auto seen = ready_events;
    ready.wait_for(lock, Millis(10), [&] { return ready_events != seen; });
    std::fill(blocked.begin(), blocked.end(), false);
  }
}

struct Sender {
  std::unique_ptr<transport::Provider> provider = tcp_provider();
  // Before the endpoint: its on_ready uses them until it is destroyed.
  std::mutex mu;
  std::condition_variable ready;
  std::uint64_t ready_events = 0;
  MessageEndpoint endpoint;

  explicit Sender(std::uint32_t window) : endpoint(endpoint_config(window)) {
    endpoint.on_ready([this](PeerId) {
      {
        std::lock_guard lock(mu);
        ++ready_events;
      }
      ready.notify_all();
    });
  }
  void run(const std::vector<PeerId>& ids, std::uint32_t size, double seconds) {
    send_unthrottled(endpoint, ids, mu, ready, ready_events, size, seconds);
  }
};

struct CreditRate {
  double messages_per_s = 0;
  double refused_per_1000 = 0;  // send() calls refused (queue full: no credit for long), per 1000
  double updates_per_1000 = 0;  // standalone credit updates the receiver sent, per 1000
  bench::PerOp cost;            // per message delivered, both endpoints
};

CreditRate credit_message_rate(const bench::CostMeter& meter, double seconds, std::uint32_t size,
                               std::uint32_t window) {
  Receiver r(window);
  Sender s(window);
  const PeerId id = connect(s.endpoint, *s.provider, r, "receiver");
  s.run({id}, size, 0.3);  // warm up
  const auto before = r.received.load();
  const auto stats_before = s.endpoint.stats(id);
  const auto cost_before = meter.sample();
  const auto t0 = Clock::now();
  s.run({id}, size, seconds);
  const double elapsed = seconds_since(t0);
  const auto cost_after = meter.sample();
  const auto stats_after = s.endpoint.stats(id);
  const double delivered = static_cast<double>(r.received.load() - before);
  CreditRate out;
  out.messages_per_s = delivered / elapsed;
  out.cost = bench::per_op(cost_before, cost_after, delivered);
  if (stats_before && stats_after && delivered > 0) {
    out.refused_per_1000 =
        1000.0 * static_cast<double>(stats_after->refused - stats_before->refused) / delivered;
    out.updates_per_1000 = 1000.0 *
                           static_cast<double>(stats_after->credit.updates_received -
                                               stats_before->credit.updates_received) /
                           delivered;
  }
  return out;
}

// Messages/s the first two of three receivers get; with `stall`, the third holds everything.
double healthy_peer_rate(double seconds, std::uint32_t size, std::uint32_t window, bool stall) {
  std::vector<std::unique_ptr<Receiver>> rs;
  for (int i = 0; i < 3; ++i) rs.push_back(std::make_unique<Receiver>(window));
  Sender s(window);
  std::vector<PeerId> ids;
  for (int i = 0; i < 3; ++i) {
    std::string name = "r";  // not `"r" + std::to_string(i)`: GCC 12 -Wrestrict bug 105329
    name += std::to_string(i);
    ids.push_back(connect(s.endpoint, *s.provider, *rs[i], name));
  }
  rs[2]->stalled = stall;
  s.run(ids, size, 0.3);  // warm up (and, stalled, the third peer's credits run out)
  const auto before = rs[0]->received.load() + rs[1]->received.load();
  const auto t0 = Clock::now();
  s.run(ids, size, seconds);
  const double elapsed = seconds_since(t0);
  const auto after = rs[0]->received.load() + rs[1]->received.load();
  if (stall) {
    auto st = s.endpoint.stats(ids[2]);
    if (!st || st->refused == 0) die("the stalled receiver never refused: not a stall");
  }
  return static_cast<double>(after - before) / elapsed;
}

void row(const char* what, double ours, double base, const char* unit, const char* target) {
  std::printf("%-40s %12.0f %12.0f %-6s %6.2fx  %s\n", what, ours, base, unit, ours / base, target);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 2.0;
  std::uint32_t size = 64;
  std::vector<std::uint32_t> windows;
  bool profile_ours = false;  // only our message rate, for a profiler: no baseline, no ratio
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") {
      seconds = std::atof(argv[i + 1]);
    } else if (flag == "--size") {
      size = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
    } else if (flag == "--window") {
      windows.push_back(static_cast<std::uint32_t>(std::atoi(argv[i + 1])));
    } else if (flag == "--profile" && std::string(argv[i + 1]) == "ours") {
      profile_ours = true;
    } else {
      die("usage: credit_bench [--seconds S] [--size N] [--window W]... [--profile ours]");
    }
  }
  if (windows.empty()) windows = {16, 256, 1024};
  for (auto w : windows) {
    if (w < 2 || w > 0xFFFF) die("--window must be 2..65535");
  }
  if (size == 0 || size > 4096 || seconds <= 0) die("bad --size or --seconds");
  // Before any thread starts: the syscall counter follows the threads made after it.
  const auto meter = bench::CostMeter::open();
  if (profile_ours) {
    for (auto w : windows) {
      const auto ours = credit_message_rate(meter, seconds, size, w);
      std::printf("window %u: %.0f msg/s (no baseline: --profile ours)\n", w, ours.messages_per_s);
    }
    return 0;
  }
  std::printf("%-40s %12s %12s %-6s %7s  %s\n", "loopback, same run", "ours", "baseline", "unit",
              "ratio", "target");
  auto syscalls = [](const bench::PerOp& c) {
    return c.syscalls ? std::to_string(*c.syscalls).substr(0, 5) : std::string("n/a");
  };
  for (auto w : windows) {
    char what[64];
    std::snprintf(what, sizeof what, "%u B messages, window %u, vs raw TCP", size, w);
    const auto tcp = tcp_message_rate(meter, seconds, size);
    const auto ours = credit_message_rate(meter, seconds, size, w);
    row(what, ours.messages_per_s, tcp.messages_per_s, "msg/s", w < 256 ? ">= 0.8x" : ">= 0.95x");
    std::printf(
        "    per 1000 messages: %.1f send() calls refused (queue full), %.1f standalone "
        "credit updates\n",
        ours.refused_per_1000, ours.updates_per_1000);
    std::printf(
        "    per message, both sides: %.3f context switches (%.3f voluntary), %s syscalls; raw "
        "TCP %.3f (%.3f), %s\n",
        ours.cost.context_switches(), ours.cost.voluntary_switches, syscalls(ours.cost).c_str(),
        tcp.cost.context_switches(), tcp.cost.voluntary_switches, syscalls(tcp.cost).c_str());
  }
  if (!meter.unavailable().empty())
    std::printf("    (syscalls: %s)\n", meter.unavailable().c_str());
  const std::uint32_t w = windows.front();
  const double healthy = healthy_peer_rate(seconds, size, w, false);
  char what[64];
  std::snprintf(what, sizeof what, "2 healthy of 3, 3rd stalled vs not (w %u)", w);
  row(what, healthy_peer_rate(seconds, size, w, true), healthy, "msg/s", ">= 0.95x");
  return 0;
}
