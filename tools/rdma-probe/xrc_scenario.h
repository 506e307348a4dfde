// xrc_scenario.h - one seeded random life of an XRC receive node, checked as it runs: what
// `rdma-probe xrc --simulate SEED` reports, and what xrc_sim_random_test runs seed by seed.
//
// From a seed, on the simulator (core/sim): a receive node running sim::XrcNode, two to four
// sender nodes joined to it by two paths each, and a few seconds (virtual) of processes opening
// and closing domains and target QPs and crashing, senders sending, dying and disconnecting,
// paths failing (APM migrations), partitions healing, a sender node crashing. Then every sender and process
// goes and the node must end empty. A checker that keeps its own account (not the engine's)
// holds the engine to xrc_lifetime.h's guarantees at every reap and at the end:
//   safety    no TQP is reaped while a process holds it, while its connection migrates or
//             within the grace after, or while its sender was answerable (alive, not
//             disconnected, its probe path up or migrating) for the whole detection bound
//             before;
//   liveness  a TQP whose sender is gone for good and that nobody holds is reaped by
//             max(gone, last reference, last migration end + grace) + detection bound;
//   no leaks  at the end the engine holds no TQP or domain and the fabric has none left on
//             the node, and every destroy the engine asked for succeeded.
// The run is a pure function of the seed (and options), so a failing seed replays exactly;
// the trace hash says two runs were the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/xrc/xrc_lifetime.h"

namespace rdma_interop::probe {

struct XrcScenarioOptions {
  std::uint64_t seed = 1;
  bool trace = false;  // keep the text trace and the engine's events
  std::optional<xrc::ProbeConfig> probe = std::nullopt;  // none: drawn from the seed
};

struct XrcScenarioResult {
  std::uint64_t seed = 0;
  bool ok = true;
  std::string violation;  // the first broken guarantee, with the virtual time
  std::uint64_t trace_hash = 0;
  std::vector<std::string> trace;     // with options.trace
  std::vector<xrc::XrcEvent> events;  // with options.trace: every engine event in order
  xrc::ProbeConfig probe;
  xrc::XrcCounters counters;
  xrc::XrcSnapshot busiest;   // the node's state when it held the most TQPs
  std::uint64_t actions = 0;  // scenario steps taken
  std::uint64_t reaps_checked = 0;
  std::uint64_t fabric_events = 0;
  double virtual_seconds = 0;
};

XrcScenarioResult run_xrc_scenario(const XrcScenarioOptions& options);
// The probe settings a seed draws when XrcScenarioOptions::probe is none (what a run of the
// seed reports as XrcScenarioResult::probe), without running it.
xrc::ProbeConfig xrc_scenario_probe(std::uint64_t seed);

}  // namespace rdma_interop::probe
