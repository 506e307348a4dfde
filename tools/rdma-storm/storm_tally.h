// storm_tally.h - what a storm's attempts came to: counts per outcome, per client thread,
// and the latency of each attempt. One Tally per thread (no locks), merged at the end.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tools/rdma-storm/attempt_outcome.h"

namespace rdma_interop::storm {

struct LatencySummary {
  std::size_t count = 0;
  double mean_ms = 0, p50_ms = 0, p90_ms = 0, p99_ms = 0, max_ms = 0;
};
// Nearest-rank percentiles of `samples` (sorted in place).
LatencySummary summarize(std::vector<double>& samples);

// Jain's fairness index (sum x)^2 / (n * sum x^2): 1 when every client got the same, 1/n
// when one got everything. 1 for no clients or when nobody got anything (nothing unfair;
// the report says n/a then, since nothing was measured).
double jain_index(const std::vector<std::uint64_t>& per_client);

struct ThreadTally {
  std::uint64_t attempts = 0;
  std::uint64_t connected = 0;
  std::uint64_t tries = 0;
};

struct Tally {
  std::array<std::uint64_t, kOutcomeCount> outcomes{};   // by Outcome, each attempt once
  std::array<std::uint64_t, kOutcomeCount> tries_by{};   // by the outcome of each try
  std::map<std::string, std::uint64_t> other;            // kOther attempts by failure name
  std::map<std::string, std::uint64_t> gave_up_last;     // kGaveUp attempts by the last try
  std::vector<ThreadTally> threads;
  std::vector<double> connected_ms;  // attempt start to established, retries included
  std::vector<double> all_ms;        // attempt start to its outcome, any outcome
  bool tries_exact = true;           // false: the provider retried and hid some tries
  std::uint64_t unreached = 0;       // attempts whose last try never reached the listener

  std::uint64_t attempts() const;
  std::uint64_t tries() const;
  std::uint64_t count(Outcome o) const { return outcomes[static_cast<std::size_t>(o)]; }
  // Adds `other`'s figures; its threads are appended after ours.
  void merge(const Tally& other);
};

}  // namespace rdma_interop::storm
