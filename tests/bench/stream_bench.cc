// stream_bench - the stream layer (core/stream, issue 24) against raw TCP, over loopback, in
// one run.
//
//   stream_bench [--seconds S] [--rounds N] [--opens N] [--idle N] [--json PATH]
//                [--require-counters]
//
// Two stream endpoints, each with its own tcp provider (its own event thread, as two hosts
// would have), one session between them; client and server are threads of this process, as
// the raw TCP baselines' are (raw_tcp.h). Prints, for each measurement, our figure, the
// baseline measured in the same run, the ratio and issue 24's target:
//   64 KiB stream throughput   one stream, 64 KiB sends, in five rounds; each round's run
//                              against the best raw TCP stream run just before and just
//                              after it (64 KiB and 1 MiB writes) and iperf3; the median
//                              round's ratio                                       [>= 0.9x]
//                              and, to explain it, the same stream in 256 KiB sends
//   64 B request/response      one round trip at a time, vs a 64 B TCP ping-pong   [<= 1.3x]
//   streams opened/s           over the existing session, as the baseline does TCP's: open
//                              with one octet and close, the acceptor accepting, reading it
//                              and closing, vs TCP connect + accept + first octet + close;
//                              the median of three runs of each                    [>= 5x]
//                              and, to explain it, with the octet echoed back before the
//                              close: one at a time, and 64 in flight
//   memory                     --idle streams open and idle between two endpoints: receive
//                              buffer octets per stream (the session's channel buffers shared
//                              out, plus what each stream holds) and the RSS delta per stream,
//                              each side                                        [< 64 KiB]
// then, per operation, context switches and syscalls of the whole process (op_cost.h), and
// the stream layer's own messages and RDMA Writes, for throughput and the round trip.
//
// The idle streams' server end runs in a child process, as on another node: each side's RSS
// delta is its own ends' alone. (It also keeps the figure honest for a program that polls
// every stream: each end then has an eventfd, and two ends of 10,000 streams would not fit
// one process's descriptor limit, 20,000 here.) The child is forked first, before this
// process has any other thread.
//
// A missed target is a result, not a failure: the exit status is 1 only on errors (and with
// --require-counters, when syscalls cannot be counted).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_report.h"
#include "bench_util.h"
#include "core/stream/stream_endpoint.h"
#include "core/transport/provider.h"
#include "core/transport/provider_uri.h"
#include "iperf3.h"
#include "op_cost.h"
#include "raw_tcp.h"

namespace {

using namespace rdma_interop;
using namespace std::chrono_literals;
using bench::Clock;
using bench::CostMeter;
using bench::die;
using bench::Measured;
using bench::load_average;
using bench::or_die;
using bench::Report;
using bench::finish_report;
using bench::seconds_since;
using bench::start_report;
using bench::Target;
using stream::SessionCounters;
using stream::SessionId;
using stream::StreamEndpoint;
using stream::StreamRef;

constexpr std::uint16_t kPort = 5201;
constexpr auto kWait = 10s;  // any single wait of the benchmark; longer is a failure

std::unique_ptr<transport::Provider> tcp() {
  return or_die(transport::open_provider("tcp"));
}

// ---- the stream layer ---------------------------------------------------------------------

void send_all(StreamEndpoint& ep, StreamRef s, std::span<const std::uint8_t> data) {
  while (!data.empty()) {
    auto n = ep.send(s, data, {.timeout = kWait});
    if (!n) die("send: " + std::string(stream::errc_name(n.error())));
    data = data.subspan(*n);
  }
}

// Exactly out.size() octets; false at the end of stream before the first.
bool recv_exact(StreamEndpoint& ep, StreamRef s, std::span<std::uint8_t> out) {
  bool first = true;
  while (!out.empty()) {
    auto n = ep.recv(s, out, {.timeout = kWait});
    if (!n) die("recv: " + std::string(stream::errc_name(n.error())));
    if (*n == 0) {
      if (first) return false;
      die("recv: the end of stream in the middle of a message");
    }
    first = false;
    out = out.subspan(*n);
  }
  return true;
}

// Two endpoints and the session between them; the server listens on kPort.
struct Lab {
  StreamEndpoint server;
  StreamEndpoint client{tcp(), {}};
  SessionId session = 0;

