#include "tools/backlog-stat/report.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <initializer_list>

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

std::string num(std::uint64_t v) {
  return std::to_string(v);
}
std::string pair(std::uint64_t a, std::uint64_t b) {
  return num(a) + "/" + num(b);
}

// --watch marks of one row: a figure's cell gets '*' when any of its figures changed since
// the last refresh (never on a row's first appearance: everything is new then).
class Marks {
 public:
  explicit Marks(const RowChange* change) : change_(change) {}
  std::string operator()(std::string cell, std::initializer_list<const char*> figures) const {
    if (change_ == nullptr || change_->is_new) return cell;
    for (const char* f : figures) {
      if (change_->changed.contains(f)) return cell + "*";
    }
    return cell;
  }
  // The summed rate of `figures`, per second, or "-" before there is one.
  std::string rate(std::initializer_list<const char*> figures) const {
    if (change_ == nullptr) return "-";
    double sum = 0;
    for (const char* f : figures) {
      const auto it = change_->rates.find(f);
      if (it == change_->rates.end()) return "-";
      sum += it->second;
    }
    char out[32];
    std::snprintf(out, sizeof out, "%.1f", sum);
    return out;
  }

 private:
  const RowChange* change_;
};

const RowChange* change_of(const WatchMarks* marks, std::size_t i) {
  return marks != nullptr && i < marks->rows.size() ? &marks->rows[i] : nullptr;
}

std::string watch_legend(const WatchMarks* marks) {
  if (marks == nullptr) return {};
  char interval[32] = "";
  if (marks->interval_s)
    std::snprintf(interval, sizeof interval, " over the last %.2f s", *marks->interval_s);
  return std::string("* changed since the last refresh; rates per second") + interval + ".\n";
}

}  // namespace

WatchDelta::Row watch_row(const ListenerRow& row) {
  return {std::to_string(row.pid) + " " + row.listener.scheme + " " + row.listener.local_address,
          telemetry::counters_to_json(row.listener.counters)};
}

WatchDelta::Row watch_row(const ConnectionRow& row) {
  const auto& c = row.connection;
  auto figures = telemetry::credit_counters_to_json(c.credit);
  figures["state"] = c.state;
  figures["queued"] = c.queued;
  figures["queue_limit"] = c.queue_limit;
  figures["held"] = c.held;
  figures["refused"] = c.refused;
  return {std::to_string(row.pid) + " " + c.scheme + " " + c.local_address + " " + c.peer_address +
              " " + c.peer,
          std::move(figures)};
}

namespace {

// A snapshot's row as the process published it (counters_json.h), then where it came from.
template <class Row>
nlohmann::ordered_json with_origin(nlohmann::ordered_json j, const Row& row) {
  j["pid"] = row.pid;
  j["process"] = row.process;
  j["sequence"] = row.sequence;
  j["wall_ms"] = row.wall_ms;
  return j;
}

}  // namespace

