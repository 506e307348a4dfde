#include "tools/rdma-mesh/mesh_report.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/telemetry/counters_json.h"
#include "core/util/json_text.h"
#include "core/util/printable_text.h"
#include "core/wire/wire_error.h"

namespace rdma_interop::mesh {

std::optional<std::uint64_t> vm_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      std::istringstream in(line.substr(6));
      std::uint64_t kib = 0;
      if (in >> kib) return kib;
      return std::nullopt;
    }
  }
  return std::nullopt;
}

json terminate_json(const wire::TerminateMessage& t) {
  return json{{"layer", static_cast<int>(t.cause.layer)},
              {"etype", static_cast<int>(t.cause.etype)},
              {"code", static_cast<int>(t.cause.code)},
              {"text", wire::describe(t.cause)}};
}

json endpoint_json(const messaging::EndpointStats& s) {
  return json{{"bytes_allocated", s.bytes_allocated},
              {"budget",
               {{"cq_entries", s.budget.cq_entries},
                {"send_reserved", s.budget.send_reserved},
                {"receive_reserved", s.budget.receive_reserved},
                {"high_water", s.budget.high_water},
                {"reserved_total", s.budget.reserved_total},
                {"released_total", s.budget.released_total},
                {"refused", s.budget.refused}}},
              {"cq",
               {{"entries", s.cq.entries},
                {"depth", s.cq.depth},
                {"high_water", s.cq.high_water},
                {"pushed", s.cq.pushed},
                {"polled", s.cq.polled},
                {"overruns", s.cq.overruns}}}};
}

json peer_json(const std::optional<messaging::PeerStats>& stats, const PeerTally& tally) {
  constexpr auto r = std::memory_order_relaxed;
  json app{{"stream_sent", tally.sent_of(MessageTag::kStream)},
           {"requests_sent", tally.sent_of(MessageTag::kRequest)},
           {"replies_sent", tally.sent_of(MessageTag::kReply)},
           {"stream_received", tally.received_of(MessageTag::kStream)},
           {"requests_received", tally.received_of(MessageTag::kRequest)},
           {"replies_received", tally.received_of(MessageTag::kReply)},
           {"sequence_errors", tally.sequence_errors.load(r)},
           {"unknown", tally.unknown.load(r)},
           {"refused", tally.refused.load(r)},
           {"send_errors", tally.send_errors.load(r)},
           {"head_blocked_ms", static_cast<double>(tally.head_blocked_us.load(r)) / 1000.0}};
  if (!stats) {
    // The endpoint no longer knows the peer (closed): only our own counts remain.
    return json{
        {"state", "closed"}, {"detail", "the endpoint forgot this peer"}, {"app", std::move(app)}};
  }
  const auto& s = *stats;
  return json{
      {"state", messaging::state_name(s.state)},
      {"detail", s.detail},
      {"sent", s.messages_sent},
      {"received", s.messages_received},
      {"bytes_sent", s.bytes_sent},
      {"bytes_received", s.bytes_received},
      {"refused", s.refused},
      {"credits", s.credit.credits},
      {"queued", s.queued},
      {"replies_queued", s.replies_queued},
      {"held", s.held},
      {"stalls", s.credit.stalls_no_credit},
      {"slot_stalls", s.credit.stalls_no_slot},
      {"lost", s.lost},
      {"terminate_sent", s.terminate_sent ? terminate_json(*s.terminate_sent) : json(nullptr)},
      {"terminate_received",
       s.terminate_received ? terminate_json(*s.terminate_received) : json(nullptr)},
      {"app", std::move(app)},
      {"credit", telemetry::credit_counters_to_json(s.credit)},
  };
}

void ReportWriter::emit(json event) {
  json line;
  line["event"] = event.value("event", "");
  line["node"] = node_;
  for (auto& [k, v] : event.items()) {
    if (k != "event") line[k] = std::move(v);
  }
  std::string out = json_ ? json_text(line) + "\n" : text_of(line);
  std::lock_guard lock(mu_);
  // Without --json, errors are for the person at the terminal: stderr, like every tool's.
  auto& stream = !json_ && line["event"] == "error" ? std::cerr : std::cout;
  stream << out << std::flush;
}

namespace {

std::string number(const json& v) {
  if (v.is_number_float()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v.get<double>());
    return buf;
  }
  return json_text(v);
}

// A string field for the terminal: peer names and details may hold any bytes a peer sent.
std::string text(const json& e, const char* key, const char* absent = "") {
  return printable(e.value(key, std::string(absent)));
}

std::string terminate_text(const json& t) {
  return t.is_null() ? "-" : text(t, "text", "?");
}

}  // namespace

std::string ReportWriter::text_of(const json& e) const {
  const std::string event = text(e, "event");
  std::ostringstream out;
  out << printable(node_) << ": ";
  if (event == "listening") {
    out << "listening on " << text(e, "address") << " (pid " << e.value("pid", 0) << ")\n";
  } else if (event == "connected") {
    out << "connected to " << text(e, "peer") << " (" << text(e, "role") << ", "
        << text(e, "peer_address") << ")\n";
  } else if (event == "started") {
    out << "all " << e["peers"].size() << " peers connected in " << number(e["setup_ms"])
        << " ms; run started\n";
  } else if (event == "report" || event == "summary") {
    if (event == "report") {
      out << "t=" << number(e["t"]) << " s rss=" << number(e["rss_kib"]) << " KiB\n";
    } else {
      out << "summary after " << number(e["run_s"]) << " s"
          << (e.value("stopped_by_signal", false) ? " (stopped by a signal)" : "") << ": "
          << (e.value("ok", false) ? "ok" : "NOT ok") << ", rss start "
          << number(e["rss_kib"]["start"]) << " KiB, peak " << number(e["rss_kib"]["peak"])
          << " KiB\n";
    }
    for (const auto& [name, p] : e["peers"].items()) {
      out << "  " << printable(name) << " " << text(p, "state", "?")
          << " sent=" << number(p["sent"]) << " recv=" << number(p["received"])
          << " refused=" << number(p["refused"]) << " credits=" << number(p["credits"])
          << " queued=" << number(p["queued"]) << " held=" << number(p["held"])
          << " stalls=" << number(p["stalls"])
          << " replies=" << number(p["app"]["replies_received"])
          << " seq_errors=" << number(p["app"]["sequence_errors"]);
      if (p.contains("terminate_sent") && !p["terminate_sent"].is_null()) {
        out << " terminate_sent=" << terminate_text(p["terminate_sent"]);
      }
      if (p.contains("terminate_received") && !p["terminate_received"].is_null()) {
        out << " terminate_received=" << terminate_text(p["terminate_received"]);
      }
      out << "\n";
    }
  } else if (event == "peer_failed" || event == "peer_closed") {
    out << "peer " << text(e, "peer") << (event == "peer_failed" ? " failed" : " closed")
        << " at t=" << number(e["t"]) << " s: " << text(e, "detail") << "\n";
  } else if (event == "error") {
    return "rdma-mesh: " + printable(node_) + ": error: " + text(e, "error") + "\n";
  } else {
    out << json_text(e) << "\n";
  }
  return out.str();
}

}  // namespace rdma_interop::mesh