  explicit Lab(const stream::StreamEndpointConfig& server_config = {})
      : server(tcp(), server_config) {
    auto where = server.serve(*transport::parse_provider_uri("tcp://127.0.0.1:0"));
    if (!where) die(where.error());
    server.listen(kPort);
    session = or_die(client.connect(*where));
  }

  std::pair<StreamRef, StreamRef> stream() {
    auto c = client.open(session, kPort);
    if (!c) die("open: " + std::string(stream::errc_name(c.error())));
    auto s = server.accept(kPort, kWait);
    if (!s) die("accept: " + std::string(stream::errc_name(s.error())));
    return {*c, *s};
  }

  // One stream opened, accepted and closed: the session and both ends warm.
  void warm() {
    auto [c, s] = stream();
    client.close(c);
    server.close(s);
  }

  // The next stream opened to kPort, accepted, and its first octet (into `b`).
  StreamRef accept_first_octet(std::uint8_t& b) {
    auto s = server.accept(kPort, kWait);
    if (!s) die("accept: " + std::string(stream::errc_name(s.error())));
    if (!recv_exact(server, *s, {&b, 1})) die("an opened stream sent nothing");
    return *s;
  }

  // What both sessions (the two ends) handed to the channel.
  struct Traffic {
    double messages = 0;
    double writes = 0;
    double bytes_placed = 0;
    double bytes_borrowed = 0;  // of bytes_placed, Written from the application's buffer
    double bytes_copied = 0;
    double octets_read_to_place = 0;  // read by the receiving side straight into place
  };
  Traffic traffic() const {
    Traffic t;
    auto add = [&](const StreamEndpoint& ep, SessionId id) {
      if (auto c = ep.counters(id)) {
        t.messages += static_cast<double>(c->messages);
        t.writes += static_cast<double>(c->writes);
        t.bytes_placed += static_cast<double>(c->bytes_placed);
        t.bytes_borrowed += static_cast<double>(c->bytes_borrowed);
        t.bytes_copied += static_cast<double>(c->bytes_copied);
      }
      if (auto st = ep.session_stats(id)) {
        t.octets_read_to_place += static_cast<double>(st->receive.octets_placed);
      }
    };
    add(client, session);
    for (SessionId id : server.sessions()) add(server, id);
    return t;
  }
};

// A figure, its costs, and the stream layer's traffic per operation.
struct Ours {
  Measured m;
  Lab::Traffic per_op;
};

Lab::Traffic per_op(const Lab::Traffic& before, const Lab::Traffic& after, double ops) {
  return {(after.messages - before.messages) / ops, (after.writes - before.writes) / ops,
          (after.bytes_placed - before.bytes_placed) / ops,
          (after.bytes_borrowed - before.bytes_borrowed) / ops,
          (after.bytes_copied - before.bytes_copied) / ops,
          (after.octets_read_to_place - before.octets_read_to_place) / ops};
}

// One stream, `chunk`-octet sends for `seconds`, the reader on a thread of its own reading
// up to 256 KiB at a time; the clock stops when the reader has read the end of stream. Costs
// per 64 KiB carried, as the raw stream's.
Ours our_stream_gbps(const CostMeter& meter, double seconds, std::size_t chunk) {
  Lab lab;
  auto [c, s] = lab.stream();
  std::uint64_t received = 0;
  const auto traffic0 = lab.traffic();
  const auto before = meter.sample();
  const auto t0 = Clock::now();
  std::thread reader([&, s = s] {
    std::vector<std::uint8_t> buf(256 * 1024);
    for (;;) {
      auto n = lab.server.recv(s, buf, {.timeout = kWait});
      if (!n) die("reader: " + std::string(stream::errc_name(n.error())));
      if (*n == 0) return;
      received += *n;
    }
  });
  const std::vector<std::uint8_t> data(chunk, 0x5a);
  while (seconds_since(t0) < seconds) send_all(lab.client, c, data);
  if (!lab.client.shutdown_write(c)) die("shutdown_write failed");
  reader.join();
  const double elapsed = seconds_since(t0);
  const auto after = meter.sample();
  const double ops = static_cast<double>(received) / 65536.0;
  return {{static_cast<double>(received) * 8 / elapsed / 1e9, bench::per_op(before, after, ops)},
          per_op(traffic0, lab.traffic(), ops)};
}

// 64-octet requests echoed back, one at a time. Costs per round trip, both sides.
Ours our_round_trip_us(const CostMeter& meter, int rounds) {
  Lab lab;
  auto [c, s] = lab.stream();
  std::thread echo([&, s = s] {
    std::uint8_t buf[64];
    while (recv_exact(lab.server, s, buf)) send_all(lab.server, s, buf);
  });
  std::uint8_t buf[64] = {};
  const auto traffic0 = lab.traffic();
  const auto before = meter.sample();
  const auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) {
    send_all(lab.client, c, buf);
    if (!recv_exact(lab.client, c, buf)) die("the echo ended its stream");
  }
  const double us = seconds_since(t0) * 1e6 / rounds;
  const auto after = meter.sample();
  const auto traffic1 = lab.traffic();
  (void)lab.client.shutdown_write(c);
  echo.join();
  return {{us, bench::per_op(before, after, rounds)}, per_op(traffic0, traffic1, rounds)};
}

