// listener_snapshot.h - what one process publishes about its listeners and its credit-managed
// connections, as plain values, and their JSON form (the files under the run directory that
// backlog-stat reads).
//
// A file holds one ProcessSnapshot:
//
//   {
//     "schema": "rdma-interop/telemetry/1",
//     "pid": 4242, "process": "rdma-probe",       1..2^31-1 (a pid_t); /proc/self/comm
//     "sequence": 17,                             +1 per file written by this publisher
//     "monotonic_ns": 123456789,                  CLOCK_MONOTONIC when written (0..2^63-1)
//     "wall_ms": 1718000000000,                   Unix time in ms when written (0..2^63-1)
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
//
// Anyone who can write the run directory writes these files, so a reader takes nothing on
// trust: every number must be a non-negative integer that fits its field as written (no
// wrapping, no truncation, no fractions), and strings are kept byte for byte, control
// characters included. Printing them is the printer's business (backlog-stat escapes them:
// core/util/printable_text.h).
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
// The largest "pid" a file may hold: any value that fits pid_t (Linux's own pid_max is at
// most 4194304).
inline constexpr std::int64_t kMaxPid = 2147483647;

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
// Parses a file's text. The error is one sentence: what is missing, of the wrong type or out
// of range. Never throws, whatever the bytes.
Expected<ProcessSnapshot, std::string> parse_snapshot(std::string_view text);

}  // namespace rdma_interop::telemetry
