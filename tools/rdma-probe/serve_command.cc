// rdma-probe serve: a responder that accepts connections, runs the interop exchange on
// each and prints one line per event: a log, or JSON with --json (serve_log.h).
//
// Connections are served at once, each on a thread of its own, up to the listener's
// --backlog (at most kMaxConcurrent): nine peers that complete MPA setup and then say
// nothing hold nine workers, not the whole server (issue 17: one at a time, they kept a
// legitimate connect out for about 30 s per round). Requests beyond that wait in the
// listener's backlog, where they hold their slot as the backlog policy says. The decision
// to accept stays on the main thread, one at a time, so --accept-delay still models a slow
// acceptor.
//
// Every wait is bounded: next_request() in short slices (so a stop request is seen within
// one), accept() by the personality's RTR timeout, the exchange by --exchange-timeout and
// each silence of the peer within it by --idle-timeout, the close by a short disconnect
// timeout. A silent peer costs one worker for at most the idle timeout: it must keep as
// many connections open as the server has workers, and renew them, to keep others out.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tools/rdma-probe/negotiated_json.h"
#include "tools/common/listen_exit.h"
#include "tools/common/signal_watch.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"
#include "tools/rdma-probe/interop_exchange.h"
#include "tools/rdma-probe/json_report.h"
#include "tools/rdma-probe/serve_log.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr auto kRequestSlice = std::chrono::milliseconds(100);
// Connections served at once, whatever --backlog says: threads are not free.
constexpr int kMaxConcurrent = 64;
// After a stop request, how long a provider call may still take before the process exits
// without it (SignalWatch).
constexpr auto kStopGrace = std::chrono::milliseconds(600);

// The "connection" event of a connection that failed before any exchange.
json failed_connection(const std::string& peer, json error, double elapsed) {
  return json{{"event", "connection"}, {"peer", peer},          {"ok", false},
              {"negotiated", nullptr}, {"exchange", nullptr},   {"error", std::move(error)},
              {"elapsed_ms", elapsed}};
}

// An "error" object for a failure of ours, not the peer's (no cm failure, no Terminate).
json local_error(const char* kind, const std::string& detail) {
  return json{{"kind", kind}, {"failure", nullptr}, {"detail", detail}, {"terminate", nullptr}};
}

// Accepts one pending connection, runs the exchange, returns the "connection" event.
json serve_one_unguarded(transport::PendingConnection& pending,
                         const cm::Personality& personality, const ServeOptions& options,
                         const std::atomic<bool>& stop, Clock::time_point start) {
  json event{{"event", "connection"}, {"peer", pending.peer_address()}};
  ExchangeMemory memory;  // outlives the connection: the provider uses it
  auto accepted = pending.accept(personality.private_data, memory.caps());
  if (!accepted) {
    return failed_connection(pending.peer_address(), setup_error_json(accepted.error()),
                             elapsed_ms(start));
  }
  auto& connection = **accepted;
  ExchangeOptions exchange_options;
  exchange_options.deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(options.exchange_timeout_s));
  exchange_options.cancel = &stop;
  exchange_options.idle_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options.idle_timeout_s));
  auto result = run_responder_exchange(connection, memory, exchange_options);
  if (connection.state() == transport::ConnectionState::kConnected) {
    connection.disconnect(std::chrono::milliseconds(200));
  }
  event["ok"] = result.ok;
  event["negotiated"] = probe::to_json(connection.info().params);
  event["initiator_view"] = result.peer_view ? *result.peer_view : json(nullptr);
  event["exchange"] = exchange_json(result, /*with_steps=*/true);
  event["error"] = result.ok ? json(nullptr) : exchange_error_json(result);
  event["elapsed_ms"] = elapsed_ms(start);
  return event;
}

// serve_one_unguarded, with an exception turned into this connection's failure: it must
// not cross the worker thread's edge (std::terminate).
json serve_one(transport::PendingConnection& pending, const cm::Personality& personality,
               const ServeOptions& options, const std::atomic<bool>& stop) {
  const auto start = Clock::now();
  try {
    return serve_one_unguarded(pending, personality, options, stop, start);
  } catch (const std::exception& e) {
    return failed_connection(pending.peer_address(),
                             local_error("exchange", std::string("internal error: ") + e.what()),
                             elapsed_ms(start));
  }
}