// Streams opened per second over the session, `depth` at a time: each opened, one octet
// sent, accepted, the octet sent back, read, and both ends closed. depth 1: each waits for the
// one before; more: the opens are pipelined (the accept backlog, 128, bounds the depth).
Ours our_opens_per_second(const CostMeter& meter, int n, std::size_t depth) {
  Lab lab;
  lab.warm();
  const auto traffic0 = lab.traffic();
  const auto before = meter.sample();
  const auto t0 = Clock::now();
  std::thread acceptor([&] {
    for (int i = 0; i < n; ++i) {
      std::uint8_t b;
      const StreamRef s = lab.accept_first_octet(b);
      send_all(lab.server, s, {&b, 1});
      lab.server.close(s);
    }
  });
  std::deque<StreamRef> in_flight;
  int opened = 0;
  for (int done = 0; done < n; ++done) {
    while (opened < n && in_flight.size() < depth) {
      auto c = lab.client.open(lab.session, kPort);
      if (!c) die("open: " + std::string(stream::errc_name(c.error())));
      const std::uint8_t b = 'o';
      send_all(lab.client, *c, {&b, 1});
      in_flight.push_back(*c);
      ++opened;
    }
    std::uint8_t b;
    if (!recv_exact(lab.client, in_flight.front(), {&b, 1})) die("no octet came back");
    lab.client.close(in_flight.front());
    in_flight.pop_front();
  }
  acceptor.join();
  const double rate = n / seconds_since(t0);
  const auto after = meter.sample();
  return {{rate, bench::per_op(before, after, n)}, per_op(traffic0, lab.traffic(), n)};
}

// Streams opened per second in the shape of the TCP baseline (raw_tcp.h's connects): the
// client opens each with its one octet (in the OPEN's message, as TCP Fast Open's data
// rides the SYN) and closes it, waiting for nothing; the acceptor accepts each, reads its
// octet and closes it; the clock stops when it has done so n times. The server's accept
// backlog is the raw listener's (512); the client keeps within it, sleeping until the
// acceptor has taken another 64 (an open past it would be refused, as a TCP connect past
// the listen queue would have its SYN dropped and sent again a second later).
Ours our_opens_like_tcp(const CostMeter& meter, int n) {
  constexpr int kBacklog = 512;  // raw_tcp.cc's listen()
  constexpr int kRoom = 64;      // accepts between the acceptor's wake-ups of the client
  stream::StreamEndpointConfig config;
  config.session.accept_backlog = kBacklog;
  Lab lab(config);
  lab.warm();
  std::atomic<int> accepted{0};
  const auto traffic0 = lab.traffic();
  const auto before = meter.sample();
  const auto t0 = Clock::now();
  std::thread acceptor([&] {
    for (int i = 0; i < n; ++i) {
      std::uint8_t b;
      lab.server.close(lab.accept_first_octet(b));
      if (accepted.fetch_add(1, std::memory_order_release) % kRoom == kRoom - 1) {
        accepted.notify_one();
      }
    }
  });
  const std::uint8_t octet = 'o';
  for (int i = 0; i < n; ++i) {
    for (int seen = accepted.load(std::memory_order_acquire); i - seen >= kBacklog;
         seen = accepted.load(std::memory_order_acquire)) {
      accepted.wait(seen, std::memory_order_acquire);
    }
    auto c = lab.client.open(lab.session, kPort, {&octet, 1});
    if (!c) die("open: " + std::string(stream::errc_name(c.error())));
    lab.client.close(*c);
  }
  acceptor.join();
  const double rate = n / seconds_since(t0);
  const auto after = meter.sample();
  for (SessionId id : lab.server.sessions()) {
    if (auto c = lab.server.counters(id); c && c->refused > 0) die("opens were refused");
  }
  return {{rate, bench::per_op(before, after, n)}, per_op(traffic0, lab.traffic(), n)};
}

