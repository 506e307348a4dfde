// backlog_counters.h - what a listener's backlog has seen: the figures `backlog-stat` shows,
// telemetry publishes and the storm tests reconcile against the clients' own tallies.
//
// A connect request (a complete, valid MPA Request) holds a backlog slot from the moment it
// is received until the application accepts or rejects it, or it expires. Connections whose
// Request is not complete yet are "half-open": they never hold a slot, sit in their own
// bounded queue and expire after the request timeout.
//
// Invariants, exact under any interleaving (each request is counted once, when it leaves),
// checked by BacklogCounters::broken_invariant(), which every test that reconciles counters
// uses (one copy of them, not one per test):
//   requests == pending + overflow_waiting + accepted + rejected_by_app + pending_expired
//               + pending_aborted + overflow_rejected + overflow_dropped
//   pending <= high_water <= backlog
//   half_open_opened == half_open + half_open_completed + half_open_expired
//                       + half_open_aborted + half_open_evicted
//   half_open <= half_open_limit (when a limit is set)
//   a Request waits (drop policy) only while every slot is held
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rdma_interop::cm {

// What a listener does with a Request that finds every backlog slot taken.
enum class BacklogOverflow : std::uint8_t {
  kDrop,    // leave it unanswered (TCP/IB style) in arrival order until a slot frees (it then
            // takes the slot) or it expires: the initiator waits or retries
  kReject,  // MPA Reply with Reject and the listener-overflow marker (iWARP style)
};
std::string_view overflow_name(BacklogOverflow o);  // "drop", "reject"

struct BacklogCounters {
  std::uint32_t backlog = 0;            // slots (the listen() argument)
  std::uint32_t pending = 0;            // Requests holding a slot now
  std::uint32_t high_water = 0;         // most slots ever held at once
  std::uint64_t requests = 0;           // valid Requests received
  std::uint64_t accepted = 0;           // the application accepted (Reply sent)
  std::uint64_t rejected_by_app = 0;    // the application rejected
  std::uint64_t pending_expired = 0;    // held a slot, the application never decided in time
  std::uint64_t pending_aborted = 0;    // held a slot, the peer went away before a decision
  std::uint64_t overflow_rejected = 0;  // over the backlog, answered with the overflow Reject
  std::uint32_t overflow_waiting = 0;   // drop policy: unanswered, waiting for a slot now
  std::uint64_t overflow_dropped = 0;   // drop policy: expired or the peer gave up waiting
  std::uint32_t half_open = 0;          // TCP connections without a complete Request now
  std::uint32_t half_open_limit = 0;    // most half-open connections kept at once
  std::uint64_t half_open_opened = 0;
  std::uint64_t half_open_completed = 0;  // their Request arrived (counted in requests)
  std::uint64_t half_open_expired = 0;    // no complete Request within the request timeout
  std::uint64_t half_open_aborted = 0;    // the peer closed, or sent garbage, first
  std::uint64_t half_open_evicted = 0;    // the oldest, closed to make room: the queue was full

  // Empty when every invariant above holds, else a sentence naming the first broken one
  // with its figures.
  std::string broken_invariant() const;

  friend bool operator==(const BacklogCounters&, const BacklogCounters&) = default;
};

}  // namespace rdma_interop::cm
