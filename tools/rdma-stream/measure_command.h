// measure_command.h - `rdma-stream measure`: what a stream does against an `rdma-stream serve`,
// like iperf3: throughput (octets a second, served by discard or echo), request/response round
// trips (served by echo), or streams opened a second (each open, one octet out and back,
// close; served by echo). Progress once a second on stderr, then one summary.
#pragma once

#include <atomic>
#include <cstddef>

#include "tools/rdma-stream/stream_cli.h"

namespace rdma_interop::stream_cli {

enum class MeasureMode { kThroughput, kRoundTrip, kOpen };
MeasureMode measure_mode(const std::string& name);  // "throughput", "rr", "open"
const char* measure_mode_name(MeasureMode mode);

struct MeasureOptions {
  Common common;
  Address address;
  MeasureMode mode = MeasureMode::kThroughput;
  double seconds = 5;
  std::size_t size = 0;  // octets per send (throughput) or request (rr); 0: 64 KiB, 64
  int streams = 1;       // streams measured at once, each on a thread of its own
  double progress_s = 1;  // 0: no progress lines
};

// The exit status: ok when the run was measured; unreachable when the first connect found
// nobody; failed when a stream failed during the run or a signal cut it short (the summary of
// what was measured is printed first).
int run_measure(const MeasureOptions& options, const std::atomic<bool>& stop);

}  // namespace rdma_interop::stream_cli