// ---- idle streams -------------------------------------------------------------------------

std::size_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// What one side's idle streams cost, per stream.
struct IdleSide {
  double rss = 0;            // the process's RSS delta
  double stream_bytes = 0;   // StreamEndpoint::stream_bytes: state and what it holds
  double channel = 0;        // the session's receive buffers, shared out
  double held = 0;           // receive_held + sink rings: octets received and unread
  double send_rings = 0;
  double receive_buffer() const { return channel + held + stream_bytes; }
  std::string line() const {
    std::ostringstream o;
    o << rss << ' ' << stream_bytes << ' ' << channel << ' ' << held << ' ' << send_rings;
    return o.str();
  }
  static IdleSide parse(const std::string& text) {
    IdleSide s;
    std::istringstream i(text);
    i >> s.rss >> s.stream_bytes >> s.channel >> s.held >> s.send_rings;
    return s;
  }
};

// The session's channel: receive_window data receives and the control receives, each of
// max_message octets and the 4-octet credit header (message_endpoint.h).
double channel_receive_bytes(const stream::StreamEndpointConfig& c) {
  const messaging::EndpointConfig m;
  return static_cast<double>(c.receive_window + m.control_receives) *
         (c.session.max_message + 4.0);
}

IdleSide measure_side(const StreamEndpoint& ep, SessionId session,
                      const std::vector<StreamRef>& streams, std::size_t rss_before) {
  IdleSide side;
  const double n = static_cast<double>(streams.size());
  side.rss = (static_cast<double>(rss_bytes()) - static_cast<double>(rss_before)) / n;
  for (StreamRef s : streams) side.stream_bytes += static_cast<double>(ep.stream_bytes(s).value_or(0));
  side.stream_bytes /= n;
  side.channel = channel_receive_bytes({}) / n;
  if (auto c = ep.counters(session)) {
    side.held = static_cast<double>(c->receive_held + c->sink_bytes) / n;
    side.send_rings = static_cast<double>(c->send_ring_bytes) / n;
  }
  return side;
}

std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

void write_line(int fd, const std::string& line) {
  const std::string text = line + "\n";
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    die("cannot write to the other process");
  }
}

// The server end, in the child: accepts one stream and says "ready" (its RSS baseline is
// then taken), accepts `n` more, saying how many every `batch`, then reports its side and
// waits for the parent's word to end.
[[noreturn]] void idle_server(int n, int batch, int to_parent, int from_parent) {
  StreamEndpoint ep(tcp(), {});
  auto where = ep.serve(*transport::parse_provider_uri("tcp://127.0.0.1:0"));
  if (!where) die(where.error());
  ep.listen(kPort);
  write_line(to_parent, where->to_string());
  auto first = ep.accept(kPort, kWait);
  if (!first) die("idle server: no first stream");
  const std::size_t rss0 = rss_bytes();
  write_line(to_parent, "ready");
  std::vector<StreamRef> streams;
  streams.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto s = ep.accept(kPort, kWait);
    if (!s) die("idle server: accept " + std::to_string(i) + ": " + std::string(stream::errc_name(s.error())));
    streams.push_back(*s);
    if ((i + 1) % batch == 0 || i + 1 == n) write_line(to_parent, std::to_string(i + 1));
  }
  std::this_thread::sleep_for(200ms);  // the last WINDOW and ACCEPT frames settled
  write_line(to_parent, measure_side(ep, first->session, streams, rss0).line());
  (void)read_line(from_parent);
  std::fflush(stdout);
  ::_exit(0);
}

struct Idle {
  IdleSide opener;    // the client's ends (this process)
  IdleSide accepter;  // the server's ends (the child)
  double seconds = 0;
};