nlohmann::ordered_json to_json(const Report& r) {
  json listeners = json::array();
  for (const auto& row : r.listeners) {
    listeners.push_back(with_origin(telemetry::listener_to_json(row.listener), row));
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

std::string to_text(const Report& r, const WatchMarks* marks) {
  std::string out;
  if (r.listeners.empty()) {
    out += "No rdma-interop listeners published in " + printable(r.run_dir) + ".\n";
  } else {
    std::vector<std::pair<std::string, bool>> header = {
        {"Proto", false},       {"Local Address:Port", false},
        {"Pend/Backlog", true}, {"HighW", true},
        {"Wait", true},         {"Dropped", true},
        {"OvfRej", true},       {"AppRej", true},
        {"Accepted", true},     {"HalfOpen", true},
        {"HOExpired", true},    {"Policy", false},
        {"PID", true},          {"Process", false}};
    if (marks != nullptr) {
      header.insert(header.end() - 3, {{"Req/s", true}, {"Acc/s", true}, {"Rej/s", true}});
    }
    Table t(std::move(header));
    for (std::size_t i = 0; i < r.listeners.size(); ++i) {
      const auto& row = r.listeners[i];
      const auto& c = row.listener.counters;
      const Marks m(change_of(marks, i));
      std::vector<std::string> cells = {
          row.listener.scheme,
          row.listener.local_address,
          m(num(c.pending) + "/" + num(c.backlog), {"pending", "backlog"}),
          m(num(c.high_water), {"high_water"}),
          m(num(c.overflow_waiting), {"overflow_waiting"}),
          m(num(c.overflow_dropped), {"overflow_dropped"}),
          m(num(c.overflow_rejected), {"overflow_rejected"}),
          m(num(c.rejected_by_app), {"rejected_by_app"}),
          m(num(c.accepted), {"accepted"}),
          m(num(c.half_open), {"half_open"}),
          m(num(c.half_open_expired), {"half_open_expired"}),
          row.listener.overflow ? std::string(telemetry::overflow_text(*row.listener.overflow))
                                : "-",
          std::to_string(row.pid),
          row.process};
      if (marks != nullptr) {
        cells.insert(cells.end() - 3,
                     {m.rate({"requests"}), m.rate({"accepted"}),
                      m.rate({"overflow_rejected", "rejected_by_app", "overflow_dropped"})});
      }
      t.add(std::move(cells));
    }
    out += t.render() + watch_legend(marks);
  }
  if (r.kernel) {
    out += "\n";
    if (r.kernel->status != KernelScan::Status::kOk) {
      out += "Kernel: " + printable(r.kernel->detail) + ".\n";
    } else if (r.kernel->listeners.empty()) {
      out += "Kernel: no RDMA CM id is in state LISTEN.\n";
    } else {
      out +=
          "Kernel RDMA CM listeners (rdma resource show cm_id; the kernel keeps no backlog "
          "figures):\n";
      Table t({{"Device", false},
               {"Local Address:Port", false},
               {"PS", false},
               {"PID", true},
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
    connections.push_back(with_origin(telemetry::connection_to_json(row.connection), row));
  }
  return {{"schema", kConnectionReportSchema},
          {"run_dir", r.run_dir},
          {"connections", std::move(connections)}};
}

std::string to_text(const ConnectionReport& r, const WatchMarks* marks) {
  if (r.connections.empty()) {
    return "No rdma-interop connections published in " + printable(r.run_dir) + ".\n";
  }
  std::vector<std::pair<std::string, bool>> header = {{"Proto", false},
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
                                                      {"Process", false}};
  if (marks != nullptr) {
    header.insert(header.end() - 2, {{"Sent/s", true}, {"Recv/s", true}, {"Refused/s", true}});
  }
  Table t(std::move(header));
  // An empty cell would shift every column after it for a reader that splits on blanks.
  const auto text = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  for (std::size_t i = 0; i < r.connections.size(); ++i) {
    const auto& row = r.connections[i];
    const auto& c = row.connection;
    const auto& k = c.credit;
    const Marks m(change_of(marks, i));
    std::vector<std::string> cells = {
        text(c.scheme),
        text(c.local_address),
        text(c.peer_address),
        text(c.peer),
        m(text(c.state), {"state"}),
        m(num(k.credits), {"credits"}),
        m(num(k.control_credits), {"control_credits"}),
        m(pair(c.queued, c.queue_limit), {"queued", "queue_limit"}),
        m(num(c.held), {"held"}),
        m(num(c.refused), {"refused"}),
        m(num(k.stalls_no_credit), {"stalls_no_credit"}),
        m(num(k.stalls_no_slot), {"stalls_no_slot"}),
        m(num(k.sent), {"sent"}),
        m(num(k.received), {"received"}),
        m(pair(k.updates_sent, k.updates_received), {"updates_sent", "updates_received"}),
        std::to_string(row.pid),
        text(row.process)};
    if (marks != nullptr) {
      cells.insert(cells.end() - 2, {m.rate({"sent"}), m.rate({"received"}), m.rate({"refused"})});
    }
    t.add(std::move(cells));
  }
  return t.render() + watch_legend(marks);
}

}  // namespace rdma_interop::backlog_stat
