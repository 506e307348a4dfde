// connection_row.h - one line of `backlog-stat --connections`: a published credit-managed
// connection (telemetry/connection_snapshot.h) with its process, and the filters over them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/telemetry/run_dir.h"
#include "tools/backlog-stat/listener_row.h"

namespace rdma_interop::backlog_stat {

struct ConnectionRow {
  telemetry::ConnectionSnapshot connection;
  std::int64_t pid = 0;
  std::string process;
  std::uint64_t sequence = 0;  // of the snapshot it came from
  std::int64_t wall_ms = 0;    // when that snapshot was written
};

struct ConnectionFilter {
  std::optional<std::uint16_t> port;  // the local or the peer port (like ss's sport/dport)
  std::optional<std::int64_t> pid;
  std::optional<std::string> peer;  // the endpoint's name for the peer, exactly
};

// Rows of every live published connection that passes the filter, ordered by process, then
// as the process lists them (each endpoint's peers in the order they were added).
std::vector<ConnectionRow> connection_rows_of(const telemetry::RunDirScan& scan,
                                              const ConnectionFilter& filter);

// How many connections the scan holds, filters aside: the listener view's "nothing to show"
// points at --connections when a node has connections but no listener.
std::size_t connection_count(const telemetry::RunDirScan& scan);

}  // namespace rdma_interop::backlog_stat
