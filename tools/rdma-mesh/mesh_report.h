// mesh_report.h - what a mesh node prints: one JSON object per line (--json), or short text.
//
// The JSON lines are the interface the mesh tests parse. Every line has "event" and "node":
//   {"event":"listening","node":"N1","address":"198.18.0.1:7300","pid":123}
//   {"event":"connected","node":"N1","peer":"N2","role":"connect"|"accept",
//    "local_address":..,"peer_address":..}
//   {"event":"started","node":"N1","setup_ms":812.5,"peers":["N2","N3"]}
//   {"event":"report","node":"N1","t":1.5,"rss_kib":5120,"peers":{"N2":PEER,...}}
//       every --report-interval-ms from the start barrier (t in seconds since it), and one
//       at the end of the run (t = the run's length)
//   {"event":"peer_failed","node":"N1","peer":"N2","t":3.2,"detail":"..."}
//   {"event":"peer_closed","node":"N1","peer":"N2","t":3.2,"detail":"..."}  closed in order
//   {"event":"summary","node":"N1","ok":true,"run_s":10.0,"rss_kib":{"start":..,"peak":..,
//    "end":..},"endpoint":{"bytes_allocated":..,"budget":{..},"cq":{..}},"peers":{..PEER..}}
//       after the drain: the final figures
//   {"event":"notice","node":"N1","notice":"..."}  worth knowing, not fatal (a stranger's
//       Request rejected, a peer missing from the end barrier)
//   {"event":"error","node":"N1","error":"..."}   setup failed (exit status 1)
// PEER:
//   {"state":"connected"|"failed"|"closed","detail":"",
//    "sent":..,"received":..,"bytes_sent":..,"bytes_received":..,   endpoint data messages
//    "refused":..,"credits":..,"queued":..,"replies_queued":..,"held":..,
//    "stalls":..(sends refused for want of a credit),"slot_stalls":..,"lost":..,
//    "terminate_sent":null|{"layer":1,"etype":2,"code":2,"text":"DDP/untagged/..."},
//    "terminate_received":null|{...},
//    "app":{"stream_sent","requests_sent","replies_sent","stream_received",
//           "requests_received","replies_received","sequence_errors","unknown","refused",
//           "send_errors","head_blocked_ms"},
//    "credit":{every credit::CreditCounters field, as backlog-stat --json names them}}
#pragma once

#include <cstdint>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/messaging/message_endpoint.h"
#include "tools/rdma-mesh/peer_tally.h"

namespace rdma_interop::mesh {

using json = nlohmann::ordered_json;

// VmRSS of this process in KiB, from /proc/self/status; nullopt if it cannot be read.
std::optional<std::uint64_t> vm_rss_kib();

json terminate_json(const wire::TerminateMessage& t);
json endpoint_json(const messaging::EndpointStats& s);
// PEER above, from the endpoint's figures (absent once the endpoint forgot the peer) and ours.
json peer_json(const std::optional<messaging::PeerStats>& stats, const PeerTally& tally);

// Writes events to stdout, whole lines at a time (callers are on several threads).
class ReportWriter {
 public:
  ReportWriter(std::string node, bool as_json) : node_(std::move(node)), json_(as_json) {}
  // Adds "node" after "event", prints one JSON line, or its text form without --json.
  void emit(json event);

 private:
  std::string text_of(const json& event) const;

  std::string node_;
  bool json_;
  std::mutex mu_;
};

}  // namespace rdma_interop::mesh
