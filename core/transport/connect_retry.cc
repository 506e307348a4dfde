#include "core/transport/connect_retry.h"

#include <algorithm>
#include <cerrno>

namespace rdma_interop::transport {
namespace {

std::uint64_t fresh_seed() {
  // std::random_device once per thread, not per connect (it reads the kernel's entropy each
  // time); then splitmix64 over a counter, which gives every connect a different seed.
  thread_local std::uint64_t state =
      (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

bool retryable(const ConnectError& error) {
  switch (error.kind) {
    case ConnectError::Kind::kUnreachable:
      // Refused or reset: nothing listens yet. No SYN-ACK in time: the listener's accept
      // queue may be full (Linux drops the SYN), as a storm fills it.
      return error.sys_errno == ECONNREFUSED || error.sys_errno == ECONNRESET ||
             error.sys_errno == ETIMEDOUT;
    case ConnectError::Kind::kSetup:
      // A reset during setup: a listener that evicted us from its half-open queue, closed
      // a Request that waited too long, or an older listener resetting over its backlog.
      return error.failure == cm::CmFailure::kBacklogFull ||
             error.failure == cm::CmFailure::kReplyTimeout ||
             error.failure == cm::CmFailure::kConnectionReset;
    case ConnectError::Kind::kTimeout:  // the Request went unanswered (drop policy)
      return true;
    case ConnectError::Kind::kAddressInUse:
    case ConnectError::Kind::kInvalidArgument:
      return false;
  }
  return false;
}

Millis retry_delay(const ConnectOptions& options, std::uint32_t retry, std::mt19937_64& rng) {
  const std::int64_t base = std::max<std::int64_t>(options.retry_backoff.count(), 0);
  const std::int64_t cap = std::max<std::int64_t>(options.retry_backoff_max.count(), 0);
  std::int64_t ceiling = base;
  for (std::uint32_t i = 1; i < retry && ceiling < cap; ++i) ceiling *= 2;
  ceiling = std::min(ceiling, cap);
  // Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"): spreads a storm
  // of clients that all failed at once over the whole window.
  return Millis(std::uniform_int_distribution<std::int64_t>(0, ceiling)(rng));
}

std::optional<Millis> RetrySchedule::after_failure(const ConnectError& error,
                                                   std::uint32_t attempts) {
  if (attempts > options_.retries || !retryable(error)) return std::nullopt;
  if (!rng_) rng_.emplace(options_.retry_seed != 0 ? options_.retry_seed : fresh_seed());
  return retry_delay(options_, attempts, *rng_);
}

}  // namespace rdma_interop::transport
