// rdma-probe xrc: which RDMA devices of this node have XRC, and (--simulate) what the XRC
// lifetime engine does with a node's domains, target QPs, references and probes.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/transport/verbs/xrc_verbs.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"
#include "tools/rdma-probe/xrc_scenario.h"
#include "core/util/json_text.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;

long ms_of(xrc::TimePoint t) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
}

std::string refs_text(const std::map<xrc::ProcessId, std::uint32_t>& refs) {
  if (refs.empty()) return "-";
  std::string s;
  for (const auto& [pid, n] : refs)
    s += (s.empty() ? "" : " ") + std::to_string(pid) + ":" + std::to_string(n);
  return s;
}

json refs_json(const std::map<xrc::ProcessId, std::uint32_t>& refs) {
  json out = json::array();
  for (const auto& [pid, n] : refs) out.push_back({{"process", pid}, {"refs", n}});
  return out;
}

json probe_json(const xrc::ProbeConfig& p) {
  return {{"kind", xrc::probe_kind_name(p.kind)},
          {"interval_ms", p.interval.count()},
          {"timeout_ms", p.timeout.count()},
          {"retries", p.retries},
          {"migration_grace_ms", p.migration_grace.count()},
          {"detection_bound_ms", xrc::detection_bound(p).count()}};
}

json counters_json(const xrc::XrcCounters& c) {
  return {{"domains_created", c.domains_created},
          {"domains_destroyed", c.domains_destroyed},
          {"tqps_created", c.tqps_created},
          {"tqps_reaped", c.tqps_reaped},
          {"kept_for_sender", c.kept_for_sender},
          {"reaped_sender_dead", c.reaped_sender_dead},
          {"reaped_sender_disconnected", c.reaped_sender_disconnected},
          {"reaps_deferred", c.reaps_deferred},
          {"process_exits", c.process_exits},
          {"refs_dropped_by_exit", c.refs_dropped_by_exit},
          {"probes_issued", c.probes_issued},
          {"probes_answered", c.probes_answered},
          {"probes_failed", c.probes_failed},
          {"probes_excused", c.probes_excused},
          {"probe_recycles", c.probe_recycles},
          {"migrations", c.migrations}};
}

json snapshot_json(const xrc::XrcSnapshot& s) {
  json domains = json::array();
  for (const auto& d : s.domains) {
    domains.push_back(
        {{"domain", d.domain}, {"name", d.name}, {"refs", refs_json(d.refs)}, {"tqps", d.tqps}});
  }
  json tqps = json::array();
  for (const auto& t : s.tqps) {
    tqps.push_back({{"tqp", t.tqp},
                    {"domain", t.domain},
                    {"refs", refs_json(t.refs)},
                    {"sender", t.sender},
                    {"sender_state", xrc::sender_state_name(t.sender_state)},
                    {"sender_disconnected", t.sender_disconnected},
                    {"consecutive_failures", t.consecutive_failures},
                    {"last_answer_ms", ms_of(t.last_answer)},
                    {"migrating", t.migrating},
                    {"grace_end_ms", t.grace_end ? json(ms_of(*t.grace_end)) : json(nullptr)},
                    {"probes",
                     {{"issued", t.probe.issued},
                      {"answered", t.probe.answered},
                      {"failed", t.probe.failed},
                      {"excused", t.probe.excused},
                      {"traffic", t.probe.traffic},
                      {"recycles", t.probe.recycles}}}});
  }
  return {{"domains", domains}, {"tqps", tqps}};
}

