// Thousands of seeded random lives of an XRC receive node on the simulated fabric, each held
// to the lifetime guarantees by xrc_scenario's checker (safety, liveness, no leaks).
//
//   RDMA_INTEROP_SIM_SEEDS=N   how many seeds (default 10000, from 1)
//   RDMA_INTEROP_SIM_SEED=S    run seed S alone and print its trace: the replay of a failure
// A failing seed prints itself, the broken guarantee, and the command that replays it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "tools/rdma-probe/xrc_scenario.h"

namespace rdma_interop::probe {
namespace {

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

std::string replay_hint(std::uint64_t seed) {
  // This very binary: build-asan's in the unit tier, build's when built by hand.
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return "replay: RDMA_INTEROP_SIM_SEED=" + std::to_string(seed) + " " +
         (ec ? std::string("build/tests/unit/xrc_sim_random_test") : self.string()) +
         " --gtest_filter='*ReplayOneSeed*'";
}

void print_tail(const XrcScenarioResult& r, std::size_t lines) {
  const std::size_t from = r.trace.size() > lines ? r.trace.size() - lines : 0;
  for (std::size_t i = from; i < r.trace.size(); ++i) std::cerr << "  " << r.trace[i] << "\n";
}

TEST(XrcSimRandom, EverySeedKeepsTheLifetimeGuarantees) {
  if (std::getenv("RDMA_INTEROP_SIM_SEED")) GTEST_SKIP() << "replaying one seed";
  const std::uint64_t seeds = env_number("RDMA_INTEROP_SIM_SEEDS", 10000);
  std::uint64_t reaps = 0, probes = 0, migrations = 0, deferred = 0, kept = 0, events = 0;
  for (std::uint64_t seed = 1; seed <= seeds; ++seed) {
    const XrcScenarioResult r = run_xrc_scenario({.seed = seed});
    if (!r.ok) {
      const XrcScenarioResult traced = run_xrc_scenario({.seed = seed, .trace = true});
      print_tail(traced, 60);
      FAIL() << "seed " << seed << ": " << r.violation << "\n" << replay_hint(seed);
    }
    reaps += r.reaps_checked;
    probes += r.counters.probes_issued;
    migrations += r.counters.migrations;
    deferred += r.counters.reaps_deferred;
    kept += r.counters.kept_for_sender;
    events += r.fabric_events;
  }
  std::cout << "[xrc-sim] " << seeds << " seeds: " << reaps << " reaps checked, " << probes
            << " probes, " << migrations << " migrations, " << deferred << " reaps deferred, "
            << kept << " TQPs kept for a live sender, " << events << " fabric events\n";
  // The schedules must reach what they are there to test, or passing means nothing.
  EXPECT_GT(reaps, seeds);
  EXPECT_GT(migrations, seeds / 10);
  EXPECT_GT(deferred, 0u);
  EXPECT_GT(kept, seeds);
}

TEST(XrcSimRandom, ReplayingASeedReproducesItsTrace) {
  const auto first = run_xrc_scenario({.seed = 7, .trace = true});
  const auto again = run_xrc_scenario({.seed = 7, .trace = true});
  ASSERT_TRUE(first.ok) << first.violation;
  EXPECT_EQ(first.trace_hash, again.trace_hash);
  EXPECT_EQ(first.trace, again.trace);
  EXPECT_EQ(first.events, again.events);
  EXPECT_FALSE(first.trace.empty());
  // Tracing does not change the run, and another seed is another run.
  EXPECT_EQ(run_xrc_scenario({.seed = 7}).trace_hash, first.trace_hash);
  EXPECT_NE(run_xrc_scenario({.seed = 8}).trace_hash, first.trace_hash);
}

TEST(XrcSimRandom, ReplayOneSeed) {
  const char* seed_text = std::getenv("RDMA_INTEROP_SIM_SEED");
  if (!seed_text) GTEST_SKIP() << "set RDMA_INTEROP_SIM_SEED to replay a seed";
  const std::uint64_t seed = std::strtoull(seed_text, nullptr, 10);
  const auto r = run_xrc_scenario({.seed = seed, .trace = true});
  for (const auto& line : r.trace) std::cout << line << "\n";
  std::cout << "seed " << seed << ": " << (r.ok ? "ok" : r.violation) << ", trace hash " << std::hex
            << r.trace_hash << std::dec << "\n";
  EXPECT_TRUE(r.ok) << r.violation;
}

}  // namespace
}  // namespace rdma_interop::probe
