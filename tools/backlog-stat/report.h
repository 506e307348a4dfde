// report.h - what backlog-stat prints: the ss-like table, or the --json document
//
//   {"schema": "rdma-interop/backlog-stat/1",
//    "run_dir": "/run/rdma-interop",
//    "listeners": [{"local_address", "scheme", "overflow", "pid", "process", "sequence",
//                   "wall_ms", "counters": {every cm::BacklogCounters field}}],
//    "kernel_status": "not_asked" | "ok" | "no_rdma" | "rdma_tool_missing" | "error",
//    "kernel": [{"device", "port", "local_address", "ps", "pid", "process"}]}
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/backlog-stat/kernel_cm_ids.h"
#include "tools/backlog-stat/listener_row.h"

namespace rdma_interop::backlog_stat {

inline constexpr const char* kReportSchema = "rdma-interop/backlog-stat/1";

struct Report {
  std::string run_dir;
  std::vector<ListenerRow> listeners;
  std::optional<KernelScan> kernel;  // nullopt: --kernel not given
  bool empty() const { return listeners.empty() && (!kernel || kernel->listeners.empty()); }
};

nlohmann::ordered_json to_json(const Report& r);
// The table(s), each line ending in '\n'. Says so when a section is empty.
std::string to_text(const Report& r);

}  // namespace rdma_interop::backlog_stat
