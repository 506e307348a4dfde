// connect_retry.h - when a failed connect attempt is worth another, and how long to wait
// before it: the one retry policy every provider's connect follows (ConnectOptions::retries).
//
// A failure is retried when the listener may take the connection later: a Reject with the
// backlog-full marker, nothing listening yet or a reset (ConnectError::sys_errno
// ECONNREFUSED / ECONNRESET: a peer still starting, a listener over its backlog), a reset
// during setup, or no Reply in time (a listener with the drop policy). Anything else (the
// peer application's own Reject, a negotiation failure, a bad argument) ends the connect.
// Before retry n (1-based) the initiator sleeps a uniformly random time in
// [0, min(retry_backoff_max, retry_backoff * 2^(n-1))] ("full jitter"), so a storm of clients
// spreads out instead of coming back in step.
//
//   RetrySchedule schedule(options);
//   for (std::uint32_t attempts = 1;; ++attempts) {
//     auto r = attempt();
//     if (r) return r;
//     r.error().attempts = attempts;
//     auto wait = schedule.after_failure(r.error(), attempts);
//     if (!wait) return r;
//     sleep_for(*wait);
//   }
//
// Sans-I/O: no clock and no sleep here; the jitter comes from a generator of its own, seeded
// with ConnectOptions::retry_seed (0: a fresh seed per connect), never from shared state.
#pragma once

#include <cstdint>
#include <optional>
#include <random>

#include "core/transport/provider.h"

namespace rdma_interop::transport {

// Whether a failed attempt is one the listener may take later (see above).
bool retryable(const ConnectError& error);

// The sleep before retry `retry` (1-based).
Millis retry_delay(const ConnectOptions& options, std::uint32_t retry, std::mt19937_64& rng);

class RetrySchedule {
 public:
  explicit RetrySchedule(const ConnectOptions& options) : options_(options) {}
  // After failed attempt number `attempts` (1-based): the wait before the next, or nullopt
  // when the connect ends here (not retryable, or options.retries used up).
  std::optional<Millis> after_failure(const ConnectError& error, std::uint32_t attempts);

 private:
  const ConnectOptions& options_;
  std::optional<std::mt19937_64> rng_;  // seeded at the first retry: most connects need none
};

}  // namespace rdma_interop::transport
