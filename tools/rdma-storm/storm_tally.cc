#include "tools/rdma-storm/storm_tally.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace rdma_interop::storm {

LatencySummary summarize(std::vector<double>& samples) {
  LatencySummary s;
  s.count = samples.size();
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  auto rank = [&](double p) {
    // Nearest rank: the smallest sample with at least p of the samples at or below it.
    auto k = static_cast<std::size_t>(std::ceil(p * static_cast<double>(samples.size())));
    return samples[std::clamp<std::size_t>(k, 1, samples.size()) - 1];
  };
  s.mean_ms = std::accumulate(samples.begin(), samples.end(), 0.0) /
              static_cast<double>(samples.size());
  s.p50_ms = rank(0.50);
  s.p90_ms = rank(0.90);
  s.p99_ms = rank(0.99);
  s.max_ms = samples.back();
  return s;
}

double jain_index(const std::vector<std::uint64_t>& per_client) {
  double sum = 0, sum_sq = 0;
  for (auto x : per_client) {
    sum += static_cast<double>(x);
    sum_sq += static_cast<double>(x) * static_cast<double>(x);
  }
  if (per_client.empty() || sum_sq == 0) return 1.0;
  return sum * sum / (static_cast<double>(per_client.size()) * sum_sq);
}

std::uint64_t Tally::attempts() const {
  return std::accumulate(outcomes.begin(), outcomes.end(), std::uint64_t{0});
}

std::uint64_t Tally::tries() const {
  return std::accumulate(tries_by.begin(), tries_by.end(), std::uint64_t{0});
}

void Tally::merge(const Tally& o) {
  for (std::size_t i = 0; i < kOutcomeCount; ++i) {
    outcomes[i] += o.outcomes[i];
    tries_by[i] += o.tries_by[i];
  }
  for (const auto& [k, v] : o.other) other[k] += v;
  for (const auto& [k, v] : o.gave_up_last) gave_up_last[k] += v;
  threads.insert(threads.end(), o.threads.begin(), o.threads.end());
  connected_ms.insert(connected_ms.end(), o.connected_ms.begin(), o.connected_ms.end());
  all_ms.insert(all_ms.end(), o.all_ms.begin(), o.all_ms.end());
  tries_exact = tries_exact && o.tries_exact;
  unreached += o.unreached;
}

}  // namespace rdma_interop::storm
