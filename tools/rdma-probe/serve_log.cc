#include "tools/rdma-probe/serve_log.h"

#include <cstdio>
#include <ctime>
#include <mutex>

#include "core/util/json_text.h"
#include "core/util/printable_text.h"
#include "tools/common/help_wrap.h"
#include "tools/rdma-probe/json_report.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;

std::string text(const json& v) {
  if (v.is_string()) return printable(v.get<std::string>());
  return printable(json_text(v));
}

std::string milliseconds(const json& v) {
  char out[32];
  std::snprintf(out, sizeof out, "%.1f ms", v.is_number() ? v.get<double>() : 0.0);
  return out;
}

std::string negotiated_text(const json& n) {
  std::string out = "revision " + text(n.value("revision", json(nullptr)));
  if (n.value("peer_to_peer", false)) {
    out += ", peer-to-peer rtr " + (n["rtr"].is_null() ? std::string("none") : text(n["rtr"]));
  }
  if (n.value("crc", false)) out += ", crc";
  if (n.value("markers_to_peer", false) || n.value("markers_from_peer", false)) out += ", markers";
  if (n.value("enhanced", false)) {
    out += ", ird " + text(n.value("ird", json(nullptr))) + " ord " +
           text(n.value("ord", json(nullptr)));
  }
  return out;
}

std::string error_text(const json& e) {
  std::string out = text(e.value("kind", json("error")));
  if (e.contains("failure") && !e["failure"].is_null()) out += " " + text(e["failure"]);
  out += ": " + text(e.value("detail", json("")));
  if (e.contains("terminate") && e["terminate"].is_object()) {
    const auto& t = e["terminate"];
    out += " (Terminate layer " + text(t.value("layer", json(nullptr))) + " etype " +
           text(t.value("etype", json(nullptr))) + " code " + text(t.value("code", json(nullptr))) +
           ")";
  }
  return out;
}

std::string connection_text(const json& e) {
  std::string out = "connection from " + text(e.value("peer", json(""))) + ": ";
  if (e.value("ok", false)) {
    out += "ok";
    if (e["negotiated"].is_object()) out += ", " + negotiated_text(e["negotiated"]);
    if (e["exchange"].is_object()) {
      out += ", " + text(e["exchange"].value("bytes_verified", json(0))) + " bytes verified";
    }
  } else {
    out += "FAILED ";
    out += e["error"].is_object() ? error_text(e["error"]) : std::string("(no error reported)");
    if (e["exchange"].is_object() && e["exchange"].contains("steps")) {
      for (const auto& step : e["exchange"]["steps"]) {
        if (!step.value("ok", true)) {
          out += "; step " + text(step.value("name", json(""))) + " failed";
          break;
        }
      }
    }
  }
  return out + " (" + milliseconds(e.value("elapsed_ms", json(0.0))) + ")";
}

std::string fields_text(const json& e) {
  std::string out;
  for (const auto& [key, value] : e.items()) {
    if (key == "event") continue;
    out += (out.empty() ? "" : ", ") + key + " " + text(value);
  }
  return out;
}

std::string clock_text() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char out[16];
  std::strftime(out, sizeof out, "%H:%M:%S", &local);
  return out;
}

}  // namespace

std::string serve_log_line(const json& event) {
  const std::string kind = event.value("event", "");
  std::string line;
  if (kind == "listening") {
    line = "listening on " + text(event.value("address", json(""))) + " as " +
           text(event.value("personality", json(""))) + " (pid " +
           text(event.value("pid", json(0))) + ")";
  } else if (kind == "connection") {
    line = connection_text(event);
  } else if (kind == "backlog") {
    line = "backlog: " + text(event.value("type", json(""))) + " (" +
           text(event.value("reason", json(""))) + ") " + text(event.value("peer", json(""))) +
           ", pending " + text(event.value("pending", json(0)));
  } else {
    line = printable(kind) + ": " + fields_text(event);
  }
  std::string out;
  for (char c : tools::wrap_help(line, 92)) {
    out += c;
    if (c == '\n') out += std::string(9, ' ');
  }
  return out;
}

void print_serve_event(const json& event, bool as_json) {
  if (as_json) {
    print_json_line(event);
    return;
  }
  const std::string line = clock_text() + " " + serve_log_line(event) + "\n";
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace rdma_interop::probe
