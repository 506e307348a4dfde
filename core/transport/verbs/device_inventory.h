// device_inventory.h - one RDMA device of this node as a value: what it is, how to reach it,
// what it can do. For an interop lab's report and for a runner that pairs devices.
//
// query_device_inventory(name) opens the device and asks, through rdma-core and the kernel:
//   identity      ibv_query_device(_ex): fw_ver, node and system image GUIDs, vendor ids,
//                 hw_ver; the transport (IBV_TRANSPORT_IWARP or IB) from ibv_device
//   driver        the kernel driver ("siw", "rxe", "mlx5", "irdma", ...) from RDMA netlink: the
//                 uverbs chardev's driver id (rdma_nldev.h), the value rdma-core picks its
//                 provider by. When netlink cannot tell, the basename of the
//                 /sys/class/infiniband/<name>/device/driver symlink; else "" (driver_source
//                 says which). That symlink names the parent device's driver, often the NIC's
//                 PCI driver rather than the RDMA one, and soft devices (siw, rxe) have none
//                 (the guest's 6.1 kernel shows no device/ link for them): it is reported on
//                 its own too, as bus_driver.
//   ports         ibv_query_port: state, physical state, MTU, LID, link layer; the GID table
//                 (ibv_query_gid_table: each valid entry, its type and netdev ifindex)
//   netdev        each port's network interface and its IP addresses (getifaddrs): from RDMA
//                 netlink (RDMA_NLDEV_CMD_PORT_GET, what `rdma link` prints), the only source
//                 for iWARP, whose GID entries carry no netdev; when netlink fails, the
//                 ndev_ifindex of the port's RoCE GID entries; else none, with the reason
//   kind          "iwarp" (iWARP transport), "ib" (IB transport on InfiniBand ports), or for
//                 IB transport on Ethernet ports "roce-v2" when any GID entry is RoCE v2,
//                 "roce-v1" when the entries are RoCE v1 only, and "roce" when the GID table is
//                 empty (nothing tells the version; such a port cannot connect anyway).
//                 Two devices can talk only if their kinds are equal
//   limits        ibv_query_device: max_qp, max_cq, ... as the device states them
//   capabilities  each asked for real where a verb can ask, with a sentence (and the errno
//                 text when not): xrc (ibv_open_xrcd, query_xrc_support in xrc_verbs.h), srq
//                 (ibv_create_srq), ud (ibv_create_qp IBV_QPT_UD; iWARP has none), odp
//                 (IBV_ODP_SUPPORT in odp_caps and an ibv_reg_mr with IBV_ACCESS_ON_DEMAND),
//                 memory windows (ibv_alloc_mw), atomics (atomic_cap: an atomic needs a
//                 connected peer, so this one is the device's word only)
// Everything created to ask (PD, CQ, SRQ, QP, MR, MW, XRC domain) is destroyed before the call
// returns, also on every error path.
//
// Threading: no shared state; each call opens and closes its own device context and netlink
// socket, so any thread may call it. A call takes milliseconds (a few verbs round trips).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/util/expected.h"

namespace rdma_interop::transport::verbs {

// One valid GID table entry.
struct GidEntry {
  std::uint32_t index = 0;
  std::string gid;   // inet_ntop text: "fe80::1cef:71ff:fef3:dfb4", "::ffff:10.9.0.1"
  std::string type;  // "ib", "roce-v1", "roce-v2" (iWARP devices report "ib")
  std::optional<std::uint32_t> netdev_index;  // ndev_ifindex; RoCE only
};

// An IP address of a port's network interface, as getifaddrs lists it.
struct IpAddress {
  std::string family;   // "ipv4" or "ipv6"
  std::string address;  // "10.0.2.15", "fe80::5054:ff:fe12:3456" (no %zone)
  unsigned prefix = 0;  // from the netmask
};

struct Netdev {
  std::string name;
  std::uint32_t index = 0;
  std::string source;  // "netlink" (RDMA_NLDEV_CMD_PORT_GET) or "gid" (a RoCE GID entry)
  std::vector<IpAddress> addresses;  // IPv4 first, then IPv6; empty when it has none
};

struct PortReport {
  std::uint32_t number = 0;          // from 1
  std::string state;                 // "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER", "NOP"
  std::string phys_state;            // "LINK_UP", "DISABLED", "POLLING", ...; "" when not reported
  std::uint32_t active_mtu = 0;      // octets: 256 .. 4096
  std::optional<std::uint16_t> lid;  // InfiniBand link layer only
  std::string link_layer;            // "InfiniBand" or "Ethernet"
  std::vector<std::string> roce_versions;  // Ethernet on IB transport: "roce-v1", "roce-v2"
  std::vector<GidEntry> gids;
  std::string gid_error;  // why the GID table could not be read; "" when it was
  std::optional<Netdev> netdev;
  std::string netdev_unknown;  // why netdev is absent
};

// As ibv_query_device states them.
struct DeviceLimits {
  std::uint64_t max_mr_size = 0;
  int max_qp = 0;
  int max_qp_wr = 0;
  int max_sge = 0;
  int max_cq = 0;
  int max_cqe = 0;
  int max_mr = 0;
  int max_pd = 0;
  int max_qp_rd_atom = 0;
  int max_qp_init_rd_atom = 0;
  int max_srq = 0;
};

struct Capability {
  bool supported = false;
  int error = 0;       // the errno of the attempt that failed; 0 when none did
  std::string detail;  // one sentence: what was asked and what came back
};

struct DeviceCapabilities {
  Capability xrc;
  Capability srq;
  Capability ud;
  Capability odp;
  Capability memory_windows;
  Capability atomics;
};

struct DeviceReport {
  std::string name;
  std::string kind;           // "iwarp", "ib", "roce-v2", "roce-v1", "roce" (see above)
  std::string transport;      // "iwarp" or "ib" (ibv_device's transport_type)
  std::string node_type;      // ibv_node_type_str: "RNIC", "CA", ...
  std::string driver;         // "siw"; "" when unknown
  std::string driver_source;  // "netlink", "sysfs" or "unknown: <why>"
  std::string bus_driver;     // the device/driver symlink's basename; "" when there is none
  std::string node_guid;      // "5054:00ff:fe12:3456", as ibv_devinfo prints it
  std::string sys_image_guid;
  std::string fw_ver;
  std::uint32_t vendor_id = 0;
  std::uint32_t vendor_part_id = 0;
  std::uint32_t hw_ver = 0;
  DeviceLimits limits;
  std::vector<PortReport> ports;
  DeviceCapabilities capabilities;
};

// Why a device could not be reported at all: not present (ENODEV), or opening or querying it
// failed (its errno), with a sentence.
struct InventoryError {
  int error = 0;
  std::string detail;
};

// The report of the device named `device` ("siw0"). A part that cannot be read (a GID table,
// a netdev) is marked in the report; only a device that is absent or cannot be opened or
// queried is an error.
Expected<DeviceReport, InventoryError> query_device_inventory(const std::string& device);

}  // namespace rdma_interop::transport::verbs
