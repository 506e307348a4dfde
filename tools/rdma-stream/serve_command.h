// serve_command.h - `rdma-stream serve`: a listener whose every connection, upgraded or plain,
// is served on a thread of its own (echo, discard or source), one line printed per connection.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "tools/rdma-stream/stream_cli.h"

namespace rdma_interop::stream_cli {

enum class ServeMode { kEcho, kDiscard, kSource };
ServeMode serve_mode(const std::string& name);  // "echo", "discard", "source"
const char* serve_mode_name(ServeMode mode);

struct ServeOptions {
  Common common;
  Address address;
  ServeMode mode = ServeMode::kEcho;
  std::uint64_t max_connections = 0;  // 0: no limit
  std::size_t size = 64 * 1024;       // octets per send of the source mode
};

// Serves until `stop` (a signal) or, with max_connections, until that many connections were
// accepted and have ended. The exit status: ok, or cannot run when it cannot listen.
int run_serve(const ServeOptions& options, const std::atomic<bool>& stop);

}  // namespace rdma_interop::stream_cli
