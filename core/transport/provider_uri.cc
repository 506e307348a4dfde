#include "core/transport/provider_uri.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "core/transport/provider_registry.h"
#include "core/transport/verbs/verbs_options.h"

namespace rdma_interop::transport {
namespace {

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

// A port: decimal, 0 to 65535.
Expected<std::uint16_t, std::string> parse_port(std::string_view port, std::string_view scheme) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value > 65535) {
    return unexpected(std::string(scheme) + " URI port '" + std::string(port) +
                      "' is not a number from 0 to 65535");
  }
  return static_cast<std::uint16_t>(value);
}

bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_';
}

// "k=v&k=v": keys are lower-case letters, digits and '_'; values are non-empty and free of
// the URI delimiters. What the keys mean is verbs_options' business.
Expected<std::vector<std::pair<std::string, std::string>>, std::string> parse_query(
    std::string_view query, std::string_view uri) {
  std::vector<std::pair<std::string, std::string>> out;
  if (query.empty()) {
    return unexpected("verbs URI has an empty option list after '?' (got '" + std::string(uri) +
                      "')");
  }
  std::size_t start = 0;
  while (start <= query.size()) {
    auto end = query.find('&', start);
    if (end == std::string_view::npos) end = query.size();
    const std::string_view item = query.substr(start, end - start);
    const auto eq = item.find('=');
    if (item.empty() || eq == std::string_view::npos || eq == 0 || eq + 1 == item.size()) {
      return unexpected("verbs URI option '" + std::string(item) +
                        "' is not KEY=VALUE (got '" + std::string(uri) + "')");
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    const bool key_ok = std::all_of(key.begin(), key.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    });
    if (!key_ok || value.find_first_of("=?#/@[] ") != std::string_view::npos) {
      return unexpected("verbs URI option '" + std::string(item) +
                        "' has characters a KEY=VALUE option cannot have");
    }
    out.emplace_back(std::string(key), std::string(value));
    start = end + 1;
  }
  return out;
}

// verbs://HOST[:PORT][?QUERY] with HOST an IPv4 address, a device or host name, or an IPv6
// address in brackets (with an optional %zone).
Expected<ProviderUri, std::string> parse_verbs(std::string_view rest, std::string_view uri) {
  const auto qmark = rest.find('?');
  const std::string_view authority = rest.substr(0, qmark);
  ProviderUri out{"verbs", {}, 0};
  if (authority.empty()) {
    return unexpected("verbs URI needs an address or device: verbs://ADDRESS:PORT or "
                      "verbs://DEVICE (got '" + std::string(uri) + "')");
  }
  std::string_view host;
  std::string_view port_text;
  bool has_port = false;
  if (authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return unexpected("verbs URI has an unclosed '[' (got '" + std::string(uri) + "')");
    }
    host = authority.substr(1, close - 1);
    const std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return unexpected("verbs URI: expected ':PORT' after ']' (got '" + std::string(uri) +
                          "')");
      }
      has_port = true;
      port_text = after.substr(1);
    }
    const bool v6_ok = !host.empty() && host.find(':') != std::string_view::npos &&
                       std::all_of(host.begin(), host.end(), [](char c) {
                         return std::isxdigit(static_cast<unsigned char>(c)) != 0 || c == ':' ||
                                c == '.' || c == '%' || is_name_char(c);
                       });
    if (!v6_ok) {
      return unexpected("verbs URI host '[" + std::string(host) + "]' is not an IPv6 address");
    }
  } else {
    const auto colon = authority.find(':');
    if (colon != std::string_view::npos && authority.find(':', colon + 1) != std::string_view::npos) {
      return unexpected("verbs URI: an IPv6 address goes in brackets, verbs://[ADDRESS]:PORT "
                        "(got '" + std::string(uri) + "')");
    }
    host = authority.substr(0, colon);
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = authority.substr(colon + 1);
    }
    if (host.empty()) {
      return unexpected("verbs URI needs an address or device before the port (got '" +
                        std::string(uri) + "')");
    }
    if (!std::all_of(host.begin(), host.end(), is_name_char)) {
      return unexpected("verbs URI host '" + std::string(host) +
                        "' is not an IP address, device or host name");
    }
  }
  if (has_port) {
    if (port_text.empty()) {
      return unexpected("verbs URI has an empty port: verbs://" + std::string(host) +
                        ":PORT, or no ':' for any port");
    }
    auto port = parse_port(port_text, "verbs");
    if (!port) return unexpected(port.error());
    out.port = *port;
  }
  out.host = std::string(host);
  if (qmark != std::string_view::npos) {
    auto query = parse_query(rest.substr(qmark + 1), uri);
    if (!query) return unexpected(query.error());
    if (auto options = verbs::parse_verbs_options(*query); !options) {
      return unexpected(options.error());
    }
    out.query = std::move(*query);
  }
  return out;
}

}  // namespace

// Appended piece by piece: at -O3 GCC 12 reports `"x" + std::string&&` as an overlapping
// memcpy of 2^63 octets (-Wrestrict false positive, GCC bug 105329).
std::string ProviderUri::to_string() const {
  std::string s = scheme;
  s += "://";
  const bool brackets = scheme == "verbs" && host.find(':') != std::string::npos;
  if (brackets) s += '[';
  s += host;
  if (brackets) s += ']';
  if (scheme == "tcp" || (scheme == "verbs" && port != 0)) {
    s += ':';
    s += std::to_string(port);
  }
  if (scheme != "verbs") return s;
  for (std::size_t i = 0; i < query.size(); ++i) {
    s += i == 0 ? '?' : '&';
    s += query[i].first;
    s += '=';
    s += query[i].second;
  }
  return s;
}

Expected<ProviderUri, std::string> parse_provider_uri(std::string_view uri) {
  const auto sep = uri.find("://");
  if (sep == std::string_view::npos) {
    return unexpected("provider URI '" + std::string(uri) + "' has no scheme: expected " +
                      known_uri_forms());
  }
  const std::string_view scheme = uri.substr(0, sep);
  const std::string_view rest = uri.substr(sep + 3);
  if (scheme.empty() || !std::all_of(scheme.begin(), scheme.end(), is_scheme_char)) {
    return unexpected("provider URI scheme '" + std::string(scheme) +
                      "' must be lower-case letters and digits");
  }
  if (find_provider(scheme) == nullptr) {
    return unexpected("unknown provider scheme '" + std::string(scheme) + "': known schemes are " +
                      known_schemes());
  }
  if (scheme == "tcp") return parse_tcp(rest, uri);
  if (scheme == "verbs") return parse_verbs(rest, uri);
  // A scheme in the registry whose URIs nobody parses is this build's mistake, not the user's.
  return unexpected("provider scheme '" + std::string(scheme) + "' has no URI parser");
}

}  // namespace rdma_interop::transport