void print_snapshot(const xrc::XrcSnapshot& s) {
  std::printf("%-7s %-16s %-22s %s\n", "DOMAIN", "NAME", "REFS (pid:n)", "TQPS");
  for (const auto& d : s.domains) {
    std::string tqps;
    for (auto t : d.tqps) {
      if (!tqps.empty()) tqps += ' ';  // not `" " + std::string`: GCC 12 -Wrestrict bug 105329
      tqps += std::to_string(t);
    }
    std::printf("%-7u %-16s %-22s %s\n", d.domain, d.name.c_str(), refs_text(d.refs).c_str(),
                tqps.empty() ? "-" : tqps.c_str());
  }
  std::printf("\n%-6s %-7s %-16s %-18s %-8s %-6s %-26s %s\n", "TQP", "DOMAIN", "REFS (pid:n)",
              "SENDER", "STATE", "FAILS", "PROBES iss/ans/fail/exc", "MIGRATION");
  for (const auto& t : s.tqps) {
    std::ostringstream probes;
    probes << t.probe.issued << "/" << t.probe.answered << "/" << t.probe.failed << "/"
           << t.probe.excused;
    std::string state(xrc::sender_state_name(t.sender_state));
    if (t.sender_disconnected) state = "gone";
    std::string mig = t.migrating   ? "migrating"
                      : t.grace_end ? "grace to " + std::to_string(ms_of(*t.grace_end)) + "ms"
                                    : "-";
    std::printf("%-6u %-7u %-16s %-18s %-8s %-6u %-26s %s\n", t.tqp, t.domain,
                refs_text(t.refs).c_str(), t.sender.c_str(), state.c_str(), t.consecutive_failures,
                probes.str().c_str(), mig.c_str());
  }
}

int run_xrc_support(const XrcOptions& options) {
  std::vector<transport::verbs::XrcSupport> found;
  if (options.devices.empty()) {
    found = transport::verbs::query_xrc_support();
  } else {
    for (const auto& d : options.devices) {
      auto s = transport::verbs::query_xrc_support(d);
      if (!s) {
        print_usage_error("xrc",
                          "no RDMA device '" + d + "' (ibv_get_device_list does not list it)");
        return kExitUsage;
      }
      found.push_back(*s);
    }
  }
  if (options.json) {
    json devices = json::array();
    for (const auto& s : found) {
      devices.push_back({{"device", s.device},
                         {"transport", s.transport},
                         {"capability_flag", s.capability_flag},
                         {"supported", s.supported},
                         {"errno", s.error == 0 ? json(nullptr) : json(s.error)},
                         {"detail", s.detail},
                         {"initiator_supported", s.initiator_supported},
                         {"initiator_detail", s.initiator_detail}});
    }
    std::cout << json_text(json{{"schema", "rdma-interop/xrc-devices/1"}, {"devices", devices}})
              << "\n";
    return kExitOk;
  }
  if (found.empty()) {
    std::printf(
        "no RDMA devices: ibv_get_device_list found none (load siw or rxe, or see "
        "'rdma link')\n");
    return kExitOk;
  }
  std::printf("%-10s %-9s %-14s %-9s %s\n", "DEVICE", "TRANSPORT", "XRC", "CAP FLAG", "DETAIL");
  for (const auto& s : found) {
    std::printf("%-10s %-9s %-14s %-9s %s\n", s.device.c_str(), s.transport.c_str(),
                s.supported ? "supported" : "not supported", s.capability_flag ? "yes" : "no",
                s.detail.c_str());
  }
  return kExitOk;
}

