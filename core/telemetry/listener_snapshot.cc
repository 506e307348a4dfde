#include "core/telemetry/listener_snapshot.h"

#include <nlohmann/json.hpp>

#include "core/telemetry/counters_json.h"

namespace rdma_interop::telemetry {

std::string_view overflow_text(cm::BacklogOverflow o) {
  switch (o) {
    case cm::BacklogOverflow::kDrop: return "drop";
    case cm::BacklogOverflow::kReject: return "reject";
  }
  return "unknown";
}

std::optional<cm::BacklogOverflow> parse_overflow(std::string_view text) {
  if (text == "drop") return cm::BacklogOverflow::kDrop;
  if (text == "reject") return cm::BacklogOverflow::kReject;
  return std::nullopt;
}

std::string to_json_text(const ProcessSnapshot& s) {
  nlohmann::ordered_json listeners = nlohmann::ordered_json::array();
  for (const auto& l : s.listeners) {
    listeners.push_back({
        {"local_address", l.local_address},
        {"scheme", l.scheme},
        {"overflow", l.overflow ? nlohmann::ordered_json(overflow_text(*l.overflow)) : nlohmann::ordered_json()},
        {"counters", counters_to_json(l.counters)},
    });
  }
  const nlohmann::ordered_json doc = {
      {"schema", kSnapshotSchema}, {"pid", s.pid},
      {"process", s.process},      {"sequence", s.sequence},
      {"monotonic_ns", s.monotonic_ns}, {"wall_ms", s.wall_ms},
      {"listeners", std::move(listeners)},
  };
  // Replace, not throw, on invalid UTF-8: a process name is whatever the kernel holds.
  return doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

namespace {

Expected<ListenerSnapshot, std::string> parse_listener(const nlohmann::json& j) {
  if (!j.is_object()) return unexpected(std::string("a listener is not an object"));
  ListenerSnapshot l;
  const auto address = j.find("local_address");
  const auto scheme = j.find("scheme");
  const auto overflow = j.find("overflow");
  const auto counters = j.find("counters");
  if (address == j.end() || !address->is_string()) {
    return unexpected(std::string("a listener has no \"local_address\" string"));
  }
  if (scheme == j.end() || !scheme->is_string()) {
    return unexpected(std::string("a listener has no \"scheme\" string"));
  }
  if (counters == j.end()) return unexpected(std::string("a listener has no \"counters\""));
  l.local_address = address->get<std::string>();
  l.scheme = scheme->get<std::string>();
  if (overflow != j.end() && !overflow->is_null()) {
    if (!overflow->is_string()) return unexpected(std::string("\"overflow\" is not a string"));
    l.overflow = parse_overflow(overflow->get<std::string>());
    if (!l.overflow) {
      return unexpected("unknown overflow policy \"" + overflow->get<std::string>() + "\"");
    }
  }
  auto c = counters_from_json(*counters);
  if (!c) return unexpected(c.error());
  l.counters = *c;
  return l;
}

}  // namespace

Expected<ProcessSnapshot, std::string> parse_snapshot(std::string_view text) {
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return unexpected(std::string("not valid JSON"));
  if (!doc.is_object()) return unexpected(std::string("not a JSON object"));
  const auto schema = doc.find("schema");
  if (schema == doc.end() || !schema->is_string() || schema->get<std::string>() != kSnapshotSchema) {
    return unexpected("\"schema\" is not \"" + std::string(kSnapshotSchema) + "\"");
  }
  ProcessSnapshot s;
  const auto integer = [&](const char* key, auto& out) -> bool {
    const auto it = doc.find(key);
    if (it == doc.end() || !it->is_number_integer()) return false;
    out = it->get<std::remove_reference_t<decltype(out)>>();
    return true;
  };
  if (!integer("pid", s.pid) || s.pid <= 0) return unexpected(std::string("no valid \"pid\""));
  if (!integer("sequence", s.sequence)) return unexpected(std::string("no \"sequence\""));
  if (!integer("monotonic_ns", s.monotonic_ns)) return unexpected(std::string("no \"monotonic_ns\""));
  if (!integer("wall_ms", s.wall_ms)) return unexpected(std::string("no \"wall_ms\""));
  const auto process = doc.find("process");
  if (process == doc.end() || !process->is_string()) {
    return unexpected(std::string("no \"process\" string"));
  }
  s.process = process->get<std::string>();
  const auto listeners = doc.find("listeners");
  if (listeners == doc.end() || !listeners->is_array()) {
    return unexpected(std::string("no \"listeners\" array"));
  }
  for (const auto& j : *listeners) {
    auto l = parse_listener(j);
    if (!l) return unexpected(l.error());
    s.listeners.push_back(std::move(*l));
  }
  return s;
}

}  // namespace rdma_interop::telemetry
