#include "tools/rdma-stream/serve_command.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
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

// How often a connection's thread and the accept loop look at the stop flag.
constexpr auto kPollStep = 200ms;

// One line per event on stdout, whole lines from any thread.
class Printer {
 public:
  explicit Printer(bool json) : json_(json) {}
  void line(const nlohmann::json& event, const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    std::fputs(json_ ? json_text(event).c_str() : text.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }

 private:
  bool json_;
  std::mutex mu_;
};

struct Served {
  std::uint64_t received = 0;
  std::uint64_t sent = 0;
  std::string end = "eof";  // eof, reset, stopped, or the errno's name that ended it
};

// Sends all of `data`, looking at `stop` while the peer's window is closed.
int send_until_stopped(stream::Socket& s, const std::uint8_t* data, std::size_t size,
                       const std::atomic<bool>& stop) {
  while (size > 0) {
    auto n = s.send(std::span<const std::uint8_t>(data, size), {.timeout = kPollStep});
    if (!n && n.error() == EAGAIN) {
      if (stop) return EINTR;
      continue;
    }
    if (!n) return n.error();
    data += *n;
    size -= *n;
  }
  return 0;
}

std::string ended_by(int error) {
  if (error == EINTR) return "stopped";
  if (error == ECONNRESET || error == EPIPE) return "reset";
  if (error == ENOTCONN) return "session ended";
  return std::strerror(error);
}

Served serve_one(stream::Socket& s, ServeMode mode, std::size_t size,
                 const std::atomic<bool>& stop) {
  Served out;
  std::vector<std::uint8_t> buf(std::max<std::size_t>(size, 64 * 1024), 0x5a);
  if (mode == ServeMode::kSource) {
    while (!stop) {
      if (const int e = send_until_stopped(s, buf.data(), size, stop); e != 0) {
        out.end = ended_by(e);
        return out;
      }
      out.sent += size;
    }
    out.end = "stopped";
    return out;
  }
  for (;;) {
    auto n = s.recv(buf, {.timeout = kPollStep});
    if (!n && n.error() == EAGAIN) {
      if (stop) {
        out.end = "stopped";
        return out;
      }
      continue;
    }
    if (!n) {
      out.end = ended_by(n.error());
      return out;
    }
    if (*n == 0) {
      // The peer's end of stream: ours follows what was echoed (half-close, as TCP).
      (void)s.shutdown_write();
      return out;
    }
    out.received += *n;
    if (mode == ServeMode::kEcho) {
      if (const int e = send_until_stopped(s, buf.data(), *n, stop); e != 0) {
        out.end = ended_by(e);
        return out;
      }
      out.sent += *n;
    }
  }
}

struct Worker {
  std::thread thread;
  std::atomic<bool> done{false};
};

}  // namespace

ServeMode serve_mode(const std::string& name) {
  if (name == "discard") return ServeMode::kDiscard;
  if (name == "source") return ServeMode::kSource;
  return ServeMode::kEcho;
}

const char* serve_mode_name(ServeMode mode) {
  switch (mode) {
    case ServeMode::kEcho:
      return "echo";
    case ServeMode::kDiscard:
      return "discard";
    case ServeMode::kSource:
      return "source";
  }
  return "?";
}

int run_serve(const ServeOptions& o, const std::atomic<bool>& stop) {
  auto node = stream::StreamNode::create(node_config(o.common));
  if (!node) {
    std::fprintf(stderr, "rdma-stream: %s\n", node.error().c_str());
    return tools::kExitCannotRun;
  }
  auto listener = (*node)->listen(o.address.host, o.address.port);
  if (!listener) {
    std::fprintf(stderr, "rdma-stream: %s\n", listener.error().detail.c_str());
    return listen_exit_status(listener.error().code);
  }
  Printer out(o.common.json);
  const std::string where = o.address.host + ":" + std::to_string((*listener)->port());
  out.line({{"event", "listening"},
            {"address", where},
            {"port", (*listener)->port()},
            {"mode", serve_mode_name(o.mode)},
            {"upgrade", !o.common.no_upgrade}},
           "listening on " + where + " (" + serve_mode_name(o.mode) + ", " +
               (o.common.no_upgrade ? "plain TCP only" : "upgrades accepted") + ")");

  std::list<Worker> workers;
  std::atomic<std::uint64_t> upgraded{0}, plain{0};
  std::uint64_t accepted = 0;
  auto reap = [&] {
    for (auto it = workers.begin(); it != workers.end();) {
      if (it->done) {
        it->thread.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  };
  while (!stop && (o.max_connections == 0 || accepted < o.max_connections)) {
    reap();
    auto s = (*listener)->accept(kPollStep);
    if (!s) {
      if (s.error().code != EAGAIN) {
        std::fprintf(stderr, "rdma-stream: accept: %s\n", s.error().detail.c_str());
      }
      continue;
    }
    ++accepted;
    ++((*s)->upgraded() ? upgraded : plain);
    Worker& w = workers.emplace_back();
    w.thread = std::thread([&o, &stop, &out, &w, socket = std::move(*s)]() mutable {
      const auto t0 = Clock::now();
      const Served served = serve_one(*socket, o.mode, o.size, stop);
      const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      const std::string peer = socket->peer();
      const std::string_view kind = how(*socket);
      const std::string transport = socket->describe();
      socket->close();
      char text[512];
      std::snprintf(text, sizeof text, "%s %.*s (%s): received %llu, sent %llu octets in %.3fs, %s",
                    peer.c_str(), static_cast<int>(kind.size()), kind.data(), transport.c_str(),
                    static_cast<unsigned long long>(served.received),
                    static_cast<unsigned long long>(served.sent), seconds, served.end.c_str());
      out.line({{"event", "connection"},
                {"peer", peer},
                {"how", kind},
                {"transport", transport},
                {"received", served.received},
                {"sent", served.sent},
                {"seconds", seconds},
                {"end", served.end}},
               text);
      w.done = true;
    });
  }
  // A signal: each connection's thread sees it within kPollStep and closes its socket.
  for (auto& w : workers) w.thread.join();
  workers.clear();
  (*listener)->close();
  const char* why = stop ? "signal" : "max-connections";
  out.line({{"event", "stopped"},
            {"connections", accepted},
            {"upgraded", upgraded.load()},
            {"plain", plain.load()},
            {"reason", why}},
           "served " + std::to_string(accepted) + " connections (" +
               std::to_string(upgraded.load()) + " upgraded, " + std::to_string(plain.load()) +
               " plain), stopped by " + why);
  return tools::kExitOk;
}

}  // namespace rdma_interop::stream_cli
