// watch_delta.h - what moved between two refreshes of `backlog-stat --watch`: the rate of
// each cumulative counter over the interval, and every figure that changed.
//
// Rows are matched across refreshes by a key (the process and the addresses: row_key());
// a row seen for the first time has no rates and counts as changed. The figures are the
// row's flat JSON object (a listener's counters, a connection's credit counters plus its
// queue and state), so the table and the --json stream report the same changes.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace rdma_interop::backlog_stat {

struct RowChange {
  bool is_new = false;                  // not there at the last refresh
  std::map<std::string, double> rates;  // cumulative counter -> per second (none when new)
  std::set<std::string> changed;        // every figure that differs from the last refresh
};

// The counters that only grow (the rest are gauges: pending, credits, queued...).
bool is_cumulative(const std::string& figure);

class WatchDelta {
 public:
  struct Row {
    std::string key;
    nlohmann::ordered_json figures;  // {"accepted": 3, ...}
  };
  // The change of each row since the last call, in the order given; remembers `rows` (and
  // forgets rows that are gone). `now` is when they were taken.
  std::vector<RowChange> update(const std::vector<Row>& rows,
                                std::chrono::steady_clock::time_point now);
  // Seconds between the last two calls; nullopt after the first.
  std::optional<double> interval_s() const { return interval_s_; }

 private:
  std::map<std::string, nlohmann::ordered_json> last_;
  std::optional<std::chrono::steady_clock::time_point> last_time_;
  std::optional<double> interval_s_;
};

}  // namespace rdma_interop::backlog_stat
