#include "tools/rdma-stream/measure_command.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/util/json_text.h"
#include "tools/common/exit_status.h"

namespace rdma_interop::stream_cli {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using stream::Socket;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// What every stream's thread adds to, and the progress thread reads.
struct Tally {
  std::atomic<std::uint64_t> octets{0};
  std::atomic<std::uint64_t> operations{0};  // round trips, or streams opened
  std::mutex mu;                             // guards the two below
  std::vector<double> latency_us;            // per round trip or per open
  std::string error;                         // the first failure

  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    if (error.empty()) error = why;
  }
};

struct Run {
  const MeasureOptions& o;
  stream::StreamNode& node;
  const std::atomic<bool>& stop;
  Clock::time_point end;
  Tally tally;

  bool running() const { return !stop && Clock::now() < end; }

  // Reads exactly out.size() octets; false (the reason recorded) on anything else.
  bool read_exactly(Socket& s, std::span<std::uint8_t> out) {
    while (!out.empty()) {
      auto n = s.recv(out, {.timeout = timeout(o.common)});
      if (!n || *n == 0) {
        tally.fail(!n && n.error() == EAGAIN
                       ? "no reply in time (is the server serving --mode echo?)"
                   : !n ? std::string("receive: ") + std::strerror(n.error())
                        : "the server ended the stream");
        return false;
      }
      out = out.subspan(*n);
    }
    return true;
  }

  void throughput(Socket& s, std::size_t size) {
    std::vector<std::uint8_t> data(size, 0x5a), sink(64 * 1024);
    while (running()) {
      auto n = s.send(data, {.timeout = 200ms});
      if (!n && n.error() == EAGAIN) continue;
      if (!n) {
        tally.fail(std::string("send: ") + std::strerror(n.error()));
        return;
      }
      tally.octets += *n;
      // An echo server sends everything back: read it, or both windows close.
      for (auto r = s.recv(sink); r && *r > 0; r = s.recv(sink)) {
      }
    }
    // Everything sent reaches the server before its end of stream does.
    (void)s.shutdown_write();
    const auto give_up = Clock::now() + timeout(o.common);
    while (Clock::now() < give_up) {
      auto n = s.recv(sink, {.timeout = 200ms});
      if (n && *n == 0) return;
      if (!n && n.error() != EAGAIN) return;
    }
  }

  void round_trips(Socket& s, std::size_t size) {
    std::vector<std::uint8_t> request(size, 0x5a), reply(size);
    std::vector<double> mine;
    while (running()) {
      const auto t0 = Clock::now();
      if (const int e = send_all(s, request.data(), size, timeout(o.common)); e != 0) {
        tally.fail(std::string("send: ") + std::strerror(e));
        break;
      }
      if (!read_exactly(s, reply)) break;
      mine.push_back(since(t0) * 1e6);
      ++tally.operations;
      tally.octets += size;
    }
    std::lock_guard<std::mutex> lock(tally.mu);
    tally.latency_us.insert(tally.latency_us.end(), mine.begin(), mine.end());
  }

  // One stream opened, one octet there and back, closed; false when it failed.
  bool open_one() {
    auto s = node.connect(o.address.host, o.address.port, timeout(o.common));
    if (!s) {
      tally.fail(s.error().detail);
      return false;
    }
    const std::uint8_t out = 'o';
    std::uint8_t in = 0;
    if (const int e = send_all(**s, &out, 1, timeout(o.common)); e != 0) {
      tally.fail(std::string("send: ") + std::strerror(e));
      return false;
    }
    return read_exactly(**s, {&in, 1});
  }

  void opens() {
    std::vector<double> mine;
    while (running()) {
      const auto t0 = Clock::now();
      if (!open_one()) break;
      mine.push_back(since(t0) * 1e6);
      ++tally.operations;
    }
    std::lock_guard<std::mutex> lock(tally.mu);
    tally.latency_us.insert(tally.latency_us.end(), mine.begin(), mine.end());
  }
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

}  // namespace

