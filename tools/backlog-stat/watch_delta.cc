#include "tools/backlog-stat/watch_delta.h"

namespace rdma_interop::backlog_stat {

bool is_cumulative(const std::string& figure) {
  static const std::set<std::string> kCumulative = {
      // cm::BacklogCounters
      "requests", "accepted", "rejected_by_app", "pending_expired", "pending_aborted",
      "overflow_rejected", "overflow_dropped", "half_open_opened", "half_open_completed",
      "half_open_expired", "half_open_aborted", "half_open_evicted",
      // credit::CreditCounters, and a connection's refused sends
      "credits_granted_total", "sent", "updates_sent", "stalls_no_credit", "stalls_no_slot",
      "update_stalls", "granted_total", "received", "updates_received", "refused"};
  return kCumulative.contains(figure);
}

std::vector<RowChange> WatchDelta::update(const std::vector<Row>& rows,
                                          std::chrono::steady_clock::time_point now) {
  interval_s_.reset();
  if (last_time_) interval_s_ = std::chrono::duration<double>(now - *last_time_).count();
  std::vector<RowChange> changes;
  std::map<std::string, nlohmann::ordered_json> seen;
  for (const auto& row : rows) {
    RowChange change;
    const auto before = last_.find(row.key);
    if (before == last_.end()) {
      change.is_new = true;
      for (const auto& [name, value] : row.figures.items()) change.changed.insert(name);
    } else {
      for (const auto& [name, value] : row.figures.items()) {
        const auto old = before->second.find(name);
        if (old == before->second.end() || *old != value) change.changed.insert(name);
        if (interval_s_ && *interval_s_ > 0 && is_cumulative(name) && value.is_number() &&
            old != before->second.end() && old->is_number()) {
          const double delta = value.get<double>() - old->get<double>();
          // A counter that went down belongs to a restarted publisher: no rate.
          if (delta >= 0) change.rates[name] = delta / *interval_s_;
        }
      }
    }
    seen[row.key] = row.figures;
    changes.push_back(std::move(change));
  }
  last_ = std::move(seen);
  last_time_ = now;
  return changes;
}

}  // namespace rdma_interop::backlog_stat
