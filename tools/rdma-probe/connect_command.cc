// rdma-probe connect: one initiator run: connect, the interop exchange, disconnect, report.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "tools/rdma-probe/negotiated_json.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"
#include "tools/rdma-probe/interop_exchange.h"
#include "tools/rdma-probe/json_report.h"
#include "core/util/json_text.h"

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

int emit(const json& report, bool as_json, int status) {
  if (as_json) {
    print_json_line(report);
  } else {
    print_summary(report);
  }
  return status;
}

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
  auto provider = transport::open_provider(uri->scheme);
  if (!provider) {
    print_usage_error("connect", provider.error());
    return kExitUsage;
  }

  auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(options.timeout_s));
  auto deadline = start + timeout;
  json report{{"schema", kConnectSchema},
              {"ok", false},
              {"uri", uri->to_string()},
              {"personality", personality->name},
              {"negotiated", nullptr},
              {"responder_view", nullptr},
              {"fell_back_to_revision1", false},
              {"exchange", nullptr},
              {"error", nullptr},
              {"elapsed_ms", 0.0}};

  ExchangeMemory memory;  // outlives the connection: the provider uses it
  transport::ConnectOptions connect_options;
  connect_options.caps = memory.caps();
  connect_options.policy = personality->mpa;
  if (options.first_fpdu_delay_ms) {
    connect_options.policy.first_fpdu_delay = std::chrono::milliseconds(*options.first_fpdu_delay_ms);
  }
  connect_options.private_data = personality->private_data;
  connect_options.timeout = timeout;
  connect_options.retries = static_cast<std::uint32_t>(options.retries);
  connect_options.retry_backoff = std::chrono::milliseconds(options.retry_backoff_ms);
  connect_options.retry_backoff_max =
      std::min(std::chrono::milliseconds(30000), 50 * connect_options.retry_backoff);
  auto connected = (*provider)->connect(*uri, connect_options);
  if (!connected) {
    const auto& e = connected.error();
    report["error"] = setup_error_json(e);
    report["attempts"] = e.attempts;
    report["elapsed_ms"] = elapsed_ms(start);
    using Kind = transport::ConnectError::Kind;
    int status = e.kind == Kind::kUnreachable       ? kExitUnreachable
                 : e.kind == Kind::kInvalidArgument ? kExitUsage
                                                    : kExitFailed;
    return emit(report, options.json, status);
  }

  auto& connection = **connected;
  const auto& info = connection.info();
  report["negotiated"] = probe::to_json(info.params);
  report["fell_back_to_revision1"] = info.fell_back_to_revision1;

  ExchangeOptions exchange_options;
  exchange_options.deadline = deadline;
  exchange_options.silent_initiator = !personality->mpa.send_rtr && info.params.peer_to_peer;
  auto result = run_initiator_exchange(connection, memory, exchange_options);
  if (connection.state() == transport::ConnectionState::kConnected) {
    connection.disconnect(std::chrono::milliseconds(200));
  }
  report["ok"] = result.ok;
  report["responder_view"] = result.peer_view ? *result.peer_view : json(nullptr);
  report["exchange"] = exchange_json(result, /*with_steps=*/true);
  report["error"] = result.ok ? json(nullptr) : exchange_error_json(result);
  report["elapsed_ms"] = elapsed_ms(start);
  return emit(report, options.json, result.ok ? kExitOk : kExitFailed);
}

}  // namespace rdma_interop::probe
