// listener_snapshot.h - what one process publishes about its listeners and its credit-managed
// connections, as plain values, and their JSON form (the files under the run directory that
// backlog-stat reads).
//
// A file holds one ProcessSnapshot:
//
//   {
//     "schema": "rdma-interop/telemetry/1",
//     "pid": 4242, "process": "rdma-probe",       /proc/self/comm of the publisher
//     "sequence": 17,                             +1 per file written by this publisher
//     "monotonic_ns": 123456789,                  CLOCK_MONOTONIC when written
//     "wall_ms": 1718000000000,                   Unix time in ms when written
//     "listeners": [
//       { "local_address": "127.0.0.1:7174", "scheme": "tcp",
//         "overflow": "drop",                     drop | reject | null (not known)
//         "counters": { "backlog": 64, "pending": 3, ... every cm::BacklogCounters field } }
//     ],
//     "connections": [ ... ]                      message endpoints' peers: see
//   }                                             connection_snapshot.h
//
// Readers accept unknown keys (newer publishers may add some) but not missing ones, with one
// exception: a file without "connections" (written before they existed) reads as none.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cm/backlog_counters.h"
#include "core/telemetry/connection_snapshot.h"
#include "core/util/expected.h"

namespace rdma_interop::telemetry {

inline constexpr std::string_view kSnapshotSchema = "rdma-interop/telemetry/1";

struct ListenerSnapshot {
  std::string local_address;                   // "198.18.0.2:7174"
  std::string scheme;                          // "tcp", "verbs"
  std::optional<cm::BacklogOverflow> overflow; // nullopt: the provider does not say
  cm::BacklogCounters counters;

  friend bool operator==(const ListenerSnapshot&, const ListenerSnapshot&) = default;
};

struct ProcessSnapshot {
  std::int64_t pid = 0;
  std::string process;        // the kernel's comm (at most 15 characters)
  std::uint64_t sequence = 0;
  std::int64_t monotonic_ns = 0;
  std::int64_t wall_ms = 0;
  std::vector<ListenerSnapshot> listeners;
  std::vector<ConnectionSnapshot> connections;

  friend bool operator==(const ProcessSnapshot&, const ProcessSnapshot&) = default;
};

// "drop" / "reject", and back (nullopt for anything else).
std::string_view overflow_text(cm::BacklogOverflow o);
std::optional<cm::BacklogOverflow> parse_overflow(std::string_view text);

// The JSON document above, as text (one line).
std::string to_json_text(const ProcessSnapshot& s);
// Parses a file's text. The error is one sentence: what is missing or of the wrong type.
Expected<ProcessSnapshot, std::string> parse_snapshot(std::string_view text);

}  // namespace rdma_interop::telemetry
