// rdma-probe connect: one initiator run: connect, the interop exchange, disconnect, report.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>

#include "core/util/json_text.h"
#include "tools/rdma-probe/negotiated_json.h"
#include "tools/common/signal_watch.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"
#include "tools/rdma-probe/interop_exchange.h"
#include "tools/rdma-probe/json_report.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// The human-readable form of the report (without --json).
void print_summary(const json& report) {
  std::cout << (report["ok"].get<bool>() ? "ok" : "FAILED") << ": "
            << report["uri"].get<std::string>() << " as "
            << report["personality"].get<std::string>() << " (" << json_text(report["elapsed_ms"])
            << " ms)\n";
  if (!report["negotiated"].is_null()) {
    std::cout << "  negotiated:     " << json_text(report["negotiated"]) << '\n';
  }
  if (!report["responder_view"].is_null()) {
    std::cout << "  responder view: " << json_text(report["responder_view"]) << '\n';
  }
  if (report["fell_back_to_revision1"].get<bool>()) {
    std::cout << "  fell back to MPA revision 1 after the responder refused revision 2\n";
  }
  if (!report["exchange"].is_null()) {
    const auto& ex = report["exchange"];
    std::cout << "  exchange:       " << (ex["ok"].get<bool>() ? "ok" : "failed") << ", "
              << ex["bytes_verified"].get<std::uint64_t>() << " bytes verified\n";
    for (const auto& step : ex["steps"]) {
      std::cout << "    " << (step["ok"].get<bool>() ? "ok   " : "FAIL ")
                << step["name"].get<std::string>();
      if (step.contains("detail")) std::cout << ": " << step["detail"].get<std::string>();
      std::cout << '\n';
    }
  }
  if (!report["error"].is_null()) {
    const auto& e = report["error"];
    std::cout << "  error:          " << e["kind"].get<std::string>();
    if (!e["failure"].is_null()) std::cout << "/" << e["failure"].get<std::string>();
    std::cout << ": " << e["detail"].get<std::string>() << '\n';
    if (!e["terminate"].is_null())
      std::cout << "  terminate:      " << json_text(e["terminate"]) << '\n';
  }
  std::cout.flush();
}

// After SIGINT/SIGTERM, how long the connection under way may take to end on its own (the
// exchange sees the stop within a slice) before the report so far is printed without it.
constexpr auto kStopGrace = std::chrono::milliseconds(1000);

// The report, printed once: by the main thread at the end, or by the signal watcher's thread
// when a stop request finds the main thread inside a provider call (signal_watch.h).
class Report {
 public:
  Report(json report, bool as_json) : report_(std::move(report)), as_json_(as_json) {}

  // Runs `change` on the report under the lock.
  template <class F>
  void update(F&& change) {
    std::lock_guard lock(mu_);
    change(report_);
  }
  void stage(std::string what) {
    std::lock_guard lock(mu_);
    stage_ = std::move(what);
  }
  // Prints the report (once; later calls print nothing) and returns `status`.
  int emit(int status) {
    std::lock_guard lock(mu_);
    print_locked();
    return status;
  }
  // The signal watcher's forced exit: the report so far, with the interruption as its error.
  void emit_interrupted(int signal, Clock::time_point start) {
    std::lock_guard lock(mu_);
    report_["ok"] = false;
    report_["error"] = interrupted(signal, "during " + stage_);
    report_["elapsed_ms"] = elapsed_ms(start);
    print_locked();
  }
  static json interrupted(int signal, const std::string& when) {
    return json{{"kind", "interrupted"},
                {"failure", nullptr},
                {"detail", "stopped by signal " + std::to_string(signal) + " " + when},
                {"terminate", nullptr}};
  }

 private:
  void print_locked() {
    if (printed_) return;
    printed_ = true;
    if (as_json_) {
      print_json_line(report_);
    } else {
      print_summary(report_);
    }
  }

  std::mutex mu_;  // guards everything below
  json report_;
  const bool as_json_;
  std::string stage_ = "the start";
  bool printed_ = false;
};

}  // namespace