// The connections being served, each on its own thread. Finished workers are joined by the
// main thread (reap), never by themselves.
class Workers {
 public:
  explicit Workers(int limit) : limit_(limit) {}
  ~Workers() { join_all(); }

  // Waits up to `slice` for a free worker; true when one is free.
  bool wait_for_room(std::chrono::milliseconds slice) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, slice, [&] { return active_ < limit_; });
  }
  // Throws what std::thread throws (EAGAIN under a thread limit), with nothing counted.
  void start(std::function<void()> work) {
    reap();
    std::lock_guard lock(mu_);
    auto it = threads_.emplace(threads_.end());
    try {
      // The worker's last step takes mu_, held here until it is counted.
      *it = std::thread([this, it, work = std::move(work)] {
        work();
        std::lock_guard done(mu_);
        --active_;
        finished_.push_back(it);
        cv_.notify_all();
      });
    } catch (...) {
      threads_.erase(it);
      throw;
    }
    ++active_;
  }
  void join_all() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return active_ == 0; });
    lock.unlock();
    reap();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    threads_.clear();
  }

 private:
  void reap() {
    std::vector<std::list<std::thread>::iterator> done;
    {
      std::lock_guard lock(mu_);
      done.swap(finished_);
    }
    for (auto it : done) {
      it->join();
      std::lock_guard lock(mu_);
      threads_.erase(it);
    }
  }

  const int limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  int active_ = 0;
  std::list<std::thread> threads_;  // stable iterators: a worker names its own entry
  std::vector<std::list<std::thread>::iterator> finished_;
};

// The listener's backlog figures as the "counters" line (field names as in
// core/cm/backlog_counters.h).
json counters_json(const cm::BacklogCounters& c, const std::string& overflow) {
  return json{{"event", "counters"},
              {"overflow", overflow},
              {"backlog", c.backlog},
              {"pending", c.pending},
              {"high_water", c.high_water},
              {"requests", c.requests},
              {"accepted", c.accepted},
              {"rejected_by_app", c.rejected_by_app},
              {"pending_expired", c.pending_expired},
              {"pending_aborted", c.pending_aborted},
              {"overflow_rejected", c.overflow_rejected},
              {"overflow_waiting", c.overflow_waiting},
              {"overflow_dropped", c.overflow_dropped},
              {"half_open", c.half_open},
              {"half_open_limit", c.half_open_limit},
              {"half_open_opened", c.half_open_opened},
              {"half_open_completed", c.half_open_completed},
              {"half_open_expired", c.half_open_expired},
              {"half_open_aborted", c.half_open_aborted},
              {"half_open_evicted", c.half_open_evicted}};
}

}  // namespace

