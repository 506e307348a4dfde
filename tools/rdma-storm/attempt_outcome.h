// attempt_outcome.h - how one storm attempt ended: exactly one of seven outcomes.
//
// An attempt is one logical connect, retries included. The outcome names are the storm's
// report keys and match the server's BacklogCounters so the two can be reconciled:
//   connected          the MPA Reply accepted us              (server: accepted)
//   overflow_rejected  a Reject carrying the backlog-full marker (server: overflow_rejected)
//   app_rejected       the application's own Reject            (server: rejected_by_app)
//   expired            no Reply in time, or reset/closed after the server gave up waiting
//                      (server: overflow_dropped, pending_expired, half_open_expired...)
//   tcp_timeout        the TCP connect got no answer in time: the SYN was dropped (the
//                      listener's kernel accept queue full, or the network); the server never
//                      saw the attempt, so nothing of its counts it
//   gave_up            retries exhausted on a retryable failure (the last try says which)
//   other              anything else, with the failure's stable name ("unreachable", ...)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/transport/provider.h"

namespace rdma_interop::storm {

enum class Outcome : std::uint8_t {
  kConnected,
  kOverflowRejected,
  kAppRejected,
  kExpired,
  kTcpTimeout,
  kGaveUp,
  kOther,
};
inline constexpr std::size_t kOutcomeCount = 7;
inline constexpr std::array<Outcome, kOutcomeCount> kAllOutcomes = {
    Outcome::kConnected,  Outcome::kOverflowRejected, Outcome::kAppRejected, Outcome::kExpired,
    Outcome::kTcpTimeout, Outcome::kGaveUp,           Outcome::kOther};

std::string_view outcome_name(Outcome o);  // "connected", "overflow_rejected", ...

// What one try (one TCP connection and its MPA setup) came to, before retries are judged.
struct TryResult {
  Outcome outcome = Outcome::kOther;  // never kGaveUp
  std::string other_name;             // for kOther: "unreachable", "malformed_frame", ...
};

// Classifies a failed connect. A reply timeout, a reset or a close during setup all mean
// the server never decided for us in time (drop policy, or an expired pending request).
TryResult classify(const transport::ConnectError& error);

// Whether a retry may help: the listener was full (overflow Reject, or no answer under the
// drop policy), the TCP connect was refused/reset, or its SYN went unanswered. An
// application's Reject is final.
bool retryable(const TryResult& result);

// Whether the try never reached the listener: refused, no route, no answer to the SYN.
bool never_reached(const TryResult& result);

}  // namespace rdma_interop::storm
