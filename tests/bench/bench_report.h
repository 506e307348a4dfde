// bench_report.h - how the end-to-end benchmarks (e2e_bench, stream_bench) print a figure
// next to its baseline and its target, and the per-operation costs, and record both as JSON.
//
// A missed target is a result, not a failure: rows are tallied (met / missed) and the program
// prints the tally; its exit status is its own business.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "op_cost.h"

namespace rdma_interop::bench {

// "at least" or "at most" `bound`; the ratio targets compare ours / baseline, the cost targets
// compare our figure per operation.
struct Target {
  bool at_least;
  double bound;
  std::string text(const char* unit) const;  // ">= 0.9x", "<= 8"
  bool met(double v) const { return at_least ? v >= bound : v <= bound; }
};

struct Report {
  nlohmann::json doc;  // the caller's fields, and "figures" and "per_operation" appended
  int met = 0;
  int missed = 0;

  // "yes" or "NO", counted.
  const char* tally(bool ok);

  // One line: ours, the baseline, the unit, ours / baseline and the target on that ratio. No
  // target: a row that explains another (printed and recorded, not tallied).
  void ratio_row(const std::string& what, double ours, double base, const char* unit,
                 std::optional<Target> target);

  // One line for a figure with no baseline to divide by, against its own target.
  void value_row(const std::string& what, double ours, const char* unit, Target target);

  // Two lines, context switches and syscalls, for one kind of operation.
  void cost_rows(const std::string& op, const PerOp& ours, const PerOp& raw,
                 std::optional<Target> switches, std::optional<Target> syscalls);

  static std::string cell(std::optional<double> v);  // "12.34" or "n/a"
  static nlohmann::json costs(const PerOp& p);
};

// A report whose document holds `schema`, the run's `settings`, the CPUs, whether syscalls
// are counted, the 1-minute load average and the empty figure lists.
Report start_report(const std::string& schema, const nlohmann::json& settings,
                    const CostMeter& meter);

// Ends a run: how the costs were counted, the met/missed tally, and the JSON at `json_path`
// (none when empty). False, said on stderr, when the JSON cannot be written.
bool finish_report(Report& r, const CostMeter& meter, const std::string& json_path);

// The 1-minute load average ("?" when /proc/loadavg cannot be read): other work on the CPUs
// moves every figure, and this says how much there was.
std::string load_average();

}  // namespace rdma_interop::bench
