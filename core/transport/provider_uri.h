// provider_uri.h - which provider and where: "tcp://198.18.0.2:7174", "verbs://siw0",
// "sim://seed=7". Parsing is strict and says what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/util/expected.h"

namespace rdma_interop::transport {

struct ProviderUri {
  std::string scheme;  // "tcp", "verbs", "sim"
  std::string host;    // tcp: IPv4 address or name; verbs: device; sim: the rest
  std::uint16_t port = 0;
  std::string to_string() const;
  friend bool operator==(const ProviderUri&, const ProviderUri&) = default;
};

// Errors are sentences: "tcp URI needs a port: tcp://198.18.0.2:PORT".
Expected<ProviderUri, std::string> parse_provider_uri(std::string_view uri);

}  // namespace rdma_interop::transport