int run_serve(const ServeOptions& options) {
  if (options.list_personalities) return run_list_personalities({options.personality.extra_dirs});
  if (options.listen.empty()) {
    print_usage_error("serve", "--listen tcp://ADDR:PORT (or verbs://ADDR:PORT) is required");
    return kExitUsage;
  }
  if (options.personality.name_or_path.empty()) {
    print_usage_error("serve",
                      "--personality NAME|PATH is required "
                      "(rdma-probe personalities lists the names)");
    return kExitUsage;
  }
  auto uri = transport::parse_provider_uri(options.listen);
  if (!uri) {
    print_usage_error("serve", "--listen " + options.listen + ": " + uri.error());
    return kExitUsage;
  }
  auto personality = resolve_personality(options.personality);
  if (!personality) {
    print_usage_error("serve", personality.error());
    return kExitUsage;
  }

  // Before the provider starts its thread, so that thread inherits the blocked signals. A
  // signal is serve's normal end (status 0), also when forced past the grace.
  tools::SignalWatch signals("rdma-probe", kStopGrace, kExitOk);
  auto provider = transport::open_provider(uri->scheme);
  if (!provider) {
    signals.finished();
    print_usage_error("serve", provider.error());
    return kExitUsage;
  }
  const auto emit = [&options](const json& event) { print_serve_event(event, options.json); };
  transport::ListenOptions listen_options(options.backlog);
  listen_options.overflow =
      options.overflow == "drop" ? cm::BacklogOverflow::kDrop : cm::BacklogOverflow::kReject;
  listen_options.half_open_limit = static_cast<std::uint32_t>(options.half_open_limit);
  listen_options.decision_timeout = std::chrono::milliseconds(options.decision_timeout_ms);
  listen_options.overflow_timeout = std::chrono::milliseconds(options.overflow_timeout_ms);
  auto listener = (*provider)->listen(*uri, personality->mpa, listen_options);
  if (!listener) {
    const auto& e = listener.error();
    auto text = e.detail.empty() ? transport::to_string(e) : e.detail;
    std::fprintf(stderr, "rdma-probe serve: %s\n", text.c_str());
    signals.finished();
    return tools::listen_exit_status(e);
  }
  emit(json{{"event", "listening"},
            {"address", (*listener)->local_address()},
            {"personality", personality->name},
            {"pid", static_cast<long>(getpid())}});

  int limit = options.once ? 1 : options.max_connections;
  // Counted when a connection is taken (so --max-connections stops taking more at once);
  // all_ok is written by the workers.
  int handled = 0;
  std::atomic<bool> all_ok{true};
  const auto& stop = signals.stop_requested();
  // Connections that failed before their Request reached us get their line too, so every
  // TCP connection the peer made is accounted for. An overflow Reject is the listener doing
  // its job under --overflow reject: reported, but neither a failure nor one of the
  // connections --max-connections counts (a storm would otherwise end the server).
  auto report_setup_failures = [&] {
    for (auto& f : (*listener)->take_setup_failures()) {
      const bool overflow = f.error.failure == cm::CmFailure::kBacklogFull;
      emit(failed_connection(f.peer_address, setup_error_json(f.error), f.elapsed_ms));
      if (overflow) continue;
      all_ok.store(false);
      ++handled;
    }
  };
  auto report_backlog_events = [&] {
    if (!options.backlog_events) return;
    for (const auto& e : (*listener)->take_backlog_events()) {
      emit(json{{"event", "backlog"},
                {"type", cm::event_name(e.type)},
                {"reason", cm::reason_name(e.reason)},
                {"peer", e.peer_address},
                {"pending", e.pending}});
    }
  };
  Workers workers(std::clamp(options.backlog, 1, kMaxConcurrent));
  while (!stop.load() && (limit == 0 || handled < limit)) {
    // Every worker busy: the next request waits in the backlog, holding its slot.
    if (!workers.wait_for_room(kRequestSlice)) {
      report_backlog_events();
      report_setup_failures();
      continue;
    }
    auto pending = (*listener)->next_request(kRequestSlice);
    report_backlog_events();
    report_setup_failures();
    if (!pending || stop.load() || (limit != 0 && handled >= limit)) continue;
    // --accept-delay: a slow acceptor keeps the request (and its slot) waiting; in slices,
    // so a stop request is still seen at once.
    for (auto until = Clock::now() + std::chrono::milliseconds(options.accept_delay_ms);
         !stop.load() && Clock::now() < until;) {
      std::this_thread::sleep_for(
          std::min<Clock::duration>(until - Clock::now(), std::chrono::milliseconds(20)));
    }
    ++handled;
    std::shared_ptr<transport::PendingConnection> request = std::move(pending);
    try {
      workers.start([request, &personality, &options, &stop, &all_ok, &emit] {
        // One connection must never take the listener down: serve_one catches.
        const json event = serve_one(*request, *personality, options, stop);
        if (!event["ok"].get<bool>()) all_ok.store(false);
        emit(event);
      });
    } catch (const std::exception& e) {
      // No thread for it (a thread limit): this request is refused, the server goes on.
      request->reject({});
      all_ok.store(false);
      emit(failed_connection(request->peer_address(),
                             local_error("setup", std::string("no worker thread: ") + e.what()),
                             0.0));
    }
  }
  // Connections still being served finish (each bounded by its timeouts, or cut short by
  // the stop request) before the listener closes and the counters are final.
  workers.join_all();
  (*listener)->close();
  report_backlog_events();
  report_setup_failures();
  emit(counters_json((*listener)->counters(), options.overflow));
  signals.finished();
  if (stop.load()) {
    std::fprintf(stderr, "rdma-probe serve: stopped by signal %d after %d connection(s)\n",
                 signals.signal_number(), handled);
    return kExitOk;
  }
  return all_ok.load() ? kExitOk : kExitFailed;
}

}  // namespace rdma_interop::probe
