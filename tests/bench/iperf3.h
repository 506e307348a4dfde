// iperf3.h - iperf3 over loopback, as the yardstick for the raw TCP stream baseline.
//
// iperf3 is the tool people measure TCP with; if our own raw stream were slower than it, the
// baseline would flatter our provider. Runs `iperf3 -s -1` and `iperf3 -c 127.0.0.1 -J` as
// child processes (Debian package iperf3) and reads the receiver's rate from the JSON.
#pragma once

#include <string>

#include "core/util/expected.h"

namespace rdma_interop::bench {

struct Iperf3Result {
  double gbps = 0;      // end.sum_received.bits_per_second / 1e9
  int seconds = 0;      // what was asked for (iperf3 takes whole seconds)
  std::string version;  // start.version, e.g. "iperf 3.12"
};

// One single-stream client run of `seconds` (rounded, at least 1). Errors: iperf3 not on
// PATH, the server never listening, iperf3's own "error", or JSON without the figure.
Expected<Iperf3Result, std::string> iperf3_loopback(double seconds);

}  // namespace rdma_interop::bench
