#include "tools/backlog-stat/listener_row.h"

#include <algorithm>
#include <charconv>

namespace rdma_interop::backlog_stat {

std::optional<std::uint16_t> port_of(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::uint16_t port = 0;
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  const auto [end, ec] = std::from_chars(first, last, port);
  if (ec != std::errc() || end != last || first == last) return std::nullopt;
  return port;
}

namespace {

bool passes(const std::string& address, std::int64_t pid, const Filter& f) {
  if (f.pid && *f.pid != pid) return false;
  if (f.port && port_of(address) != f.port) return false;
  return true;
}

}  // namespace

std::vector<ListenerRow> rows_of(const telemetry::RunDirScan& scan, const Filter& filter) {
  std::vector<ListenerRow> rows;
  for (const auto& file : scan.files) {
    const auto& s = file.snapshot;
    for (const auto& l : s.listeners) {
      if (!passes(l.local_address, s.pid, filter)) continue;
      rows.push_back({l, s.pid, s.process, s.sequence, s.wall_ms});
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const ListenerRow& a, const ListenerRow& b) {
    const auto pa = port_of(a.listener.local_address).value_or(0);
    const auto pb = port_of(b.listener.local_address).value_or(0);
    if (pa != pb) return pa < pb;
    return a.pid < b.pid;
  });
  return rows;
}

std::vector<KernelListener> filtered(std::vector<KernelListener> kernel, const Filter& filter) {
  std::erase_if(kernel, [&](const KernelListener& k) {
    return !passes(k.local_address, k.pid, filter);
  });
  return kernel;
}

}  // namespace rdma_interop::backlog_stat