int run_simulation(const XrcOptions& options) {
  XrcScenarioOptions so;
  so.seed = *options.simulate_seed;
  so.trace = options.trace || options.events;
  if (!options.probe_kind.empty() || options.interval_ms || options.retries) {
    // Start from the seed's own choice, then apply what was given.
    xrc::ProbeConfig p = xrc_scenario_probe(so.seed);
    if (!options.probe_kind.empty()) {
      auto k = xrc::parse_probe_kind(options.probe_kind);
      if (!k) {
        print_usage_error("xrc", "--probe must be zero_length_read or invalid_rkey_read, not '" +
                                     options.probe_kind + "'");
        return kExitUsage;
      }
      p.kind = *k;
    }
    if (options.interval_ms) {
      p.interval = std::chrono::milliseconds(*options.interval_ms);
      p.timeout = std::min(p.timeout, p.interval);
    }
    if (options.retries) p.retries = static_cast<std::uint32_t>(*options.retries);
    if (auto e = xrc::probe_config_error(p)) {
      print_usage_error("xrc", *e);
      return kExitUsage;
    }
    so.probe = p;
  }
  const auto r = run_xrc_scenario(so);
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(r.trace_hash));
  if (options.json) {
    json out{{"schema", "rdma-interop/xrc-sim/1"},
             {"seed", r.seed},
             {"ok", r.ok},
             {"violation", r.ok ? json(nullptr) : json(r.violation)},
             {"trace_hash", hash},
             {"virtual_seconds", r.virtual_seconds},
             {"actions", r.actions},
             {"reaps_checked", r.reaps_checked},
             {"probe", probe_json(r.probe)},
             {"busiest", snapshot_json(r.busiest)},
             {"counters", counters_json(r.counters)}};
    if (options.events) {
      json events = json::array();
      for (const auto& e : r.events) {
        events.push_back({{"t_ms", ms_of(e.at)},
                          {"event", xrc::event_type_name(e.type)},
                          {"reason", xrc::reason_name(e.reason)},
                          {"domain", e.domain},
                          {"tqp", e.tqp ? json(*e.tqp) : json(nullptr)},
                          {"process", e.process ? json(*e.process) : json(nullptr)}});
      }
      out["events"] = events;
    }
    if (options.trace) out["trace"] = r.trace;
    std::cout << json_text(out) << "\n";
    return r.ok ? kExitOk : kExitFailed;
  }
  if (options.trace) {
    for (const auto& line : r.trace) std::printf("%s\n", line.c_str());
    std::printf("\n");
  }
  if (options.events) {
    for (const auto& e : r.events) std::printf("%s\n", e.to_string().c_str());
    std::printf("\n");
  }
  std::printf("simulated XRC receive node, seed %llu: %.1f s virtual, %llu steps\n",
              static_cast<unsigned long long>(r.seed), r.virtual_seconds,
              static_cast<unsigned long long>(r.actions));
  std::printf(
      "probe: %s every %lld ms, timeout %lld ms, %u retries, migration grace %lld ms; "
      "a dead sender is found within %lld ms\n\n",
      std::string(xrc::probe_kind_name(r.probe.kind)).c_str(),
      static_cast<long long>(r.probe.interval.count()),
      static_cast<long long>(r.probe.timeout.count()), r.probe.retries,
      static_cast<long long>(r.probe.migration_grace.count()),
      static_cast<long long>(xrc::detection_bound(r.probe).count()));
  std::printf("the node at its busiest:\n");
  print_snapshot(r.busiest);
  const auto& c = r.counters;
  std::printf(
      "\ncounters: %llu TQPs created, %llu reaped (%llu sender dead, %llu disconnected), "
      "%llu kept for a live sender, %llu reaps deferred by migrations (%llu migrations), "
      "%llu probes (%llu answered, %llu failed, %llu excused), %llu process exits\n",
      (unsigned long long)c.tqps_created, (unsigned long long)c.tqps_reaped,
      (unsigned long long)c.reaped_sender_dead, (unsigned long long)c.reaped_sender_disconnected,
      (unsigned long long)c.kept_for_sender, (unsigned long long)c.reaps_deferred,
      (unsigned long long)c.migrations, (unsigned long long)c.probes_issued,
      (unsigned long long)c.probes_answered, (unsigned long long)c.probes_failed,
      (unsigned long long)c.probes_excused, (unsigned long long)c.process_exits);
  if (r.ok) {
    std::printf("verdict: every lifetime guarantee held (%llu reaps checked); trace hash %s\n",
                (unsigned long long)r.reaps_checked, hash);
  } else {
    std::printf("verdict: VIOLATION %s; trace hash %s\n", r.violation.c_str(), hash);
  }
  return r.ok ? kExitOk : kExitFailed;
}

}  // namespace

int run_xrc(const XrcOptions& options) {
  return options.simulate_seed ? run_simulation(options) : run_xrc_support(options);
}

}  // namespace rdma_interop::probe
