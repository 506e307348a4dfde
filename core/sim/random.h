// random.h - the simulator's only source of chance: one seeded generator per run.
//
// std::mt19937_64's output is fixed by the C++ standard for a given seed, so a seed replays
// on any compiler; the standard distributions are not, hence the small reductions here.
#pragma once

#include <cstdint>
#include <random>

namespace rdma_interop::sim {

class Random {
 public:
  explicit Random(std::uint64_t seed) : gen_(seed) {}
  std::uint64_t next() { return gen_(); }
  // Uniform in [0, n) (n > 0), without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    std::uint64_t v;
    do v = gen_();
    while (v >= limit);
    return v % n;
  }
  // Uniform in [lo, hi].
  std::uint64_t between(std::uint64_t lo, std::uint64_t hi) { return lo + below(hi - lo + 1); }
  // True with probability percent / 100.
  bool chance(unsigned percent) { return below(100) < percent; }

 private:
  std::mt19937_64 gen_;
};

}  // namespace rdma_interop::sim