Idle idle_streams(int n) {
  constexpr int kBatch = 100;  // opens ahead of the accepts: under the backlog of 128
  int up[2], down[2];
  if (::pipe(up) != 0 || ::pipe(down) != 0) die("pipe failed");
  std::fflush(stdout);
  const pid_t child = ::fork();
  if (child < 0) die("fork failed");
  if (child == 0) {
    ::close(up[0]);
    ::close(down[1]);
    idle_server(n, kBatch, up[1], down[0]);
  }
  ::close(up[1]);
  ::close(down[0]);
  Idle out;
  {
    StreamEndpoint ep(tcp(), {});
    const auto where = transport::parse_provider_uri(read_line(up[0]));
    if (!where) die("the idle server did not start");
    const SessionId session = or_die(ep.connect(*where));
    if (!ep.open(session, kPort)) die("open failed");
    if (read_line(up[0]) != "ready") die("the idle server did not accept");
    const std::size_t rss0 = rss_bytes();
    const auto t0 = Clock::now();
    std::vector<StreamRef> streams;
    streams.reserve(static_cast<std::size_t>(n));
    while (static_cast<int>(streams.size()) < n) {
      const int batch = std::min(kBatch, n - static_cast<int>(streams.size()));
      for (int i = 0; i < batch; ++i) {
        auto s = ep.open(session, kPort);
        if (!s) die("open: " + std::string(stream::errc_name(s.error())));
        streams.push_back(*s);
      }
      if (std::stoi(read_line(up[0])) != static_cast<int>(streams.size())) {
        die("the idle server fell behind");
      }
    }
    out.seconds = seconds_since(t0);
    std::this_thread::sleep_for(200ms);
    out.opener = measure_side(ep, session, streams, rss0);
    out.accepter = IdleSide::parse(read_line(up[0]));
    write_line(down[1], "done");
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("the idle server failed");
  ::close(up[0]);
  ::close(down[1]);
  return out;
}

// ---- the run ------------------------------------------------------------------------------

struct Options {
  double seconds = 2.0;
  int rounds = 20000;
  int opens = 10000;
  int idle = 10000;
  std::string json_path;
  bool require_counters = false;
};

// The options, CLI11's way (as the tools parse theirs): --help prints them.
Options parse(int argc, char** argv) {
  Options o;
  CLI::App app("stream_bench: the stream layer against raw TCP and iperf3 on loopback");
  app.add_option("--seconds", o.seconds, "per throughput run")->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "64 B round trips")->check(CLI::PositiveNumber);
  app.add_option("--opens", o.opens, "streams opened")->check(CLI::PositiveNumber);
  app.add_option("--idle", o.idle, "idle streams for the memory figure")
      ->check(CLI::PositiveNumber);
  app.add_option("--json", o.json_path, "the figures as JSON");
  app.add_flag("--require-counters", o.require_counters, "fail if syscalls cannot be counted");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return o;
}

constexpr std::size_t kChunk = 64 * 1024;
constexpr std::size_t kRawBigWrite = 1 << 20;
constexpr std::size_t kPipelineDepth = 64;
constexpr double kMemoryTarget = 64 * 1024;

