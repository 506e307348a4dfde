// listener_row.h - one line of backlog-stat: a published listener with its process, and
// the kernel's RDMA CM listeners next to them; the --port/--pid filters over both.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/telemetry/run_dir.h"

namespace rdma_interop::backlog_stat {

struct ListenerRow {
  telemetry::ListenerSnapshot listener;
  std::int64_t pid = 0;
  std::string process;
  std::uint64_t sequence = 0;  // of the snapshot it came from
  std::int64_t wall_ms = 0;    // when that snapshot was written
};

// A kernel RDMA CM id in state LISTEN, as `rdma -j resource show cm_id` reports it.
struct KernelListener {
  std::string device;         // "siw0" ("" for a wildcard id not bound to a device yet)
  std::uint32_t port = 0;     // the device port ("port" in rdma's output), 0 if none
  std::string local_address;  // "0.0.0.0:7174", as "src-addr" (+ "src-port") says
  std::string ps;             // port space: "TCP", "UDP", "IPoIB"
  std::int64_t pid = 0;
  std::string process;        // comm, or the kernel module's name for kernel users
};

struct Filter {
  std::optional<std::uint16_t> port;
  std::optional<std::int64_t> pid;
};

// The port after the last ':' of "host:port" (IPv6 hosts included), if it parses.
std::optional<std::uint16_t> port_of(const std::string& address);

// Rows of every live published listener that passes the filter, ordered by address.
std::vector<ListenerRow> rows_of(const telemetry::RunDirScan& scan, const Filter& filter);
std::vector<KernelListener> filtered(std::vector<KernelListener> kernel, const Filter& filter);

}  // namespace rdma_interop::backlog_stat
