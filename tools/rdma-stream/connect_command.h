// connect_command.h - `rdma-stream connect`: standard input to the stream, the stream to
// standard output, like `nc -N`: the end of standard input shuts the stream down for writing
// (half-close), and the command ends once the peer's end of stream is read.
#pragma once

#include <atomic>

#include "tools/rdma-stream/stream_cli.h"

namespace rdma_interop::stream_cli {

struct ConnectOptions {
  Common common;
  Address address;
};

// The exit status: ok once the peer's end of stream was read; unreachable when the connect
// found nobody; failed on a reset or a signal.
int run_connect(const ConnectOptions& options, const std::atomic<bool>& stop);

}  // namespace rdma_interop::stream_cli
