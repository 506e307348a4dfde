// storm_report.h - a storm's result as the "rdma-interop/storm/1" JSON document (--json)
// or as a short text summary. The JSON is the interface the storm tests parse:
//   {"schema":"rdma-interop/storm/1","uri":..,"personality":..,"planned":N,"attempts":N,
//    "concurrency":K,"retries":R,"retry_mode":"none|storm|provider","hold_ms":..,
//    "elapsed_s":..,"hit_duration_limit":false,"stopped_by_signal":false,
//    "outcomes":{"connected":..,"overflow_rejected":..,"app_rejected":..,"expired":..,
//                "tcp_timeout":..,"gave_up":..,"other":..},  each attempt counted once
//    "other":{"<failure name>":n},"gave_up_last":{"<last try's outcome>":n},
//    "tries":n,"tries_exact":true,"tries_by_outcome":{...same keys minus gave_up...},
//    "threads":[{"index":0,"attempts":..,"connected":..,"tries":..}],
//    "unreached":n,                 attempts whose last try never reached the listener
//    "jain_index":0.998|null,"connected_per_s":..,
//    "latency_ms":{"connected":{"count","mean","p50","p90","p99","max"},"all":{...}}}
// Where nothing was measured (no attempt connected: no latency, no share to be fair about),
// the figures are null in the JSON and n/a in the text, never 0.00 or 1.000.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tools/rdma-storm/storm_config.h"
#include "tools/rdma-storm/storm_runner.h"

namespace rdma_interop::storm {

inline constexpr const char* kStormSchema = "rdma-interop/storm/1";

nlohmann::ordered_json report_json(const StormConfig& config, StormResult& result);
std::string report_text(const nlohmann::ordered_json& report);

}  // namespace rdma_interop::storm