nlohmann::json traffic_json(const Lab::Traffic& t) {
  return {{"messages", t.messages},
          {"writes", t.writes},
          {"bytes_placed", t.bytes_placed},
          {"bytes_borrowed", t.bytes_borrowed},
          {"bytes_copied", t.bytes_copied},
          {"octets_read_to_place", t.octets_read_to_place}};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // Before any thread: the syscall counter is inherited only by threads started after it,
  // and the idle streams' server is forked from a process with no other thread.
  const CostMeter meter = CostMeter::open();
  if (o.require_counters && !meter.unavailable().empty()) {
    die("syscalls cannot be counted: " + meter.unavailable());
  }
  Report r = start_report("rdma-interop/stream-bench/1",
                          {{"seconds", o.seconds}, {"rounds", o.rounds}, {"opens", o.opens},
                           {"idle_streams", o.idle}},
                          meter);
  const std::string load = load_average();
  std::printf("stream_bench: loopback, tcp provider, client and server as threads of one "
              "process, %u CPUs, load %s; --seconds %g --rounds %d --opens %d --idle %d\n",
              std::thread::hardware_concurrency(), load.c_str(), o.seconds, o.rounds, o.opens,
              o.idle);

  const Idle idle = idle_streams(o.idle);

  std::printf("\n%-32s %11s %11s  %-7s %8s  %-8s %s\n", "same run", "ours", "baseline", "unit",
              "ratio", "target", "met");

  // Five rounds, interleaved: raw TCP in 64 KiB and in 1 MiB writes, then ours in 64 KiB
  // and in 256 KiB sends; raw TCP once more at the end, so each run of ours sits between raw
  // ones. This machine's speed drifts from one run to the next (another tenant's load: the
  // same raw stream gave 25 and 36 Gbit/s minutes apart), and a best of ours against a best
  // of raw taken in other seconds measured the drift as much as the stack. So each run of
  // ours is judged against the raw runs beside it: its round's baseline is the best of the
  // four raw runs just before and just after it (an upper bound on what raw TCP did then) and
  // of iperf3's one run from before the rounds (which can only raise it), and the figure is
  // the median round's. A drift within a round still moves that round's ratio; the median
  // leaves out the two highest ratios and the two lowest, whatever moved them.
  constexpr int kRounds = 5;
  const auto iperf = or_die(bench::iperf3_loopback(o.seconds));
  std::vector<Measured> raw_64k, raw_1m;
  std::vector<Ours> ours_64k, ours_256k;
  auto raw_pair = [&] {
    raw_64k.push_back(or_die(bench::tcp_stream_gbps(meter, o.seconds, kChunk)));
    raw_1m.push_back(or_die(bench::tcp_stream_gbps(meter, o.seconds, kRawBigWrite)));
  };
  for (int round = 0; round < kRounds; ++round) {
    raw_pair();
    ours_64k.push_back(our_stream_gbps(meter, o.seconds, kChunk));
    ours_256k.push_back(our_stream_gbps(meter, o.seconds, 4 * kChunk));
  }
  raw_pair();
  std::vector<double> round_base;
  for (std::size_t i = 0; i < kRounds; ++i) {
    round_base.push_back(std::max({iperf.gbps, raw_64k[i].value, raw_1m[i].value,
                                   raw_64k[i + 1].value, raw_1m[i + 1].value}));
  }
  const auto round_ratios = [&](const std::vector<Ours>& ours) {
    std::vector<double> out;
    for (std::size_t i = 0; i < kRounds; ++i) out.push_back(ours[i].m.value / round_base[i]);
    return out;
  };
  const auto median_round = [](const std::vector<double>& ratios) {
    std::vector<std::size_t> order(ratios.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::ranges::sort(order, {}, [&](std::size_t i) { return ratios[i]; });
    return order[order.size() / 2];
  };
  const std::vector<double> ratios_64k = round_ratios(ours_64k);
  const std::vector<double> ratios_256k = round_ratios(ours_256k);
  const std::size_t median_64k = median_round(ratios_64k);
  const std::size_t median_256k = median_round(ratios_256k);
  const auto measured_value = [](const Measured& m) { return m.value; };
  const auto ours_value = [](const Ours& x) { return x.m.value; };
  // Costs per operation are counts, steady across the drift: the raw side's are from its
  // best runs.
  const Measured best_64k = *std::ranges::max_element(raw_64k, {}, measured_value);
  const Measured best_1m = *std::ranges::max_element(raw_1m, {}, measured_value);
  const Ours& stream = ours_64k[median_64k];
  const Ours& big_sends = ours_256k[median_256k];
  r.ratio_row("64 KiB stream throughput", stream.m.value, round_base[median_64k], "Gbit/s",
              Target{true, 0.9});
  // The same stream in 256 KiB sends: what of the gap is paid per send (a Write, its PLACED
  // and a sendmsg for each) and not per octet. It explains, not judges.
  r.ratio_row("  in 256 KiB sends", big_sends.m.value, round_base[median_256k], "Gbit/s",
              std::nullopt);

  const auto tcp_rtt = or_die(bench::tcp_round_trip_us(meter, o.rounds));
  const Ours rtt = our_round_trip_us(meter, o.rounds);
  r.ratio_row("64 B request/response", rtt.m.value, tcp_rtt.value, "us", Target{false, 1.3});

  // The first round warms what a long-running process has warm (malloc's arenas), as
  // e2e_bench does for connects.
  (void)bench::tcp_connects_per_second(meter, o.opens);
  // Three runs of each, interleaved, and the median of each: a run of ours lasts 50-150 ms,
  // and one scheduling hiccup on this machine halves it (single runs swung 64k-200k/s).
  std::vector<Measured> tcp_runs;
  std::vector<Ours> like_tcp_runs;
  for (int run = 0; run < 3; ++run) {
    tcp_runs.push_back(or_die(bench::tcp_connects_per_second(meter, o.opens)));
    like_tcp_runs.push_back(our_opens_like_tcp(meter, o.opens));
  }
  std::ranges::sort(tcp_runs, {}, &Measured::value);
  std::ranges::sort(like_tcp_runs, {}, [](const Ours& x) { return x.m.value; });
  const Measured tcp_connects = tcp_runs[1];
  const Ours like_tcp = like_tcp_runs[1];
  r.doc["opens_runs"] = {
      {"raw_tcp_connects_per_second",
       {tcp_runs[0].value, tcp_runs[1].value, tcp_runs[2].value}},
      {"ours_like_tcp_per_second",
       {like_tcp_runs[0].m.value, like_tcp_runs[1].m.value, like_tcp_runs[2].m.value}}};
  const Ours opens = our_opens_per_second(meter, o.opens, 1);
  const Ours pipelined = our_opens_per_second(meter, o.opens, kPipelineDepth);
  r.ratio_row("streams opened as TCP's are", like_tcp.m.value, tcp_connects.value, "/s",
              Target{true, 5});
  // With the octet echoed back before each close: an application round trip per stream,
  // which the TCP baseline does not wait for. They explain, not judge.
  r.ratio_row("  echoed, one at a time", opens.m.value, tcp_connects.value, "/s",
              std::nullopt);
  r.ratio_row("  echoed, 64 in flight", pipelined.m.value, tcp_connects.value, "/s",
              std::nullopt);
  // The idle streams below were opened and accepted 100 ahead, with no octet and no close:
  // less than the TCP baseline does (a first octet, a close), so it explains, not judges.
  r.ratio_row("  opened + accepted only, 100 ahead", o.idle / idle.seconds, tcp_connects.value,
              "/s", std::nullopt);

  const Target memory{false, kMemoryTarget};
  r.value_row("receive buffer/idle stream, opener", idle.opener.receive_buffer(), "octets", memory);
  r.value_row("receive buffer/idle stream, accepter", idle.accepter.receive_buffer(), "octets", memory);
  r.value_row("RSS/idle stream, opener", idle.opener.rss, "octets", memory);
  r.value_row("RSS/idle stream, accepter", idle.accepter.rss, "octets", memory);
  auto side_json = [](const IdleSide& s) {
    return nlohmann::json{{"rss_per_stream", s.rss},
                          {"stream_bytes_per_stream", s.stream_bytes},
                          {"channel_receive_buffers_per_stream", s.channel},
                          {"held_per_stream", s.held},
                          {"send_rings_per_stream", s.send_rings},
                          {"receive_buffer_per_stream", s.receive_buffer()}};
  };
  r.doc["idle"] = {{"streams", o.idle},
                   {"open_seconds", idle.seconds},
                   {"opener", side_json(idle.opener)},
                   {"accepter", side_json(idle.accepter)}};

  auto runs_text = [](const auto& runs, auto value) {
    std::string text;
    for (const auto& run : runs) {
      char one[32];
      std::snprintf(one, sizeof one, "%s%.2f", text.empty() ? "" : ", ", value(run));
      text += one;
    }
    return text;
  };
  const auto number = [](double x) { return x; };
  std::printf("\nbaseline: raw TCP in this process; for throughput, each round's best raw run "
              "around it, and iperf3's:\n  raw TCP streams, 64 KiB writes %s, 1 MiB writes %s "
              "Gbit/s; %s -c 127.0.0.1 -t %d: %.2f Gbit/s;\n  round baselines %s Gbit/s\n"
              "  ours, every round: 64 KiB sends %s Gbit/s, ratios %s;\n"
              "  256 KiB sends %s Gbit/s, ratios %s\n",
              runs_text(raw_64k, measured_value).c_str(), runs_text(raw_1m, measured_value).c_str(),
              iperf.version.empty() ? "iperf3" : iperf.version.c_str(), iperf.seconds, iperf.gbps,
              runs_text(round_base, number).c_str(), runs_text(ours_64k, ours_value).c_str(),
              runs_text(ratios_64k, number).c_str(), runs_text(ours_256k, ours_value).c_str(),
              runs_text(ratios_256k, number).c_str());
  std::printf("opens, three runs each: raw TCP connects %.0f, %.0f, %.0f/s; ours as TCP's are "
              "%.0f, %.0f, %.0f/s\n",
              tcp_runs[0].value, tcp_runs[1].value, tcp_runs[2].value, like_tcp_runs[0].m.value,
              like_tcp_runs[1].m.value, like_tcp_runs[2].m.value);
  auto values = [](const auto& runs, auto value) {
    std::vector<double> out;
    for (const auto& run : runs) out.push_back(value(run));
    return out;
  };
  r.doc["stream_baselines"] = {{"raw_tcp_64k_gbps", values(raw_64k, measured_value)},
                               {"raw_tcp_1m_gbps", values(raw_1m, measured_value)},
                               {"iperf3_gbps", iperf.gbps},
                               {"iperf3_version", iperf.version}};
  r.doc["stream_runs"] = {{"ours_64k_gbps", values(ours_64k, ours_value)},
                          {"ours_256k_gbps", values(ours_256k, ours_value)},
                          {"round_baseline_gbps", round_base},
                          {"ours_64k_round_ratios", ratios_64k},
                          {"ours_256k_round_ratios", ratios_256k}};
  std::printf("idle streams: %d opened in %.2fs; per stream, the opener's end + the accepter's:\n"
              "  the session's channel receive buffers shared out %.1f + %.1f, held unread %.1f "
              "+ %.1f,\n  each stream's own state (stream_bytes) %.1f + %.1f, send rings %.1f + "
              "%.1f octets\n",
              o.idle, idle.seconds, idle.opener.channel, idle.accepter.channel, idle.opener.held,
              idle.accepter.held, idle.opener.stream_bytes, idle.accepter.stream_bytes,
              idle.opener.send_rings, idle.accepter.send_rings);

  std::printf("\n%-50s %9s %9s  %-8s %s\n", "per operation, all threads (both sides)", "ours",
              "raw TCP", "target", "met");
  r.cost_rows("64 B round trip", rtt.m.cost, tcp_rtt.cost, std::nullopt, std::nullopt);
  r.cost_rows("64 KiB carried", stream.m.cost, best_64k.cost, std::nullopt, std::nullopt);
  r.cost_rows("64 KiB, 256K sends (raw 1M)", big_sends.m.cost, best_1m.cost, std::nullopt,
              std::nullopt);
  r.cost_rows("stream opened as TCP's are", like_tcp.m.cost, tcp_connects.cost, std::nullopt,
              std::nullopt);
  r.cost_rows("stream opened, echoed (one at a time)", opens.m.cost, tcp_connects.cost,
              std::nullopt, std::nullopt);
  // "from the app": placed by a Write straight from the application's buffer, never copied
  // into the send ring (StreamSession::borrow). "read to place": of the Writes' octets, those
  // the receiving side read from its socket straight into the reader's sink (direct data
  // placement, tcp_connection_state.h), not through its receive buffer.
  std::printf("\n%-36s %10s %10s %14s %14s %14s %14s\n", "stream layer, per operation",
              "messages", "Writes", "octets placed", "from the app", "read to place",
              "octets copied");
  auto traffic_row = [&](const char* op, const Lab::Traffic& t) {
    std::printf("%-36s %10.2f %10.2f %14.1f %14.1f %14.1f %14.1f\n", op, t.messages, t.writes,
                t.bytes_placed, t.bytes_borrowed, t.octets_read_to_place, t.bytes_copied);
    r.doc["traffic_per_operation"][op] = traffic_json(t);
  };
  traffic_row("64 B round trip", rtt.per_op);
  traffic_row("64 KiB carried", stream.per_op);
  traffic_row("64 KiB carried, in 256 KiB sends", big_sends.per_op);
  traffic_row("stream opened as TCP's are", like_tcp.per_op);
  traffic_row("stream opened, echoed (one at a time)", opens.per_op);
  traffic_row("stream opened, echoed (64 in flight)", pipelined.per_op);

  return finish_report(r, meter, o.json_path) ? 0 : 1;
}
