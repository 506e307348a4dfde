// provider_uri.h - which provider and where: "tcp://198.18.0.2:7174", "verbs://siw0" (the
// providers' schemes; the simulator, core/sim, is none). Strict: it says what is wrong.
//
// verbs URIs name an rdma_cm address, optionally with RC timing options:
//   verbs://10.0.2.15:7000               an IP address (one on an RDMA device) and port
//   verbs://[fe80::1%eth0]:7000          IPv6 in brackets
//   verbs://siw0  verbs://rxe0:7000      a device name: its first IP address (port 0 = any)
//   verbs://host.example:7000            a host name, resolved at listen/connect time
//   verbs://10.0.2.15:7000?ack_timeout=14&retry_count=2&rnr_retry=7
//   verbs://10.9.0.1:7000?source=10.9.0.2 connect from this local address (and its device)
// Whether HOST is a device or a host name is decided when the provider uses it (a name
// that is an RDMA device wins); the options are checked here (verbs/verbs_options.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/util/expected.h"

namespace rdma_interop::transport {

struct ProviderUri {
  std::string scheme;  // "tcp" or "verbs"
  std::string host;    // tcp: IPv4 address or name; verbs: address, device or name
  std::uint16_t port = 0;  // verbs: 0 when the URI has none
  // verbs: the query's key=value pairs, in order (validated by the parser).
  std::vector<std::pair<std::string, std::string>> query = {};
  std::string to_string() const;
  friend bool operator==(const ProviderUri&, const ProviderUri&) = default;
};

// Errors are sentences: "tcp URI needs a port: tcp://198.18.0.2:PORT".
Expected<ProviderUri, std::string> parse_provider_uri(std::string_view uri);

}  // namespace rdma_interop::transport
