// report.h - what backlog-stat prints: the ss-like table, or the --json document.
//
// The table shows every string (addresses, process and peer names, the run directory) through
// printable() (core/util/printable_text.h): whatever a snapshot file holds, each row is one
// line with no control character. The JSON document keeps the strings exactly; turn it into
// text with json_text() (core/util/json_text.h), since a path or a kernel name need not be
// UTF-8.
//
// The listener view (the default):
//
//   {"schema": "rdma-interop/backlog-stat/1",
//    "run_dir": "/run/rdma-interop",
//    "listeners": [{"local_address", "scheme", "overflow", "pid", "process", "sequence",
//                   "wall_ms", "counters": {every cm::BacklogCounters field}}],
//    "kernel_status": "not_asked" | "ok" | "no_rdma" | "rdma_tool_missing" | "error",
//    "kernel": [{"device", "port", "local_address", "ps", "pid", "process"}]}
//
// The connection view (--connections), its own schema so that no reader of the listener view
// mistakes one for the other:
//
//   {"schema": "rdma-interop/backlog-stat/connections/1",
//    "run_dir": "/run/rdma-interop",
//    "connections": [{"local_address", "peer_address", "scheme", "peer", "state", "queued",
//                     "queue_limit", "held", "refused", "pid", "process", "sequence",
//                     "wall_ms", "credit": {every credit::CreditCounters field}}]}
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/backlog-stat/connection_row.h"
#include "tools/backlog-stat/kernel_cm_ids.h"
#include "tools/backlog-stat/listener_row.h"
#include "tools/backlog-stat/watch_delta.h"

namespace rdma_interop::backlog_stat {

inline constexpr const char* kReportSchema = "rdma-interop/backlog-stat/1";
inline constexpr const char* kConnectionReportSchema = "rdma-interop/backlog-stat/connections/1";

struct Report {
  std::string run_dir;
  std::vector<ListenerRow> listeners;
  std::optional<KernelScan> kernel;  // nullopt: --kernel not given
  bool empty() const { return listeners.empty() && (!kernel || kernel->listeners.empty()); }
};

// --watch: what changed since the last refresh, one RowChange per row of the report, in its
// order (listeners, or connections), and the interval the rates are over.
struct WatchMarks {
  std::vector<RowChange> rows;
  std::optional<double> interval_s;
};

// The key and figures --watch compares a row by (watch_delta.h).
WatchDelta::Row watch_row(const ListenerRow& row);
WatchDelta::Row watch_row(const ConnectionRow& row);

nlohmann::ordered_json to_json(const Report& r);
// The table(s), each line ending in '\n'. Says so when a section is empty. With `marks`
// (--watch): each figure that changed since the last refresh is marked '*', and rate columns
// follow (Req/s, Acc/s, Rej/s: requests, accepted, and rejected or dropped, per second).
std::string to_text(const Report& r, const WatchMarks* marks = nullptr);

struct ConnectionReport {
  std::string run_dir;
  std::vector<ConnectionRow> connections;
  bool empty() const { return connections.empty(); }
};

nlohmann::ordered_json to_json(const ConnectionReport& r);
// One line per connection, like `ss -tn`; says so when there is none. With `marks`, as above
// (Sent/s, Recv/s, Refused/s).
std::string to_text(const ConnectionReport& r, const WatchMarks* marks = nullptr);

}  // namespace rdma_interop::backlog_stat
