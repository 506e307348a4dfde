// serve_log.h - what `rdma-probe serve` prints for each event: a log line for people by
// default, or with --json the event object itself, one per line (json_report.h).
//
// Every event is built as its JSON object first (the --json contract in serve's --help); the
// log line is written from that object, so the two never say different things:
//
//   12:00:01 listening on 198.18.0.2:7174 as siw (pid 123)
//   12:00:03 connection from 198.18.0.1:40122: ok, revision 2, peer-to-peer rtr read, crc,
//            ird 16 ord 16, 196608 bytes verified (3.2 ms)
//   12:00:04 connection from 198.18.0.1:40124: FAILED setup no_matching_rtr: ... (Terminate
//            layer 2 etype 0 code 7) (0.8 ms)
//   12:00:05 backlog: backlog_added (request) 198.18.0.1:40126, pending 3
//   12:00:09 counters: overflow reject, backlog 16, pending 0, high_water 3, requests 5, ...
//
// Text from the peer (details, addresses) is escaped (core/util/printable_text.h).
// Thread-safe: lines from several threads never interleave.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rdma_interop::probe {

// The log line of `event` (without the time), wrapped at 92 columns with continuation lines
// indented by 9, to sit under the time.
std::string serve_log_line(const nlohmann::ordered_json& event);

// Prints `event`: its JSON line when `as_json`, else the time and its log line.
void print_serve_event(const nlohmann::ordered_json& event, bool as_json);

}  // namespace rdma_interop::probe
