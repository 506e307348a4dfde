#include "bench_report.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

namespace rdma_interop::bench {

std::string Target::text(const char* unit) const {
  char b[32];
  std::snprintf(b, sizeof b, "%s %g%s", at_least ? ">=" : "<=", bound, unit);
  return b;
}

const char* Report::tally(bool ok) {
  ++(ok ? met : missed);
  return ok ? "yes" : "NO";
}

void Report::ratio_row(const std::string& what, double ours, double base, const char* unit,
                       std::optional<Target> target) {
  const double ratio = ours / base;
  std::printf("%-32s %11.2f %11.2f  %-7s %6.3fx  %-8s %s\n", what.c_str(), ours, base, unit,
              ratio, target ? target->text("x").c_str() : "-",
              target ? tally(target->met(ratio)) : "");
  doc["figures"].push_back({{"what", what},
                            {"unit", unit},
                            {"ours", ours},
                            {"baseline", base},
                            {"ratio", ratio},
                            {"target", target ? nlohmann::json(target->text("x")) : nullptr},
                            {"met", target ? nlohmann::json(target->met(ratio)) : nullptr}});
}

void Report::value_row(const std::string& what, double ours, const char* unit, Target target) {
  std::printf("%-32s %11.2f %11s  %-7s %7s  %-8s %s\n", what.c_str(), ours, "-", unit, "-",
              target.text("").c_str(), tally(target.met(ours)));
  doc["figures"].push_back({{"what", what},
                            {"unit", unit},
                            {"ours", ours},
                            {"baseline", nullptr},
                            {"ratio", nullptr},
                            {"target", target.text("")},
                            {"met", target.met(ours)}});
}

std::string Report::cell(std::optional<double> v) {
  char b[32];
  if (!v) return "n/a";
  std::snprintf(b, sizeof b, "%.2f", *v);
  return b;
}

nlohmann::json Report::costs(const PerOp& p) {
  return {{"cpu_us", p.cpu_us},
          {"context_switches", p.context_switches()},
          {"voluntary_switches", p.voluntary_switches},
          {"involuntary_switches", p.involuntary_switches},
          {"syscalls", p.syscalls ? nlohmann::json(*p.syscalls) : nlohmann::json()}};
}

void Report::cost_rows(const std::string& op, const PerOp& ours, const PerOp& raw,
                       std::optional<Target> switches, std::optional<Target> syscalls) {
  nlohmann::json row = {{"operation", op}, {"ours", costs(ours)}, {"raw_tcp", costs(raw)}};
  auto line = [&](const char* what, std::optional<double> o, std::optional<double> r,
                  std::optional<Target> t) {
    const std::string mark = !t ? "" : !o ? "n/a" : tally(t->met(*o));
    std::printf("%-50s %9s %9s  %-8s %s\n", (op + ": " + what).c_str(), cell(o).c_str(),
                cell(r).c_str(), t ? t->text("").c_str() : "-", mark.c_str());
    if (t) row["targets"][what] = {{"target", t->text("")}, {"met", o && t->met(*o)}};
  };
  line("CPU time (us)", ours.cpu_us, raw.cpu_us, std::nullopt);
  line("context switches", ours.context_switches(), raw.context_switches(), switches);
  line("syscalls", ours.syscalls, raw.syscalls, syscalls);
  doc["per_operation"].push_back(row);
}

Report start_report(const std::string& schema, const nlohmann::json& settings,
                    const CostMeter& meter) {
  Report r;
  r.doc = settings;
  r.doc["schema"] = schema;
  r.doc["cpus"] = std::thread::hardware_concurrency();
  r.doc["syscalls_counted"] = meter.unavailable().empty();
  r.doc["load_average_1min"] = std::atof(load_average().c_str());
  r.doc["figures"] = nlohmann::json::array();
  r.doc["per_operation"] = nlohmann::json::array();
  return r;
}

bool finish_report(Report& r, const CostMeter& meter, const std::string& json_path) {
  std::printf("\nCPU time: getrusage, user + system, every thread of the process (for raw TCP "
              "both its ends, as for ours)\n");
  std::printf("context switches: getrusage, voluntary + involuntary (a woken peer preempting "
              "the waker counts, and so does other load on the CPUs)\n");
  if (meter.unavailable().empty()) {
    std::printf("syscalls: a perf counter on raw_syscalls:sys_enter, every thread\n");
  } else {
    std::printf("syscalls not counted: %s\n", meter.unavailable().c_str());
    r.doc["syscalls_unavailable"] = meter.unavailable();
  }
  std::printf("targets met: %d/%d (a missed target is reported, not an error)\n", r.met,
              r.met + r.missed);
  r.doc["targets_met"] = r.met;
  r.doc["targets"] = r.met + r.missed;
  if (json_path.empty()) return true;
  std::ofstream out(json_path);
  out << r.doc.dump(2) << '\n';
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
    return false;
  }
  return true;
}

std::string load_average() {
  std::string load = "?";
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

}  // namespace rdma_interop::bench
