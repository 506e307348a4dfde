#include "core/transport/verbs/verbs_options.h"

#include <algorithm>
#include <charconv>

namespace rdma_interop::transport::verbs {
namespace {

std::string known_keys() {
  std::string s;
  for (const auto key : kVerbsOptionKeys) {
    if (!s.empty()) s += ", ";
    s += key;
  }
  return s;
}

// A decimal number in [0, max]; anything else (sign, spaces, hex, empty) is an error.
Expected<std::uint8_t, std::string> small_number(const std::string& key, const std::string& value,
                                                 unsigned max) {
  unsigned n = 0;
  const char* first = value.data();
  const char* last = value.data() + value.size();
  const auto [end, ec] = std::from_chars(first, last, n);
  if (value.empty() || ec == std::errc::invalid_argument || end != last) {
    return unexpected("verbs URI option " + key + "=" + value + " is not a decimal number (0 to " +
                      std::to_string(max) + ")");
  }
  if (ec == std::errc::result_out_of_range || n > max) {
    return unexpected("verbs URI option " + key + "=" + value + " is out of range: 0 to " +
                      std::to_string(max));
  }
  return static_cast<std::uint8_t>(n);
}

}  // namespace

Expected<VerbsOptions, std::string> parse_verbs_options(
    const std::vector<std::pair<std::string, std::string>>& query) {
  VerbsOptions options;
  std::vector<std::string_view> seen;
  for (const auto& [key, value] : query) {
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return unexpected("verbs URI option " + key + " is given twice");
    }
    seen.push_back(key);
    if (key == "ack_timeout") {
      auto n = small_number(key, value, 31);  // a 5-bit field (IB spec: Local ACK Timeout)
      if (!n) return unexpected(n.error());
      options.ack_timeout = *n;
    } else if (key == "retry_count") {
      auto n = small_number(key, value, 7);  // 3 bits in the CM REQ
      if (!n) return unexpected(n.error());
      options.retry_count = *n;
    } else if (key == "rnr_retry") {
      auto n = small_number(key, value, 7);  // 3 bits; 7 = infinite
      if (!n) return unexpected(n.error());
      options.rnr_retry_count = *n;
    } else if (key == "source") {
      options.source = value;  // resolved when connect uses it (resolve_verbs_host)
    } else {
      return unexpected("unknown verbs URI option '" + key + "' (known: " + known_keys() + ")");
    }
  }
  return options;
}

}  // namespace rdma_interop::transport::verbs
