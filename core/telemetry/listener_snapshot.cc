#include "core/telemetry/listener_snapshot.h"

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

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
    listeners.push_back(listener_to_json(l));
  }
  nlohmann::ordered_json connections = nlohmann::ordered_json::array();
  for (const auto& c : s.connections) {
    connections.push_back(connection_to_json(c));
  }
  const nlohmann::ordered_json doc = {
      {"schema", kSnapshotSchema},
      {"pid", s.pid},
      {"process", s.process},
      {"sequence", s.sequence},
      {"monotonic_ns", s.monotonic_ns},
      {"wall_ms", s.wall_ms},
      {"listeners", std::move(listeners)},
      {"connections", std::move(connections)},
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

Expected<ConnectionSnapshot, std::string> parse_connection(const nlohmann::json& j) {
  if (!j.is_object()) return unexpected(std::string("a connection is not an object"));
  ConnectionSnapshot c;
  std::string error;
  const auto text = [&](const char* key, std::string& out) {
    const auto it = j.find(key);
    if (!error.empty()) return;
    if (it == j.end() || !it->is_string()) {
      error = std::string("a connection has no \"") + key + "\" string";
      return;
    }
    out = it->get<std::string>();
  };
  const auto count = [&](const char* key, auto& out) {
    using T = std::remove_reference_t<decltype(out)>;
    const auto it = j.find(key);
    if (!error.empty()) return;
    if (it == j.end() || !it->is_number_unsigned() ||
        it->get<std::uint64_t>() > std::numeric_limits<T>::max()) {
      error = std::string("a connection's \"") + key +
              "\" is missing or not an unsigned integer that fits";
      return;
    }
    out = static_cast<T>(it->get<std::uint64_t>());
  };
  text("local_address", c.local_address);
  text("peer_address", c.peer_address);
  text("scheme", c.scheme);
  text("peer", c.peer);
  text("state", c.state);
  count("queued", c.queued);
  count("queue_limit", c.queue_limit);
  count("held", c.held);
  count("refused", c.refused);
  if (!error.empty()) return unexpected(std::move(error));
  const auto credit = j.find("credit");
  if (credit == j.end()) return unexpected(std::string("a connection has no \"credit\""));
  auto counters = credit_counters_from_json(*credit);
  if (!counters) return unexpected(counters.error());
  c.credit = *counters;
  return c;
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
  // Every number is a non-negative integer no larger than `max` as written: a value that
  // would wrap or be truncated on the way into its field makes the file malformed (a pid of
  // 2^32 + 1 must not read as pid 1, alive forever).
  const auto whole = [&](const char* key, auto& out, std::uint64_t min, std::uint64_t max) {
    const auto it = doc.find(key);
    if (it == doc.end() || !it->is_number_unsigned()) return false;
    const auto v = it->get<std::uint64_t>();
    if (v < min || v > max) return false;
    out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    return true;
  };
  constexpr std::uint64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
  if (!whole("pid", s.pid, 1, kMaxPid)) {
    return unexpected("\"pid\" is missing or not a pid (an integer 1.." + std::to_string(kMaxPid) +
                      ")");
  }
  if (!whole("sequence", s.sequence, 0, std::numeric_limits<std::uint64_t>::max())) {
    return unexpected(std::string("\"sequence\" is missing or not an unsigned 64-bit integer"));
  }
  if (!whole("monotonic_ns", s.monotonic_ns, 0, kInt64Max)) {
    return unexpected(std::string("\"monotonic_ns\" is missing or not an integer 0..2^63-1"));
  }
  if (!whole("wall_ms", s.wall_ms, 0, kInt64Max)) {
    return unexpected(std::string("\"wall_ms\" is missing or not an integer 0..2^63-1"));
  }
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
  // Optional: files written before connections were published have none.
  const auto connections = doc.find("connections");
  if (connections != doc.end()) {
    if (!connections->is_array()) return unexpected(std::string("\"connections\" is not an array"));
    for (const auto& j : *connections) {
      auto c = parse_connection(j);
      if (!c) return unexpected(c.error());
      s.connections.push_back(std::move(*c));
    }
  }
  return s;
}

}  // namespace rdma_interop::telemetry
