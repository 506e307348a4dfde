// storm_report.h - a storm's result as the "rdma-interop/storm/1" JSON document (--json)
// or as a short text summary. The JSON is the interface the storm tests parse:
//   {"schema":"rdma-interop/storm/1","uri":..,"personality":..,"planned":N,"attempts":N,
//    "concurrency":K,"retries":R,"retry_mode":"none|storm|provider","hold_ms":..,
//    "elapsed_s":..,"hit_duration_limit":false,
//    "outcomes":{"connected":..,"overflow_rejected":..,"app_rejected":..,"expired":..,
//                "gave_up":..,"other":..},            each attempt counted exactly once
//    "other":{"<failure name>":n},"gave_up_last":{"<last try's outcome>":n},
//    "tries":n,"tries_exact":true,"tries_by_outcome":{...same keys minus gave_up...},
//    "threads":[{"index":0,"attempts":..,"connected":..,"tries":..}],
//    "jain_index":0.998,"connected_per_s":..,
//    "latency_ms":{"connected":{"count","mean","p50","p90","p99","max"},"all":{...}}}
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
