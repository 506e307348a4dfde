// counters_json.h - cm::BacklogCounters and credit::CreditCounters as JSON objects, one key
// per field, named as the structs name them, and the snapshot rows that carry them. Shared by
// the telemetry files and backlog-stat --json, so the two can never disagree about a name.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/cm/backlog_counters.h"
#include "core/credit/credit_window.h"
#include "core/telemetry/connection_snapshot.h"
#include "core/telemetry/listener_snapshot.h"
#include "core/util/expected.h"

namespace rdma_interop::telemetry {

nlohmann::ordered_json counters_to_json(const cm::BacklogCounters& c);
// Every field must be present as an unsigned integer that fits; unknown keys are ignored.
Expected<cm::BacklogCounters, std::string> counters_from_json(const nlohmann::json& j);

// A connection's credit figures ("credit" in connection_snapshot.h), same rules.
nlohmann::ordered_json credit_counters_to_json(const credit::CreditCounters& c);
Expected<credit::CreditCounters, std::string> credit_counters_from_json(const nlohmann::json& j);

// One "listeners" row (listener_snapshot.h) and one "connections" row
// (connection_snapshot.h): their fields in order, the counters last.
nlohmann::ordered_json listener_to_json(const ListenerSnapshot& l);
nlohmann::ordered_json connection_to_json(const ConnectionSnapshot& c);

}  // namespace rdma_interop::telemetry