MeasureMode measure_mode(const std::string& name) {
  if (name == "rr") return MeasureMode::kRoundTrip;
  if (name == "open") return MeasureMode::kOpen;
  return MeasureMode::kThroughput;
}

const char* measure_mode_name(MeasureMode mode) {
  switch (mode) {
    case MeasureMode::kThroughput:
      return "throughput";
    case MeasureMode::kRoundTrip:
      return "rr";
    case MeasureMode::kOpen:
      return "open";
  }
  return "?";
}

int run_measure(const MeasureOptions& o, const std::atomic<bool>& stop) {
  const std::size_t size =
      o.size != 0 ? o.size : o.mode == MeasureMode::kThroughput ? 64 * 1024 : 64;
  auto node = stream::StreamNode::create(node_config(o.common));
  if (!node) {
    std::fprintf(stderr, "rdma-stream: %s\n", node.error().c_str());
    return tools::kExitCannotRun;
  }
  // The first stream sets up what the others reuse (the session, or the knowledge that the
  // server is plain): it is not part of what is measured.
  auto first = (*node)->connect(o.address.host, o.address.port, timeout(o.common));
  if (!first) {
    std::fprintf(stderr, "rdma-stream: %s\n", first.error().detail.c_str());
    if (o.common.json) {
      // The document still comes, with what failed in "error", as the other tools' do.
      const nlohmann::json doc = {{"schema", "rdma-interop/stream-measure/1"},
                                  {"mode", measure_mode_name(o.mode)},
                                  {"address", o.address.text()},
                                  {"how", nullptr},
                                  {"transport", nullptr},
                                  {"streams", o.streams},
                                  {"seconds", 0},
                                  {"stopped_by_signal", false},
                                  {"error", first.error().detail},
                                  {"octets", 0}};
      std::cout << json_text(doc) << std::endl;
    }
    return connect_exit_status(first.error().code);
  }
  const bool upgraded = (*first)->upgraded();
  const std::string transport = (*first)->describe();
  std::vector<std::unique_ptr<Socket>> sockets;
  if (o.mode == MeasureMode::kOpen) {
    (*first)->close();
  } else {
    sockets.push_back(std::move(*first));
    for (int i = 1; i < o.streams; ++i) {
      auto s = (*node)->connect(o.address.host, o.address.port, timeout(o.common));
      if (!s) {
        std::fprintf(stderr, "rdma-stream: stream %d: %s\n", i + 1, s.error().detail.c_str());
        return tools::kExitFailed;
      }
      sockets.push_back(std::move(*s));
    }
  }
  std::fprintf(stderr, "rdma-stream: measuring %s to %s over %d stream(s), %s (%s)\n",
               measure_mode_name(o.mode), o.address.text().c_str(), o.streams,
               upgraded ? "upgraded" : "plain TCP", transport.c_str());

  const auto t0 = Clock::now();
  Run run{o, **node, stop,
          t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds)),
          {}};
  std::vector<std::thread> threads;
  for (int i = 0; i < o.streams; ++i) {
    threads.emplace_back([&, i] {
      switch (o.mode) {
        case MeasureMode::kThroughput:
          run.throughput(*sockets[static_cast<std::size_t>(i)], size);
          break;
        case MeasureMode::kRoundTrip:
          run.round_trips(*sockets[static_cast<std::size_t>(i)], size);
          break;
        case MeasureMode::kOpen:
          run.opens();
          break;
      }
    });
  }
  // Progress on this thread until the run is over.
  std::uint64_t last_octets = 0, last_ops = 0;
  auto last = t0;
  auto next = t0 + std::chrono::duration_cast<Clock::duration>(
                       std::chrono::duration<double>(o.progress_s));
  while (run.running()) {
    std::this_thread::sleep_for(std::min<Clock::duration>(50ms, run.end - Clock::now()));
    if (o.progress_s <= 0 || Clock::now() < next) continue;
    const double dt = since(last);
    const std::uint64_t octets = run.tally.octets, ops = run.tally.operations;
    if (o.mode == MeasureMode::kThroughput) {
      std::fprintf(stderr, "%7.1fs  %10.3f Gbit/s\n", since(t0),
                   static_cast<double>(octets - last_octets) * 8 / dt / 1e9);
    } else {
      std::fprintf(stderr, "%7.1fs  %10.0f %s/s\n", since(t0),
                   static_cast<double>(ops - last_ops) / dt,
                   o.mode == MeasureMode::kOpen ? "opens" : "round trips");
    }
    last_octets = octets;
    last_ops = ops;
    last = Clock::now();
    next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.progress_s));
  }
  const double elapsed = std::min(since(t0), o.seconds);
  for (auto& t : threads) t.join();
  sockets.clear();

  const double octets = static_cast<double>(run.tally.octets.load());
  const double ops = static_cast<double>(run.tally.operations.load());
  auto& lat = run.tally.latency_us;
  double mean = 0;
  for (double v : lat) mean += v;
  mean = lat.empty() ? 0 : mean / static_cast<double>(lat.size());
  const double p50 = percentile(lat, 0.5), p99 = percentile(lat, 0.99);
  const stream::NodeCounters n = (*node)->counters();
  nlohmann::json doc = {{"schema", "rdma-interop/stream-measure/1"},
                        {"mode", measure_mode_name(o.mode)},
                        {"address", o.address.text()},
                        {"how", upgraded ? "upgraded" : "plain"},
                        {"transport", transport},
                        {"streams", o.streams},
                        {"size", o.mode == MeasureMode::kOpen ? 1 : size},
                        {"seconds", elapsed},
                        {"stopped_by_signal", stop.load()},
                        {"error", run.tally.error.empty() ? nlohmann::json()
                                                          : nlohmann::json(run.tally.error)},
                        {"octets", run.tally.octets.load()},
                        {"node", {{"upgraded", n.upgraded},
                                  {"reused", n.reused},
                                  {"declined", n.declined},
                                  {"plain_peers", n.plain_peers},
                                  {"plain_cached", n.plain_cached},
                                  {"sessions", n.sessions}}}};
  char text[512];
  const char* kind = upgraded ? "upgraded" : "plain TCP";
  if (o.mode == MeasureMode::kThroughput) {
    const double gbps = octets * 8 / elapsed / 1e9;
    doc["bits_per_second"] = octets * 8 / elapsed;
    std::snprintf(text, sizeof text,
                  "throughput to %s, %s, %d stream(s) of %zu-octet sends: %.3f Gbit/s "
                  "(%.0f octets in %.2fs)",
                  o.address.text().c_str(), kind, o.streams, size, gbps, octets, elapsed);
  } else {
    const bool rr = o.mode == MeasureMode::kRoundTrip;
    doc[rr ? "round_trips" : "opens"] = run.tally.operations.load();
    doc[rr ? "round_trips_per_second" : "opens_per_second"] = ops / elapsed;
    doc["latency_us"] = {{"mean", mean}, {"p50", p50}, {"p99", p99}};
    std::snprintf(text, sizeof text,
                  "%s to %s, %s, %d stream(s)%s: %.0f %s/s (%.0f in %.2fs), each %.1f us mean, "
                  "p50 %.1f, p99 %.1f",
                  rr ? "round trips" : "streams opened", o.address.text().c_str(), kind,
                  o.streams, rr ? (", " + std::to_string(size) + " octets").c_str() : "",
                  ops / elapsed, rr ? "round trips" : "opens", ops, elapsed, mean, p50, p99);
  }
  if (o.common.json) {
    std::cout << json_text(doc) << std::endl;
  } else {
    std::cout << text << std::endl;
  }
  if (!run.tally.error.empty()) {
    std::fprintf(stderr, "rdma-stream: %s\n", run.tally.error.c_str());
    return tools::kExitFailed;
  }
  if (stop) {
    std::fprintf(stderr, "rdma-stream: stopped by a signal after %.2fs\n", elapsed);
    return tools::kExitFailed;
  }
  return tools::kExitOk;
}

}  // namespace rdma_interop::stream_cli