int run_connect(const ConnectOptions& options) {
  auto start = Clock::now();
  auto uri = transport::parse_provider_uri(options.uri);
  if (!uri) {
    print_usage_error("connect", options.uri + ": " + uri.error());
    return kExitUsage;
  }
  if ((uri->scheme == "tcp" || uri->scheme == "verbs") && uri->port == 0) {
    print_usage_error("connect", options.uri + ": connect needs a non-zero port");
    return kExitUsage;
  }
  auto personality = resolve_personality(options.personality);
  if (!personality) {
    print_usage_error("connect", personality.error());
    return kExitUsage;
  }
  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options.timeout_s));
  auto deadline = start + timeout;
  Report report(json{{"schema", kConnectSchema},
                     {"ok", false},
                     {"uri", uri->to_string()},
                     {"personality", personality->name},
                     {"negotiated", nullptr},
                     {"responder_view", nullptr},
                     {"fell_back_to_revision1", false},
                     {"exchange", nullptr},
                     {"error", nullptr},
                     {"elapsed_ms", 0.0}},
                options.json);

  // Before the provider starts its event thread, which inherits the blocked signals.
  tools::SignalWatch signals("rdma-probe connect", kStopGrace, kExitFailed);
  signals.set_forced_exit([&](int signal) { report.emit_interrupted(signal, start); });
  auto provider = transport::open_provider(uri->scheme);
  if (!provider) {
    signals.finished();
    print_usage_error("connect", provider.error());
    return kExitUsage;
  }

  ExchangeMemory memory;  // outlives the connection: the provider uses it
  transport::ConnectOptions connect_options;
  connect_options.caps = memory.caps();
  connect_options.policy = personality->mpa;
  if (options.first_fpdu_delay_ms) {
    connect_options.policy.first_fpdu_delay =
        std::chrono::milliseconds(*options.first_fpdu_delay_ms);
  }
  connect_options.private_data = personality->private_data;
  connect_options.timeout = timeout;
  connect_options.retries = static_cast<std::uint32_t>(options.retries);
  connect_options.retry_backoff = options.retry_backoff.base();
  connect_options.retry_backoff_max = options.retry_backoff.cap();
  report.stage(uri->scheme == "tcp" ? "the TCP connect and MPA setup" : "connection setup");
  auto connected = (*provider)->connect(*uri, connect_options);
  if (!connected) {
    const auto& e = connected.error();
    using Kind = transport::ConnectError::Kind;
    // A TCP connect nobody answered (refused, or no SYN-ACK within --timeout: a blackholed
    // port) is unreachable; an MPA Request nobody answered in time is a failure.
    const int status = e.kind == Kind::kUnreachable       ? kExitUnreachable
                       : e.kind == Kind::kInvalidArgument ? kExitUsage
                                                          : kExitFailed;
    report.update([&](json& r) {
      r["error"] = setup_error_json(e);
      r["attempts"] = e.attempts;
      r["elapsed_ms"] = elapsed_ms(start);
    });
    const int rc = report.emit(status);
    signals.finished();
    return rc;
  }

  auto& connection = **connected;
  const auto& info = connection.info();
  report.update([&](json& r) {
    r["negotiated"] = probe::to_json(info.params);
    r["fell_back_to_revision1"] = info.fell_back_to_revision1;
  });
  report.stage("the exchange");

  ExchangeOptions exchange_options;
  exchange_options.deadline = deadline;
  exchange_options.cancel = &signals.stop_requested();
  exchange_options.silent_initiator = !personality->mpa.send_rtr && info.params.peer_to_peer;
  auto result = run_initiator_exchange(connection, memory, exchange_options);
  report.stage("the disconnect");
  if (connection.state() == transport::ConnectionState::kConnected) {
    connection.disconnect(std::chrono::milliseconds(200));
  }
  const int stopped_by = signals.stop_requested().load() ? signals.signal_number() : 0;
  report.update([&](json& r) {
    r["ok"] = result.ok;
    r["responder_view"] = result.peer_view ? *result.peer_view : json(nullptr);
    r["exchange"] = exchange_json(result, /*with_steps=*/true);
    r["error"] = result.ok         ? json(nullptr)
                 : stopped_by != 0 ? Report::interrupted(stopped_by, "during the exchange")
                                   : exchange_error_json(result);
    r["elapsed_ms"] = elapsed_ms(start);
  });
  const int rc = report.emit(result.ok ? kExitOk : kExitFailed);
  signals.finished();
  return rc;
}

}  // namespace rdma_interop::probe
