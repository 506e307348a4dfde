#include "tools/rdma-mesh/mesh_config.h"

#include <algorithm>
#include <set>

#include "core/transport/provider_registry.h"

namespace rdma_interop::mesh {

bool valid_node_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

Expected<PeerSpec, std::string> parse_peer_spec(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos) {
    return unexpected("--peer " + std::string(text) + ": expected NAME=URI (N2=tcp://ADDR:PORT)");
  }
  PeerSpec spec;
  spec.name = std::string(text.substr(0, eq));
  if (!valid_node_name(spec.name)) {
    return unexpected("--peer " + std::string(text) + ": the name '" + spec.name +
                      "' is not 1-64 characters of A-Z a-z 0-9 _ . -");
  }
  auto uri = transport::parse_provider_uri(text.substr(eq + 1));
  if (!uri) return unexpected("--peer " + std::string(text) + ": " + uri.error());
  spec.uri = *uri;
  return spec;
}

std::string check_config(const MeshConfig& c) {
  if (!valid_node_name(c.name)) {
    return "--name '" + c.name + "' is not 1-64 characters of A-Z a-z 0-9 _ . -";
  }
  if (transport::find_provider(c.listen.scheme) == nullptr) {
    return "--listen " + c.listen.to_string() +
           ": a provider's URI is needed: " + transport::known_uri_forms();
  }
  if (c.listen.scheme == "tcp" && c.listen.port == 0) {
    return "--listen " + c.listen.to_string() +
           ": a fixed port is needed (the peers are told where to connect)";
  }
  if (c.peers.empty()) return "at least one --peer NAME=URI is needed";
  std::set<std::string> names;
  for (const auto& p : c.peers) {
    if (p.name == c.name) return "--peer " + p.name + ": that is this node's own --name";
    if (!names.insert(p.name).second) return "--peer " + p.name + " is given twice";
    if (p.uri.scheme != c.listen.scheme) {
      return "--peer " + p.name + ": " + p.uri.to_string() + " is not a " + c.listen.scheme +
             ":// URI like --listen";
    }
    if (p.uri.port == 0 && p.uri.scheme == "tcp") {
      return "--peer " + p.name + ": " + p.uri.to_string() + " needs a port";
    }
  }
  if (c.size > c.max_message) {
    return "--size " + std::to_string(c.size) + " is over --max-message " +
           std::to_string(c.max_message);
  }
  if (c.send_depth != 0 && c.send_depth <= 2) {
    return "--send-depth must leave room for data beyond the 2 control send slots (>= 3)";
  }
  if (c.window < 2) {
    return "--window must be at least 2 (one credit is reserved for replies)";
  }
  return {};
}

}  // namespace rdma_interop::mesh
