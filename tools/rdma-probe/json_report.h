// json_report.h - the JSON objects rdma-probe prints (its stdout is its interface).
//
// serve prints one object per line ("listening", then one "connection" per connection);
// connect --json prints one "rdma-interop/connect/1" report. The field layout is the
// contract in the rdma-probe --help text; the lab and the interop suite parse it.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/transport/provider.h"
#include "tools/rdma-probe/interop_exchange.h"

namespace rdma_interop::probe {

inline constexpr std::string_view kConnectSchema = "rdma-interop/connect/1";

// {"layer":2,"etype":0,"code":7}
nlohmann::ordered_json terminate_json(const wire::TerminateCause& cause);
// "setup" | "unreachable" | "address_in_use" | "invalid_argument" | "timeout"
std::string_view error_kind_name(transport::ConnectError::Kind kind);
// {"kind":..,"failure":"<cm failure name>"|null,"detail":..,"terminate":{..}|null}
nlohmann::ordered_json setup_error_json(const transport::ConnectError& error);
// The same shape for an exchange that failed: kind "exchange" (or "timeout").
nlohmann::ordered_json exchange_error_json(const ExchangeResult& result);
// {"ok":..,"bytes_verified":..} plus "steps" when asked.
nlohmann::ordered_json exchange_json(const ExchangeResult& result, bool with_steps);

// Milliseconds since `start`, to 0.1 ms.
double elapsed_ms(std::chrono::steady_clock::time_point start);

// One object, one line, flushed: a reader sees each event as it happens. Thread-safe: lines
// from several threads never interleave. Bytes that are not UTF-8 become U+FFFD.
void print_json_line(const nlohmann::ordered_json& object);

}  // namespace rdma_interop::probe
