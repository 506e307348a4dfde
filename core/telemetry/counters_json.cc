#include "core/telemetry/counters_json.h"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace rdma_interop::telemetry {
namespace {

// One table drives both directions, so a field added to BacklogCounters needs one line here.
template <class F>
void for_each_field(cm::BacklogCounters& c, F&& f) {
  f("backlog", c.backlog);
  f("pending", c.pending);
  f("high_water", c.high_water);
  f("requests", c.requests);
  f("accepted", c.accepted);
  f("rejected_by_app", c.rejected_by_app);
  f("pending_expired", c.pending_expired);
  f("pending_aborted", c.pending_aborted);
  f("overflow_rejected", c.overflow_rejected);
  f("overflow_waiting", c.overflow_waiting);
  f("overflow_dropped", c.overflow_dropped);
  f("half_open", c.half_open);
  f("half_open_limit", c.half_open_limit);
  f("half_open_opened", c.half_open_opened);
  f("half_open_completed", c.half_open_completed);
  f("half_open_expired", c.half_open_expired);
  f("half_open_aborted", c.half_open_aborted);
  f("half_open_evicted", c.half_open_evicted);
}

}  // namespace

nlohmann::ordered_json counters_to_json(const cm::BacklogCounters& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  auto copy = c;
  for_each_field(copy, [&](const char* name, auto& field) { j[name] = field; });
  return j;
}

Expected<cm::BacklogCounters, std::string> counters_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return unexpected(std::string("\"counters\" is not an object"));
  cm::BacklogCounters c;
  std::string error;
  for_each_field(c, [&](const char* name, auto& field) {
    if (!error.empty()) return;
    using T = std::remove_reference_t<decltype(field)>;
    const auto it = j.find(name);
    if (it == j.end() || !it->is_number_unsigned()) {
      error = std::string("counter \"") + name + "\" is missing or not an unsigned integer";
      return;
    }
    const auto v = it->get<std::uint64_t>();
    if (v > std::numeric_limits<T>::max()) {
      error = std::string("counter \"") + name + "\" is out of range";
      return;
    }
    field = static_cast<T>(v);
  });
  if (!error.empty()) return unexpected(std::move(error));
  return c;
}

}  // namespace rdma_interop::telemetry
