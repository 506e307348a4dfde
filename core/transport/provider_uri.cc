#include "core/transport/provider_uri.h"

#include <algorithm>
#include <array>
#include <charconv>

namespace rdma_interop::transport {
namespace {

constexpr std::array<std::string_view, 3> kKnownSchemes = {"tcp", "verbs", "sim"};

bool is_scheme_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

Expected<ProviderUri, std::string> parse_tcp(std::string_view rest, std::string_view uri) {
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos) {
    return unexpected("tcp URI needs a port: tcp://" + std::string(rest) + ":PORT (got '" +
                      std::string(uri) + "')");
  }
  const std::string_view host = rest.substr(0, colon);
  const std::string_view port = rest.substr(colon + 1);
  if (host.empty()) {
    return unexpected("tcp URI needs a host: tcp://ADDRESS:PORT (got '" + std::string(uri) + "')");
  }
  if (host.find_first_of(":/@?#[] ") != std::string_view::npos) {
    return unexpected("tcp URI host '" + std::string(host) +
                      "' is not an IPv4 address or host name");
  }
  if (port.empty()) {
    return unexpected("tcp URI needs a port: tcp://" + std::string(host) + ":PORT");
  }
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return unexpected("tcp URI port '" + std::string(port) + "' is not a number from 0 to 65535");
  }
  return ProviderUri{"tcp", std::string(host), static_cast<std::uint16_t>(value)};
}

}  // namespace

std::string ProviderUri::to_string() const {
  if (scheme == "tcp") return scheme + "://" + host + ":" + std::to_string(port);
  return scheme + "://" + host;
}

Expected<ProviderUri, std::string> parse_provider_uri(std::string_view uri) {
  const auto sep = uri.find("://");
  if (sep == std::string_view::npos) {
    return unexpected("provider URI '" + std::string(uri) +
                      "' has no scheme: expected tcp://ADDRESS:PORT, verbs://DEVICE or "
                      "sim://OPTIONS");
  }
  const std::string_view scheme = uri.substr(0, sep);
  const std::string_view rest = uri.substr(sep + 3);
  if (scheme.empty() || !std::all_of(scheme.begin(), scheme.end(), is_scheme_char)) {
    return unexpected("provider URI scheme '" + std::string(scheme) +
                      "' must be lower-case letters and digits");
  }
  if (std::find(kKnownSchemes.begin(), kKnownSchemes.end(), scheme) == kKnownSchemes.end()) {
    return unexpected("unknown provider scheme '" + std::string(scheme) +
                      "': known schemes are tcp, verbs and sim");
  }
  if (scheme == "tcp") return parse_tcp(rest, uri);
  if (rest.empty()) {
    return unexpected(std::string(scheme) + " URI needs a " +
                      (scheme == "verbs" ? "device: verbs://DEVICE" : "setting: sim://seed=N"));
  }
  return ProviderUri{std::string(scheme), std::string(rest), 0};
}

}  // namespace rdma_interop::transport
