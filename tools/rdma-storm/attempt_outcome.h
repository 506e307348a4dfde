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
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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
// Whether a failed try is worth another is not the storm's to say: `failure` goes to
// core/transport/connect_retry.h, the policy every provider's own retries follow, so the
// storm's loop (--retry-mode storm) retries exactly what the provider's would.
struct TryResult {
  TryResult(Outcome o = Outcome::kOther, std::string other = {},
            std::optional<transport::ConnectError> what_failed = std::nullopt)
      : outcome(o), other_name(std::move(other)), failure(std::move(what_failed)) {}

  Outcome outcome;                                 // never kGaveUp
  std::string other_name;                          // for kOther: "unreachable", ...
  std::optional<transport::ConnectError> failure;  // what failed; nullopt when connected
};

// Classifies a failed connect (and keeps it, for the retry policy). A reply timeout, a
// reset or a close during setup all mean the server never decided for us in time (drop
// policy, or an expired pending request).
TryResult classify(const transport::ConnectError& error);

// Whether transport::retryable() says another try may help (false when connected).
bool worth_retry(const TryResult& result);

// Whether the try never reached the listener: refused, no route, no answer to the SYN.
bool never_reached(const TryResult& result);

}  // namespace rdma_interop::storm
