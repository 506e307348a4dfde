// cm_address.h - the addresses rdma_cm works with: what a verbs URI's host names, how an
// RDMA device maps to an IP address, and how addresses print.
//
// rdma_cm identifies endpoints by IP address (for iWARP the TCP address; for RoCE the GID
// derived from it): an address belongs to the RDMA device whose network interface holds it.
// These helpers make short-lived synchronous cm_ids of their own (no event channel) and use
// nothing from the provider's event thread; they may be called from any thread.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/util/expected.h"

namespace rdma_interop::transport::verbs {

// An IPv4 or IPv6 socket address as rdma_cm takes it.
struct CmAddress {
  sockaddr_storage storage{};
  sockaddr* get() { return reinterpret_cast<sockaddr*>(&storage); }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  bool is_wildcard() const;  // 0.0.0.0 or ::
  void set_port(std::uint16_t port);
};

// "10.0.2.15:7000", "[fe80::1%2]:7000"; "" for a null or non-IP address.
std::string format_sockaddr(const sockaddr* address);

// The names of the RDMA devices present ("siw0", "rxe0"), from ibv_get_device_list.
// Empty when there are none or rdma-core finds no provider for them.
std::vector<std::string> rdma_device_names();

// "iwarp", "roce" or "ib" for a device present (port 1's link layer tells RoCE from IB);
// "" when there is no such device.
std::string rdma_device_transport(const std::string& device);

// The device whose interface holds `address` (rdma_bind_addr picks it), or nullopt when
// no RDMA device has it (or rdma_cm is not available).
std::optional<std::string> device_of_address(const sockaddr* address);

// The first address of an interface that rdma_cm binds to `device`: IPv4 addresses first,
// then IPv6, in the order getifaddrs lists them. The error says why there is none.
Expected<CmAddress, std::string> first_address_of_device(const std::string& device);

// A verbs URI host and port to an address: an IPv4 or IPv6 literal as is; the name of an
// RDMA device as that device's first address; anything else as a host name (getaddrinfo,
// first IPv4 then IPv6 answer). The error is a sentence for the user.
Expected<CmAddress, std::string> resolve_verbs_host(const std::string& host, std::uint16_t port);

// "No such device (ENODEV)" - strerror plus the constant's name, as the tcp provider does.
std::string errno_sentence(int err);

}  // namespace rdma_interop::transport::verbs
