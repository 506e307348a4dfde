#include "tools/rdma-storm/storm_report.h"

#include <cmath>
#include <cstdio>

namespace rdma_interop::storm {
namespace {

using json = nlohmann::ordered_json;

double round3(double v) {
  return std::round(v * 1000.0) / 1000.0;
}

// Null for a figure of no samples: nothing was measured.
json latency_json(std::vector<double>& samples) {
  auto s = summarize(samples);
  const auto value = [&](double v) { return s.count == 0 ? json(nullptr) : json(round3(v)); };
  return json{{"count", s.count},       {"mean", value(s.mean_ms)}, {"p50", value(s.p50_ms)},
              {"p90", value(s.p90_ms)}, {"p99", value(s.p99_ms)},   {"max", value(s.max_ms)}};
}

// "12.35", or "n/a" for a figure nothing was measured for (null).
std::string figure(const json& v, const char* format = "%.2f") {
  if (!v.is_number()) return "n/a";
  char out[32];
  std::snprintf(out, sizeof out, format, v.get<double>());
  return out;
}

}  // namespace

json report_json(const StormConfig& config, StormResult& result) {
  auto& t = result.tally;
  json outcomes = json::object();
  json tries_by = json::object();
  for (auto o : kAllOutcomes) {
    outcomes[std::string(outcome_name(o))] = t.count(o);
    if (o != Outcome::kGaveUp) {
      tries_by[std::string(outcome_name(o))] = t.tries_by[static_cast<std::size_t>(o)];
    }
  }
  json threads = json::array();
  std::vector<std::uint64_t> connected_per_thread;
  for (std::size_t i = 0; i < t.threads.size(); ++i) {
    const auto& th = t.threads[i];
    threads.push_back(json{
        {"index", i}, {"attempts", th.attempts}, {"connected", th.connected}, {"tries", th.tries}});
    connected_per_thread.push_back(th.connected);
  }
  const auto connected = t.count(Outcome::kConnected);
  return json{
      {"schema", kStormSchema},
      {"uri", config.target.to_string()},
      {"mode", config.raw_tcp ? "raw_tcp" : "provider"},
      {"personality", config.raw_tcp ? json(nullptr) : json(config.personality.name)},
      {"planned", result.planned},
      {"attempts", t.attempts()},
      {"concurrency", config.concurrency},
      {"retries", config.retries},
      {"retry_mode", result.retry_mode},
      {"seed", config.seed},
      {"hold_ms", config.hold.count()},
      {"elapsed_s", round3(result.elapsed_s)},
      {"hit_duration_limit", result.hit_duration_limit},
      {"stopped_by_signal", result.stopped_by_signal},
      {"outcomes", outcomes},
      {"other", t.other},
      {"gave_up_last", t.gave_up_last},
      {"tries", t.tries()},
      {"tries_exact", t.tries_exact},
      {"tries_by_outcome", tries_by},
      {"threads", threads},
      {"unreached", t.unreached},
      // Fairness of nothing is not measured: no attempt connected.
      {"jain_index",
       connected == 0 ? json(nullptr) : json(round3(jain_index(connected_per_thread)))},
      {"connected_per_s",
       result.elapsed_s > 0 ? round3(static_cast<double>(connected) / result.elapsed_s) : 0.0},
      {"latency_ms",
       json{{"connected", latency_json(t.connected_ms)}, {"all", latency_json(t.all_ms)}}},
  };
}

std::string report_text(const json& r) {
  std::string out;
  char line[256];
  const char* why = r.value("stopped_by_signal", false)   ? " (stopped by a signal)"
                    : r["hit_duration_limit"].get<bool>() ? " (stopped by --duration-limit)"
                                                          : "";
  std::snprintf(line, sizeof line, "storm against %s: %llu of %llu attempts in %.2f s%s\n",
                r["uri"].get<std::string>().c_str(),
                static_cast<unsigned long long>(r["attempts"].get<std::uint64_t>()),
                static_cast<unsigned long long>(r["planned"].get<std::uint64_t>()),
                r["elapsed_s"].get<double>(), why);
  out += line;
  for (const auto& [name, n] : r["outcomes"].items()) {
    std::snprintf(line, sizeof line, "  %-18s %llu\n", name.c_str(),
                  static_cast<unsigned long long>(n.get<std::uint64_t>()));
    out += line;
  }
  for (const auto& [name, n] : r["other"].items()) {
    std::snprintf(line, sizeof line, "    other/%-12s %llu\n", name.c_str(),
                  static_cast<unsigned long long>(n.get<std::uint64_t>()));
    out += line;
  }
  const auto& lat = r["latency_ms"]["connected"];
  std::snprintf(line, sizeof line,
                "  tries %llu; connected %.1f/s; latency to connected p50 %s p90 %s p99 %s max "
                "%s%s\n  Jain's fairness index over %zu clients: %s\n",
                static_cast<unsigned long long>(r["tries"].get<std::uint64_t>()),
                r["connected_per_s"].get<double>(), figure(lat["p50"]).c_str(),
                figure(lat["p90"]).c_str(), figure(lat["p99"]).c_str(), figure(lat["max"]).c_str(),
                lat["max"].is_number() ? " ms" : " (none connected)", r["threads"].size(),
                figure(r["jain_index"], "%.3f").c_str());
  out += line;
  return out;
}

}  // namespace rdma_interop::storm
