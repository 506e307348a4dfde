#include "tools/backlog-stat/connection_row.h"

namespace rdma_interop::backlog_stat {
namespace {

bool passes(const telemetry::ConnectionSnapshot& c, std::int64_t pid, const ConnectionFilter& f) {
  if (f.pid && *f.pid != pid) return false;
  if (f.port && port_of(c.local_address) != f.port && port_of(c.peer_address) != f.port) {
    return false;
  }
  if (f.peer && *f.peer != c.peer) return false;
  return true;
}

}  // namespace

std::vector<ConnectionRow> connection_rows_of(const telemetry::RunDirScan& scan,
                                              const ConnectionFilter& filter) {
  // The scan is already in pid order, and each file lists its connections in its own order.
  std::vector<ConnectionRow> rows;
  for (const auto& file : scan.files) {
    const auto& s = file.snapshot;
    for (const auto& c : s.connections) {
      if (!passes(c, s.pid, filter)) continue;
      rows.push_back({c, s.pid, s.process, s.sequence, s.wall_ms});
    }
  }
  return rows;
}

std::size_t connection_count(const telemetry::RunDirScan& scan) {
  std::size_t n = 0;
  for (const auto& file : scan.files) n += file.snapshot.connections.size();
  return n;
}

}  // namespace rdma_interop::backlog_stat
