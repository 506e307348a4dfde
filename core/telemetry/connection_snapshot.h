// connection_snapshot.h - what a process publishes about each credit-managed connection of
// a message endpoint (core/messaging/message_endpoint.h): its credit figures, as plain values.
//
// They go into the same run-directory file as the listeners (listener_snapshot.h), as a
// "connections" array next to "listeners" (an older file without it reads as none):
//
//   "connections": [
//     { "local_address": "198.18.0.1:40122", "peer_address": "198.18.0.2:7300",
//       "scheme": "tcp", "peer": "node2", "state": "connected",  connected | failed | closed
//       "queued": 3, "queue_limit": 64,        messages waiting for a credit (send queue)
//       "held": 1,                             received messages held for a reply
//       "refused": 12,                         send() calls refused with try-again
//       "credit": { "credits": 5, ... every credit::CreditCounters field } }
//   ]
#pragma once

#include <cstdint>
#include <string>

#include "core/credit/credit_window.h"

namespace rdma_interop::telemetry {

struct ConnectionSnapshot {
  std::string local_address;
  std::string peer_address;
  std::string scheme;  // "tcp", "verbs"
  std::string peer;    // the endpoint's name for the peer
  std::string state;   // "connected", "failed", "closed"
  std::uint32_t queued = 0;
  std::uint32_t queue_limit = 0;
  std::uint32_t held = 0;
  std::uint64_t refused = 0;
  credit::CreditCounters credit;
  friend bool operator==(const ConnectionSnapshot&, const ConnectionSnapshot&) = default;
};

}  // namespace rdma_interop::telemetry
