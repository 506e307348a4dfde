#include "tools/rdma-probe/probe_report.h"

#include <algorithm>

#include "tools/common/help_wrap.h"

namespace rdma_interop::probe {

using json = nlohmann::ordered_json;

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kNote:
      return "note";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kFail:
      return "fail";
    case Verdict::kNotApplicable:
      return "n/a";
    case Verdict::kNotTested:
      return "not_tested";
  }
  return "not_tested";
}

Capability new_capability(std::string id, std::string title) {
  Capability c;
  c.id = std::move(id);
  c.title = std::move(title);
  return c;
}

std::string_view outcome_name(ProbeOutcome o) {
  switch (o) {
    case ProbeOutcome::kProbed:
      return "probed";
    case ProbeOutcome::kUnreachable:
      return "unreachable";
    case ProbeOutcome::kNotIwarp:
      return "not_iwarp";
    case ProbeOutcome::kRejected:
      return "rejected";
  }
  return "probed";
}

json to_json(const ProbeReport& report) {
  json caps = json::array();
  for (const auto& c : report.capabilities) {
    json evidence = json::array();
    for (const auto& e : c.evidence) {
      evidence.push_back(json{{"offered", e.offered}, {"came_back", e.came_back}});
    }
    caps.push_back(json{{"id", c.id},
                        {"title", c.title},
                        {"value", c.value},
                        {"verdict", verdict_name(c.verdict)},
                        {"why", c.why},
                        {"data", c.data},
                        {"evidence", std::move(evidence)}});
  }
  return json{{"schema", kProbeSchema},
              {"uri", report.uri},
              {"outcome", outcome_name(report.outcome)},
              {"detail", report.detail},
              {"stopped_by_signal", report.stopped_by_signal},
              {"connections", report.connections},
              {"elapsed_ms", report.elapsed_ms},
              {"capabilities", std::move(caps)},
              {"responder_policy", report.responder_policy},
              {"traits", report.traits},
              {"fingerprint", report.fingerprint}};
}

namespace {

// Indents every line of a wrapped text.
void print_wrapped(std::ostream& out, std::string_view indent, std::string_view text,
                   std::size_t width) {
  auto wrapped = tools::wrap_help(text, width);
  std::size_t start = 0;
  while (start <= wrapped.size()) {
    auto end = wrapped.find('\n', start);
    if (end == std::string::npos) end = wrapped.size();
    out << indent << std::string_view(wrapped).substr(start, end - start) << '\n';
    start = end + 1;
  }
}

}  // namespace

void print_table(const ProbeReport& report, bool evidence, std::ostream& out) {
  out << "rdma-probe " << report.uri << ": " << report.detail << " (" << report.connections
      << " connection" << (report.connections == 1 ? "" : "s") << ", "
      << static_cast<long long>(report.elapsed_ms) << " ms)\n";
  if (report.capabilities.empty()) return;

  std::size_t title_w = std::string_view("CAPABILITY").size();
  for (const auto& c : report.capabilities) title_w = std::max(title_w, c.title.size());
  constexpr std::size_t kValueWidth = 58;
  out << '\n';
  auto row = [&](std::string_view title, std::string_view value, std::string_view verdict) {
    // A long value continues on the next lines, in its column.
    auto wrapped = tools::wrap_help(value, kValueWidth);
    std::size_t start = 0;
    bool first = true;
    while (start <= wrapped.size()) {
      auto end = wrapped.find('\n', start);
      if (end == std::string::npos) end = wrapped.size();
      auto line = std::string_view(wrapped).substr(start, end - start);
      std::string left(first ? title : "");
      left.resize(title_w, ' ');
      out << left << "  " << line;
      if (first)
        out << std::string(kValueWidth - std::min(kValueWidth, line.size()), ' ') << "  "
            << verdict;
      out << '\n';
      first = false;
      start = end + 1;
    }
  };
  row("CAPABILITY", "VALUE", "VERDICT");
  for (const auto& c : report.capabilities) {
    row(c.title, c.value, verdict_name(c.verdict));
    if (evidence) {
      for (const auto& e : c.evidence) {
        print_wrapped(out, std::string(title_w + 4, ' '), "offered:   " + e.offered, 90);
        print_wrapped(out, std::string(title_w + 4, ' '), "came back: " + e.came_back, 90);
      }
    }
  }
  bool heading = false;
  for (const auto& c : report.capabilities) {
    if (c.verdict == Verdict::kOk || c.why.empty()) continue;
    if (!heading) out << "\nWHY\n";
    heading = true;
    print_wrapped(out, "  ", c.title + " (" + std::string(verdict_name(c.verdict)) + "): " + c.why,
                  96);
  }
  out << report.fingerprint_text;
}

}  // namespace rdma_interop::probe
