// mesh_node.h - one node of an N:N mesh: a MessageEndpoint with a connection to every peer,
// traffic to all of them at once, and a report line every interval.
//
//   setup    listen; join_mesh() (mesh_setup.h); then a start barrier: a 'B' message to every
//            peer, and the run starts once one came from every peer, so all nodes measure
//            the same window (to within a round trip)
//   run      the sender thread (mesh_sender.h) for --duration; received messages are
//            counted by kind and checked for gaps; requests are answered with reply(), at
//            once or, with --handler-delay-us, by the slow consumer (slow_consumer.h) after
//            hold(); a report line every --report-interval-ms and one at the end
//   drain    --drain ms more without new sends (replies in flight still arrive and are
//            counted), then the summary line
//   end      an end barrier ('E' to every peer still connected, then one from each, or 3 s),
//            so no node closes while another is taking its summary; then an orderly close
//
// The endpoint publishes every peer's credit figures to the run directory (telemetry), so
// backlog-stat sees the node while it runs.
#pragma once

#include <atomic>

#include "tools/common/exit_status.h"
#include "tools/rdma-mesh/mesh_config.h"
#include "tools/rdma-mesh/mesh_report.h"

namespace rdma_interop::mesh {

// Exit status of a node (tools/common/exit_status.h).
inline constexpr int kExitRan = tools::kExitOk;  // the run finished (failed peers are reported)
// No provider, no listener, the setup or start barrier incomplete by --setup-timeout;
// --fail-on-peer-error and a peer failed; or a signal cut the run short.
inline constexpr int kExitFailed = tools::kExitFailed;
inline constexpr int kExitBadArguments = tools::kExitUsage;

// Runs the node to the end; `stop` (a signal) ends the run early, still with a summary, and
// the status is then kExitFailed.
int run_node(const MeshConfig& config, const std::atomic<bool>& stop, ReportWriter& out);

}  // namespace rdma_interop::mesh
