#include "core/transport/verbs/cm_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/runtime/socket_util.h"

namespace rdma_interop::transport::verbs {
namespace {

socklen_t length_of(const sockaddr* a) {
  return a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

// A synchronous cm_id (librdmacm gives it a private channel) destroyed on scope exit.
struct SyncId {
  rdma_cm_id* id = nullptr;
  SyncId() {
    if (rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP) != 0) id = nullptr;
  }
  ~SyncId() {
    if (id != nullptr) rdma_destroy_id(id);
  }
  SyncId(const SyncId&) = delete;
  SyncId& operator=(const SyncId&) = delete;
};

// Binding to a specific address attaches the id to the device that owns it.
std::optional<std::string> bind_device(const sockaddr* address) {
  SyncId sync;
  if (sync.id == nullptr) return std::nullopt;
  CmAddress copy;
  std::memcpy(&copy.storage, address, length_of(address));
  copy.set_port(0);
  if (rdma_bind_addr(sync.id, copy.get()) != 0) return std::nullopt;
  if (sync.id->verbs == nullptr || sync.id->verbs->device == nullptr) return std::nullopt;
  return std::string(ibv_get_device_name(sync.id->verbs->device));
}

std::optional<CmAddress> parse_literal(const std::string& host, std::uint16_t port) {
  CmAddress out;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  if (::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    return out;
  }
  // IPv6, possibly with a %zone: getaddrinfo with NUMERICHOST understands both.
  addrinfo hints{};
  hints.ai_family = AF_INET6;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
    return std::nullopt;
  std::memcpy(&out.storage, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  out.set_port(port);
  return out;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

}  // namespace

bool CmAddress::is_wildcard() const {
  if (storage.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (storage.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr;
    return IN6_IS_ADDR_UNSPECIFIED(&a);
  }
  return false;
}

void CmAddress::set_port(std::uint16_t port) {
  if (storage.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  } else if (storage.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
  }
}

std::string format_sockaddr(const sockaddr* address) {
  if (address == nullptr) return {};
  char text[INET6_ADDRSTRLEN] = {};
  if (address->sa_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(address);
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (address->sa_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(address);
    ::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    // Appended piece by piece: GCC 12 at -O3 flags `"x" + std::string&&` (bug 105329).
    std::string s = "[";
    s += text;
    if (a->sin6_scope_id != 0) {
      s += '%';
      s += std::to_string(a->sin6_scope_id);
    }
    s += "]:";
    s += std::to_string(ntohs(a->sin6_port));
    return s;
  }
  return {};
}

std::vector<std::string> rdma_device_names() {
  std::vector<std::string> names;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return names;
  for (int i = 0; i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return names;
}

std::string rdma_device_transport(const std::string& device) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return {};
  std::string transport;
  for (int i = 0; i < n && transport.empty(); ++i) {
    if (device != ibv_get_device_name(list[i])) continue;
    if (list[i]->transport_type == IBV_TRANSPORT_IWARP) {
      transport = "iwarp";
      break;
    }
    transport = "ib";
    if (ibv_context* context = ibv_open_device(list[i])) {
      ibv_port_attr port{};
      if (ibv_query_port(context, 1, &port) == 0 && port.link_layer == IBV_LINK_LAYER_ETHERNET) {
        transport = "roce";
      }
      ibv_close_device(context);
    }
  }
  ibv_free_device_list(list);
  return transport;
}

std::optional<std::string> device_of_address(const sockaddr* address) {
  if (address == nullptr) return std::nullopt;
  return bind_device(address);
}

Expected<CmAddress, std::string> first_address_of_device(const std::string& device) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    return unexpected("cannot list the network interfaces: " + errno_sentence(errno));
  }
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
  for (const int family : {AF_INET, AF_INET6}) {
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != family) continue;
      if ((i->ifa_flags & IFF_UP) == 0) continue;
      const auto owner = bind_device(i->ifa_addr);
      if (owner && *owner == device) {
        CmAddress out;
        std::memcpy(&out.storage, i->ifa_addr, length_of(i->ifa_addr));
        return out;
      }
    }
  }
  return unexpected("RDMA device " + device +
                    " has no IP address rdma_cm can use (give its network interface an "
                    "address, e.g. 'ip addr add', and bring it up)");
}

Expected<CmAddress, std::string> resolve_verbs_host(const std::string& host, std::uint16_t port) {
  if (auto literal = parse_literal(host, port)) return *literal;
  const auto devices = rdma_device_names();
  for (const auto& d : devices) {
    if (d != host) continue;
    auto address = first_address_of_device(d);
    if (!address) return unexpected(address.error());
    address->set_port(port);
    return *address;
  }
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return unexpected("'" + host +
                      "' is not an IP address, an RDMA device (present: " + joined(devices) +
                      ") or a host name that resolves (" + ::gai_strerror(rc) + ")");
  }
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, &::freeaddrinfo);
  for (const int family : {AF_INET, AF_INET6}) {
    for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
      if (a->ai_family != family) continue;
      CmAddress out;
      std::memcpy(&out.storage, a->ai_addr, a->ai_addrlen);
      out.set_port(port);
      return out;
    }
  }
  return unexpected("host name '" + host + "' has no IPv4 or IPv6 address");
}

std::string errno_sentence(int err) {
  return runtime::errno_text(err);
}

}  // namespace rdma_interop::transport::verbs
