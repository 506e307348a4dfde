#include "tools/rdma-probe/json_report.h"

#include <cmath>
#include <cstdio>
#include <mutex>

#include "core/util/json_text.h"

namespace rdma_interop::probe {

using json = nlohmann::ordered_json;

json terminate_json(const wire::TerminateCause& cause) {
  return json{{"layer", static_cast<int>(cause.layer)},
              {"etype", static_cast<int>(cause.etype)},
              {"code", static_cast<int>(cause.code)}};
}

std::string_view error_kind_name(transport::ConnectError::Kind kind) {
  using Kind = transport::ConnectError::Kind;
  switch (kind) {
    case Kind::kSetup:
      return "setup";
    case Kind::kUnreachable:
      return "unreachable";
    case Kind::kAddressInUse:
      return "address_in_use";
    case Kind::kInvalidArgument:
      return "invalid_argument";
    case Kind::kTimeout:
      return "timeout";
  }
  return "setup";
}

json setup_error_json(const transport::ConnectError& error) {
  return json{
      {"kind", error_kind_name(error.kind)},
      {"failure", error.failure ? json(cm::failure_name(*error.failure)) : json(nullptr)},
      {"detail", error.detail},
      {"terminate", error.terminate ? terminate_json(*error.terminate) : json(nullptr)},
  };
}

json exchange_error_json(const ExchangeResult& result) {
  return json{
      {"kind", result.timed_out ? "timeout" : "exchange"},
      {"failure", result.failure ? json(*result.failure) : json(nullptr)},
      {"detail", result.detail},
      {"terminate", result.terminate ? terminate_json(*result.terminate) : json(nullptr)},
  };
}

json exchange_json(const ExchangeResult& result, bool with_steps) {
  json j{{"ok", result.ok}, {"bytes_verified", result.bytes_verified}};
  if (with_steps) {
    json steps = json::array();
    for (const auto& s : result.steps) {
      json step{{"name", s.name}, {"ok", s.ok}};
      if (!s.detail.empty()) step["detail"] = s.detail;
      steps.push_back(std::move(step));
    }
    j["steps"] = std::move(steps);
  }
  return j;
}

double elapsed_ms(std::chrono::steady_clock::time_point start) {
  std::chrono::duration<double, std::milli> d = std::chrono::steady_clock::now() - start;
  return std::round(d.count() * 10.0) / 10.0;
}

void print_json_line(const json& object) {
  // Invalid UTF-8 from a peer (private data, details) is replaced, never a throw.
  auto line = json_text(object) + "\n";
  // serve prints from one thread per connection: one line is written whole.
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace rdma_interop::probe
