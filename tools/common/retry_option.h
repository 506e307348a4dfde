// retry_option.h - --retry-backoff and --retry-backoff-max, defined once for every tool that
// retries a connect (rdma-probe connect, rdma-storm), so they mean the same everywhere: the
// full-jitter backoff of core/transport/connect_retry.h. Before retry n (1-based) the
// initiator waits a uniformly random time in [0, min(MAX, BASE * 2^(n-1))].
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <optional>

namespace rdma_interop::tools {

struct RetryBackoff {
  long long base_ms = 100;          // --retry-backoff
  std::optional<long long> max_ms;  // --retry-backoff-max; unset: 50 x base, at most 30 s

  std::chrono::milliseconds base() const { return std::chrono::milliseconds(base_ms); }
  std::chrono::milliseconds cap() const;
};

// Adds both options to `app`; `backoff.base_ms` is the tool's default.
void add_retry_backoff_options(CLI::App* app, RetryBackoff& backoff);

}  // namespace rdma_interop::tools
