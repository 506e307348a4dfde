// storm_runner.h - runs a bounded connect storm: `concurrency` client threads, each making
// its share of the attempts one at a time, until done or the duration limit.
//
// The provider's connect is blocking and thread-safe, so a thread per client is the whole
// design: each thread keeps its own Tally (merged at the end) and its own jitter RNG, and
// the only shared state is a handful of atomics for the progress line.
#pragma once

#include <atomic>

#include "core/transport/provider.h"
#include "tools/rdma-storm/storm_config.h"
#include "tools/rdma-storm/storm_tally.h"

namespace rdma_interop::storm {

struct StormResult {
  Tally tally;
  std::uint64_t planned = 0;      // config.attempts
  double elapsed_s = 0;           // first attempt start to the last outcome
  bool hit_duration_limit = false;  // some planned attempts never started
  bool stopped_by_signal = false;   // `stop` ended it early
  const char* retry_mode = "none";  // "none", "storm" (our loop) or "provider"
};

// `provider` may be null only for config.raw_tcp. Progress lines go to stderr. Once `stop`
// is set (a signal), no attempt or retry starts; those under way finish (each bounded by
// the try timeout) and the result counts what was done.
StormResult run_storm(const StormConfig& config, transport::Provider* provider,
                      const std::atomic<bool>* stop = nullptr);

}  // namespace rdma_interop::storm
