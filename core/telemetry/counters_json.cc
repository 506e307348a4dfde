#include "core/telemetry/counters_json.h"

#include <cstdint>
#include <limits>
#include <type_traits>

namespace rdma_interop::telemetry {
namespace {

// One table per struct drives both directions, so a field added to a struct needs one line.
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

template <class F>
void for_each_field(credit::CreditCounters& c, F&& f) {
  f("credits", c.credits);
  f("control_credits", c.control_credits);
  f("data_slots_in_use", c.data_slots_in_use);
  f("control_slots_in_use", c.control_slots_in_use);
  f("credits_granted_total", c.credits_granted_total);
  f("sent", c.sent);
  f("updates_sent", c.updates_sent);
  f("stalls_no_credit", c.stalls_no_credit);
  f("stalls_no_slot", c.stalls_no_slot);
  f("update_stalls", c.update_stalls);
  f("posted", c.posted);
  f("granted", c.granted);
  f("pending_grant", c.pending_grant);
  f("control_posted", c.control_posted);
  f("control_return_pending", c.control_return_pending);
  f("granted_total", c.granted_total);
  f("received", c.received);
  f("updates_received", c.updates_received);
}

template <class Counters>
nlohmann::ordered_json to_json(Counters c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for_each_field(c, [&](const char* name, auto& field) { j[name] = field; });
  return j;
}

// `what` is the object's key, for errors: "counters" / "credit".
template <class Counters>
Expected<Counters, std::string> from_json(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) return unexpected("\"" + what + "\" is not an object");
  Counters c;
  std::string error;
  for_each_field(c, [&](const char* name, auto& field) {
    if (!error.empty()) return;
    using T = std::remove_reference_t<decltype(field)>;
    const auto it = j.find(name);
    if (it == j.end() || !it->is_number_unsigned()) {
      error = "counter \"" + what + "." + name + "\" is missing or not an unsigned integer";
      return;
    }
    const auto v = it->get<std::uint64_t>();
    if (v > std::numeric_limits<T>::max()) {
      error = "counter \"" + what + "." + name + "\" is out of range";
      return;
    }
    field = static_cast<T>(v);
  });
  if (!error.empty()) return unexpected(std::move(error));
  return c;
}

}  // namespace

nlohmann::ordered_json counters_to_json(const cm::BacklogCounters& c) {
  return to_json(c);
}

Expected<cm::BacklogCounters, std::string> counters_from_json(const nlohmann::json& j) {
  return from_json<cm::BacklogCounters>(j, "counters");
}

nlohmann::ordered_json credit_counters_to_json(const credit::CreditCounters& c) {
  return to_json(c);
}

Expected<credit::CreditCounters, std::string> credit_counters_from_json(const nlohmann::json& j) {
  return from_json<credit::CreditCounters>(j, "credit");
}

nlohmann::ordered_json listener_to_json(const ListenerSnapshot& l) {
  return {
      {"local_address", l.local_address},
      {"scheme", l.scheme},
      {"overflow",
       l.overflow ? nlohmann::ordered_json(overflow_text(*l.overflow)) : nlohmann::ordered_json()},
      {"counters", counters_to_json(l.counters)},
  };
}

nlohmann::ordered_json connection_to_json(const ConnectionSnapshot& c) {
  return {
      {"local_address", c.local_address},
      {"peer_address", c.peer_address},
      {"scheme", c.scheme},
      {"peer", c.peer},
      {"state", c.state},
      {"queued", c.queued},
      {"queue_limit", c.queue_limit},
      {"held", c.held},
      {"refused", c.refused},
      {"credit", credit_counters_to_json(c.credit)},
  };
}

}  // namespace rdma_interop::telemetry
