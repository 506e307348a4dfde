#include "tools/backlog-stat/report.h"

#include <algorithm>
#include <array>

#include "core/telemetry/counters_json.h"
#include "core/util/printable_text.h"

namespace rdma_interop::backlog_stat {
namespace {

using json = nlohmann::ordered_json;  // keys in the documented order

// Columns padded to the widest cell, left-aligned text and right-aligned numbers, like ss.
// Every cell is escaped (printable()): the text comes from files anyone who can write the
// run directory writes, and must neither reach the terminal as control sequences nor break
// a row in two.
class Table {
 public:
  explicit Table(std::vector<std::pair<std::string, bool>> header) {  // (title, numeric)
    std::vector<std::string> row;
    for (auto& [title, numeric] : header) {
      numeric_.push_back(numeric);
      row.push_back(title);
    }
    add(std::move(row));
  }
  void add(std::vector<std::string> row) {
    for (auto& cell : row) cell = printable(cell);
    rows_.push_back(std::move(row));
  }
  std::string render() const {
    std::vector<std::size_t> width(numeric_.size(), 0);
    for (const auto& row : rows_) {
      for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (std::size_t i = 0; i < row.size(); ++i) {
        const std::string pad(width[i] - row[i].size(), ' ');
        const bool last = i + 1 == row.size();
        line += numeric_[i] ? pad + row[i] : row[i] + (last ? "" : pad);
        if (!last) line += "  ";
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> rows_;
};

std::string num(std::uint64_t v) { return std::to_string(v); }
std::string pair(std::uint64_t a, std::uint64_t b) {
  return num(a) + "/" + num(b);
}

}  // namespace

nlohmann::ordered_json to_json(const Report& r) {
  json listeners = json::array();
  for (const auto& row : r.listeners) {
    const auto& l = row.listener;
    listeners.push_back({
        {"local_address", l.local_address},
        {"scheme", l.scheme},
        {"overflow", l.overflow ? json(telemetry::overflow_text(*l.overflow)) : json()},
        {"pid", row.pid},
        {"process", row.process},
        {"sequence", row.sequence},
        {"wall_ms", row.wall_ms},
        {"counters", telemetry::counters_to_json(l.counters)},
    });
  }
  json kernel = json::array();
  if (r.kernel) {
    for (const auto& k : r.kernel->listeners) {
      kernel.push_back({{"device", k.device},
                        {"port", k.port},
                        {"local_address", k.local_address},
                        {"ps", k.ps},
                        {"pid", k.pid},
                        {"process", k.process}});
    }
  }
  json doc = {{"schema", kReportSchema},
              {"run_dir", r.run_dir},
              {"listeners", std::move(listeners)},
              {"kernel_status", r.kernel ? json(status_name(r.kernel->status)) : json("not_asked")},
              {"kernel", std::move(kernel)}};
  if (r.kernel && !r.kernel->detail.empty()) doc["kernel_detail"] = r.kernel->detail;
  return doc;
}

std::string to_text(const Report& r) {
  std::string out;
  if (r.listeners.empty()) {
    out += "No rdma-interop listeners published in " + printable(r.run_dir) + ".\n";
  } else {
    Table t({{"Proto", false}, {"Local Address:Port", false}, {"Pend/Backlog", true},
             {"HighW", true}, {"Wait", true}, {"Dropped", true}, {"OvfRej", true},
             {"AppRej", true}, {"Accepted", true}, {"HalfOpen", true}, {"HOExpired", true},
             {"Policy", false}, {"PID", true}, {"Process", false}});
    for (const auto& row : r.listeners) {
      const auto& c = row.listener.counters;
      t.add({row.listener.scheme, row.listener.local_address,
             num(c.pending) + "/" + num(c.backlog), num(c.high_water), num(c.overflow_waiting),
             num(c.overflow_dropped), num(c.overflow_rejected), num(c.rejected_by_app),
             num(c.accepted), num(c.half_open), num(c.half_open_expired),
             row.listener.overflow ? std::string(telemetry::overflow_text(*row.listener.overflow))
                                   : "-",
             std::to_string(row.pid), row.process});
    }
    out += t.render();
  }
  if (r.kernel) {
    out += "\n";
    if (r.kernel->status != KernelScan::Status::kOk) {
      out += "Kernel: " + printable(r.kernel->detail) + ".\n";
    } else if (r.kernel->listeners.empty()) {
      out += "Kernel: no RDMA CM id is in state LISTEN.\n";
    } else {
      out += "Kernel RDMA CM listeners (rdma resource show cm_id; the kernel keeps no backlog "
             "figures):\n";
      Table t({{"Device", false}, {"Local Address:Port", false}, {"PS", false}, {"PID", true},
               {"Process", false}});
      for (const auto& k : r.kernel->listeners) {
        const std::string device =
            k.device.empty() ? "*" : k.device + (k.port ? "/" + std::to_string(k.port) : "");
        t.add({device, k.local_address, k.ps, std::to_string(k.pid), k.process});
      }
      out += t.render();
    }
  }
  return out;
}

nlohmann::ordered_json to_json(const ConnectionReport& r) {
  json connections = json::array();
  for (const auto& row : r.connections) {
    const auto& c = row.connection;
    connections.push_back({
        {"local_address", c.local_address},
        {"peer_address", c.peer_address},
        {"scheme", c.scheme},
        {"peer", c.peer},
        {"state", c.state},
        {"queued", c.queued},
        {"queue_limit", c.queue_limit},
        {"held", c.held},
        {"refused", c.refused},
        {"pid", row.pid},
        {"process", row.process},
        {"sequence", row.sequence},
        {"wall_ms", row.wall_ms},
        {"credit", telemetry::credit_counters_to_json(c.credit)},
    });
  }
  return {{"schema", kConnectionReportSchema},
          {"run_dir", r.run_dir},
          {"connections", std::move(connections)}};
}

std::string to_text(const ConnectionReport& r) {
  if (r.connections.empty()) {
    return "No rdma-interop connections published in " + printable(r.run_dir) + ".\n";
  }
  Table t({{"Proto", false},
           {"Local Address:Port", false},
           {"Peer Address:Port", false},
           {"Peer", false},
           {"State", false},
           {"Credits", true},
           {"Ctl", true},
           {"Queued/Limit", true},
           {"Held", true},
           {"Refused", true},
           {"NoCredit", true},
           {"NoSlot", true},
           {"Sent", true},
           {"Received", true},
           {"Updates", true},
           {"PID", true},
           {"Process", false}});
  // An empty cell would shift every column after it for a reader that splits on blanks.
  const auto text = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  for (const auto& row : r.connections) {
    const auto& c = row.connection;
    const auto& k = c.credit;
    t.add({text(c.scheme), text(c.local_address), text(c.peer_address), text(c.peer), text(c.state),
           num(k.credits), num(k.control_credits), pair(c.queued, c.queue_limit), num(c.held),
           num(c.refused), num(k.stalls_no_credit), num(k.stalls_no_slot), num(k.sent),
           num(k.received), pair(k.updates_sent, k.updates_received), std::to_string(row.pid),
           text(row.process)});
  }
  return t.render();
}

}  // namespace rdma_interop::backlog_stat
