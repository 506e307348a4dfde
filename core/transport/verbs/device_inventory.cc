#include "core/transport/verbs/device_inventory.h"

#include <arpa/inet.h>
#include <endian.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "core/runtime/socket_util.h"
#include "core/transport/verbs/rdma_nldev.h"
#include "core/transport/verbs/xrc_verbs.h"

namespace rdma_interop::transport::verbs {
namespace {

// "Operation not supported (EOPNOTSUPP)"; a provider that failed without setting errno says so.
std::string errno_text(int e) {
  return e == 0 ? std::string("failed without an errno") : runtime::errno_text(e);
}

// A verb that failed: its errno and "<what> failed: <errno text>".
Capability failed(int e, const std::string& what, const std::string& more = {}) {
  Capability c;
  c.error = e;
  c.detail = what + " failed: " + errno_text(e) + more;
  return c;
}

Capability succeeded(const std::string& detail) {
  Capability c;
  c.supported = true;
  c.detail = detail;
  return c;
}

struct DeviceListDeleter {
  void operator()(ibv_device** list) const { ibv_free_device_list(list); }
};
struct ContextDeleter {
  void operator()(ibv_context* c) const { ibv_close_device(c); }
};
struct PdDeleter {
  void operator()(ibv_pd* pd) const { ibv_dealloc_pd(pd); }
};
struct CqDeleter {
  void operator()(ibv_cq* cq) const { ibv_destroy_cq(cq); }
};
using DeviceList = std::unique_ptr<ibv_device*, DeviceListDeleter>;
using Context = std::unique_ptr<ibv_context, ContextDeleter>;
using Pd = std::unique_ptr<ibv_pd, PdDeleter>;
using Cq = std::unique_ptr<ibv_cq, CqDeleter>;

// ibv_devinfo's form: four groups of four hex digits, most significant first.
std::string guid_text(__be64 guid) {
  const std::uint64_t g = be64toh(guid);
  char text[24];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48) & 0xffff,
                static_cast<unsigned>(g >> 32) & 0xffff, static_cast<unsigned>(g >> 16) & 0xffff,
                static_cast<unsigned>(g) & 0xffff);
  return text;
}

std::string port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "STATE_" + std::to_string(static_cast<int>(s));
}

// IBTA's PortPhysicalState values, named as iproute2's `rdma link` names them.
std::string phys_state_name(std::uint8_t s) {
  switch (s) {
    case 0:
      return "";  // not reported
    case 1:
      return "SLEEP";
    case 2:
      return "POLLING";
    case 3:
      return "DISABLED";
    case 4:
      return "PORT_CONFIGURATION_TRAINING";
    case 5:
      return "LINK_UP";
    case 6:
      return "LINK_ERROR_RECOVERY";
    case 7:
      return "PHY_TEST";
  }
  return "PHYS_STATE_" + std::to_string(s);
}

std::uint32_t mtu_octets(ibv_mtu m) {
  const int v = static_cast<int>(m);
  return v >= IBV_MTU_256 && v <= IBV_MTU_4096 ? 256u << (v - IBV_MTU_256) : 0;
}

std::string gid_type_name(std::uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_IB:
      return "ib";
    case IBV_GID_TYPE_ROCE_V1:
      return "roce-v1";
    case IBV_GID_TYPE_ROCE_V2:
      return "roce-v2";
  }
  return "type " + std::to_string(type);
}

std::string gid_text(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

bool gid_is_zero(const ibv_gid& gid) {
  for (auto b : gid.raw) {
    if (b != 0) return false;
  }
  return true;
}

unsigned prefix_of(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  unsigned bits = 0;
  if (mask->sa_family == AF_INET) {
    bits = static_cast<unsigned>(
        std::popcount(reinterpret_cast<const sockaddr_in*>(mask)->sin_addr.s_addr));
  } else if (mask->sa_family == AF_INET6) {
    for (auto b : reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr.s6_addr) {
      bits += static_cast<unsigned>(std::popcount(b));
    }
  }
  return bits;
}

// Every IP address getifaddrs lists, by interface name: IPv4 first, then IPv6.
std::map<std::string, std::vector<IpAddress>> addresses_by_interface() {
  std::map<std::string, std::vector<IpAddress>> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> guard(list, &::freeifaddrs);
  for (const int family : {AF_INET, AF_INET6}) {
    for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != family) continue;
      IpAddress a;
      char text[INET6_ADDRSTRLEN] = {};
      if (family == AF_INET) {
        const auto& in = reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
        ::inet_ntop(AF_INET, &in, text, sizeof text);
        a.family = "ipv4";
      } else {
        const auto& in6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
        ::inet_ntop(AF_INET6, &in6, text, sizeof text);
        a.family = "ipv6";
      }
      a.address = text;
      a.prefix = prefix_of(i->ifa_netmask);
      out[i->ifa_name].push_back(std::move(a));
    }
  }
  return out;
}

// The basename of /sys/class/infiniband/<device>/device/driver; "" when there is none.
std::string sysfs_bus_driver(const std::string& device) {
  std::error_code ec;
  const auto target = std::filesystem::read_symlink(
      std::filesystem::path("/sys/class/infiniband") / device / "device" / "driver", ec);
  return ec ? std::string() : target.filename().string();
}

// Every valid GID entry of `port`, from the whole table or, where the table query left the port
// out (kernels before 5.11 skip ports that are neither IB nor RoCE: iWARP), one index at a time.
// `table_error` is ibv_query_gid_table's errno (0 when it answered).
void read_gids(ibv_context* context, const std::vector<ibv_gid_entry>& table, int table_error,
               const ibv_port_attr& attr, PortReport& port) {
  for (const auto& e : table) {
    if (e.port_num != port.number) continue;
    port.gids.push_back({e.gid_index, gid_text(e.gid), gid_type_name(e.gid_type),
                         e.ndev_ifindex != 0 ? std::optional(e.ndev_ifindex) : std::nullopt});
  }
  if (!port.gids.empty() || attr.gid_tbl_len <= 0) return;
  int last_error = 0;
  for (int i = 0; i < attr.gid_tbl_len && i < 1024; ++i) {
    ibv_gid_entry e{};
    const int rc = ibv_query_gid_ex(context, port.number, static_cast<std::uint32_t>(i), &e, 0);
    if (rc == 0) {
      if (gid_is_zero(e.gid)) continue;
      port.gids.push_back({e.gid_index, gid_text(e.gid), gid_type_name(e.gid_type),
                           e.ndev_ifindex != 0 ? std::optional(e.ndev_ifindex) : std::nullopt});
      continue;
    }
    if (rc == ENODATA) continue;  // an empty entry
    // The entry API refused (an old kernel): the legacy call has the GID but not its type.
    ibv_gid gid{};
    if (ibv_query_gid(context, static_cast<std::uint8_t>(port.number), i, &gid) == 0) {
      if (!gid_is_zero(gid))
        port.gids.push_back({static_cast<std::uint32_t>(i), gid_text(gid), "", std::nullopt});
      continue;
    }
    last_error = rc;
  }
  if (port.gids.empty() && last_error != 0) {
    port.gid_error = "no GID entry could be read: ibv_query_gid_ex: " + errno_text(last_error);
    if (table_error != 0) port.gid_error += "; ibv_query_gid_table: " + errno_text(table_error);
  }
}

void set_netdev(PortReport& port, std::uint32_t index, const std::string& name, const char* source,
                const std::map<std::string, std::vector<IpAddress>>& addresses) {
  Netdev n;
  n.name = name;
  n.index = index;
  n.source = source;
  if (auto it = addresses.find(name); it != addresses.end()) n.addresses = it->second;
  port.netdev = std::move(n);
}

std::string rc_odp_text(std::uint32_t caps) {
  std::string s;
  const std::pair<std::uint32_t, const char*> names[] = {
      {IBV_ODP_SUPPORT_SEND, "send"},     {IBV_ODP_SUPPORT_RECV, "recv"},
      {IBV_ODP_SUPPORT_WRITE, "write"},   {IBV_ODP_SUPPORT_READ, "read"},
      {IBV_ODP_SUPPORT_ATOMIC, "atomic"}, {IBV_ODP_SUPPORT_SRQ_RECV, "srq_recv"}};
  for (const auto& [bit, name] : names) {
    if (!(caps & bit)) continue;
    if (!s.empty()) s += ' ';  // not `" " + std::string`: GCC 12 -Wrestrict bug 105329
    s += name;
  }
  return s.empty() ? "none" : s;
}

Capability ask_srq(ibv_pd* pd, const ibv_device_attr& attr) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = attr.max_srq_wr > 0 ? std::min<std::uint32_t>(16, attr.max_srq_wr) : 16;
  init.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd, &init);
  const int e = errno;
  const std::string limits = "; max_srq " + std::to_string(attr.max_srq);
  if (srq == nullptr) return failed(e, "ibv_create_srq", limits);
  ibv_destroy_srq(srq);
  return succeeded("ibv_create_srq succeeded" + limits);
}

Capability ask_ud(ibv_pd* pd, ibv_cq* cq, bool iwarp) {
  ibv_qp_init_attr init{};
  init.send_cq = cq;
  init.recv_cq = cq;
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = 1;
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &init);
  if (qp == nullptr) {
    return failed(errno, "ibv_create_qp(IBV_QPT_UD)",
                  iwarp ? "; iWARP has no unreliable datagram service" : "");
  }
  ibv_destroy_qp(qp);
  return succeeded("ibv_create_qp(IBV_QPT_UD) succeeded");
}

Capability ask_odp(ibv_pd* pd, const ibv_device_attr_ex& attr, bool have_ex) {
  const bool flag = have_ex && (attr.odp_caps.general_caps & IBV_ODP_SUPPORT) != 0;
  const std::string said =
      !have_ex ? "ibv_query_device_ex unavailable"
      : flag   ? "IBV_ODP_SUPPORT, RC: " + rc_odp_text(attr.odp_caps.per_transport_caps.rc_odp_caps)
               : "no IBV_ODP_SUPPORT in odp_caps";
  // Asked for real: an on-demand registration of one page, which the kernel refuses when the
  // device has no ODP (ib_check_mr_access; Linux 6.1 answers EINVAL).
  const long page = ::sysconf(_SC_PAGESIZE) > 0 ? ::sysconf(_SC_PAGESIZE) : 4096;
  void* buffer = std::aligned_alloc(static_cast<std::size_t>(page), static_cast<std::size_t>(page));
  if (buffer == nullptr) return failed(ENOMEM, "a page for ibv_reg_mr", "; " + said);
  ibv_mr* mr = ibv_reg_mr(pd, buffer, static_cast<std::size_t>(page),
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  const int e = errno;
  Capability c;
  if (mr == nullptr) {
    c = failed(e, "ibv_reg_mr(IBV_ACCESS_ON_DEMAND)", "; " + said);
  } else {
    ibv_dereg_mr(mr);
    c = flag ? succeeded("ibv_reg_mr(IBV_ACCESS_ON_DEMAND) succeeded; " + said)
             : succeeded("ibv_reg_mr(IBV_ACCESS_ON_DEMAND) succeeded, though the device states " +
                         said);
  }
  std::free(buffer);
  return c;
}

Capability ask_memory_windows(ibv_pd* pd, const ibv_device_attr& attr) {
  const auto flags = attr.device_cap_flags;
  const bool type2 = (flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) != 0;
  std::string said = "max_mw " + std::to_string(attr.max_mw);
  if (flags & IBV_DEVICE_MEM_WINDOW) said += ", IBV_DEVICE_MEM_WINDOW";
  if (flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A) said += ", TYPE_2A";
  if (flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) said += ", TYPE_2B";
  const char* what = type2 ? "ibv_alloc_mw(IBV_MW_TYPE_2)" : "ibv_alloc_mw(IBV_MW_TYPE_1)";
  ibv_mw* mw = ibv_alloc_mw(pd, type2 ? IBV_MW_TYPE_2 : IBV_MW_TYPE_1);
  if (mw == nullptr) return failed(errno, what, "; " + said);
  ibv_dealloc_mw(mw);
  return succeeded(std::string(what) + " succeeded; " + said);
}

Capability ask_atomics(const ibv_device_attr& attr) {
  switch (attr.atomic_cap) {
    case IBV_ATOMIC_NONE:
      return Capability{false, 0, "atomic_cap IBV_ATOMIC_NONE: the device does no RDMA atomics"};
    case IBV_ATOMIC_HCA:
      return succeeded("atomic_cap IBV_ATOMIC_HCA: atomic among this device's QPs");
    case IBV_ATOMIC_GLOB:
      return succeeded("atomic_cap IBV_ATOMIC_GLOB: atomic with the CPU and other devices too");
  }
  return succeeded("atomic_cap " + std::to_string(static_cast<int>(attr.atomic_cap)));
}

Capability ask_xrc(const std::string& device) {
  const auto s = query_xrc_support(device);
  if (!s) return Capability{false, ENODEV, "the device went away before ibv_open_xrcd"};
  return Capability{s->supported, s->error, s->detail};
}

}  // namespace

Expected<DeviceReport, InventoryError> query_device_inventory(const std::string& device) {
  int n = 0;
  DeviceList list(ibv_get_device_list(&n));
  if (!list) {
    const int e = errno;
    return unexpected(InventoryError{e, "ibv_get_device_list failed: " + errno_text(e)});
  }
  ibv_device* found = nullptr;
  for (int i = 0; i < n; ++i) {
    if (device == ibv_get_device_name(list.get()[i])) found = list.get()[i];
  }
  if (found == nullptr) {
    return unexpected(InventoryError{
        ENODEV, "no RDMA device '" + device + "' (ibv_get_device_list does not list it)"});
  }

  DeviceReport r;
  r.name = device;
  const bool iwarp = found->transport_type == IBV_TRANSPORT_IWARP;
  r.transport = iwarp ? "iwarp" : "ib";
  r.node_type = ibv_node_type_str(found->node_type);

  Context context(ibv_open_device(found));
  if (!context) {
    const int e = errno;
    return unexpected(InventoryError{e, "cannot open " + device + ": " + errno_text(e)});
  }
  ibv_device_attr_ex ex{};
  const bool have_ex = ibv_query_device_ex(context.get(), nullptr, &ex) == 0;
  if (!have_ex && ibv_query_device(context.get(), &ex.orig_attr) != 0) {
    const int e = errno;
    return unexpected(InventoryError{e, "ibv_query_device on " + device + ": " + errno_text(e)});
  }
  const ibv_device_attr& attr = ex.orig_attr;
  r.fw_ver = std::string(attr.fw_ver, ::strnlen(attr.fw_ver, sizeof attr.fw_ver));
  r.node_guid = guid_text(attr.node_guid);
  r.sys_image_guid = guid_text(attr.sys_image_guid);
  r.vendor_id = attr.vendor_id;
  r.vendor_part_id = attr.vendor_part_id;
  r.hw_ver = attr.hw_ver;
  r.limits = DeviceLimits{
      attr.max_mr_size, attr.max_qp, attr.max_qp_wr, attr.max_sge,        attr.max_cq,
      attr.max_cqe,     attr.max_mr, attr.max_pd,    attr.max_qp_rd_atom, attr.max_qp_init_rd_atom,
      attr.max_srq};

  // Driver and netdevs: RDMA netlink first (see the header for why).
  r.bus_driver = sysfs_bus_driver(device);
  std::optional<NldevDevice> nl;
  std::string nl_error;
  if (auto devices = nldev_devices()) {
    for (const auto& d : *devices) {
      if (d.name == device) nl = d;
    }
    if (!nl) nl_error = "RDMA netlink does not list " + device;
  } else {
    nl_error = devices.error().detail;
  }
  if (nl && nl->driver_id && *nl->driver_id != 0) {
    r.driver = driver_name(*nl->driver_id);
    r.driver_source = "netlink";
  } else if (!r.bus_driver.empty()) {
    r.driver = r.bus_driver;
    r.driver_source = "sysfs";
  } else {
    r.driver_source =
        "unknown: " +
        (nl ? (nl->driver_id ? "the kernel's driver id is unknown" : nl->driver_error) : nl_error) +
        ", and there is no device/driver symlink in sysfs";
  }
  std::map<std::uint32_t, NldevPort> nl_ports;
  if (nl) {
    if (auto ports = nldev_ports(nl->index)) {
      for (const auto& p : *ports) nl_ports[p.port] = p;
    } else {
      nl_error = ports.error().detail;
    }
  }

  // Ports and their GIDs.
  std::vector<ibv_port_attr> port_attrs(attr.phys_port_cnt);
  std::size_t gid_slots = 0;
  for (std::uint32_t p = 1; p <= attr.phys_port_cnt; ++p) {
    if (ibv_query_port(context.get(), static_cast<std::uint8_t>(p), &port_attrs[p - 1]) != 0) {
      const int e = errno;
      return unexpected(InventoryError{
          e, "ibv_query_port " + std::to_string(p) + " on " + device + ": " + errno_text(e)});
    }
    gid_slots += static_cast<std::size_t>(std::max(port_attrs[p - 1].gid_tbl_len, 0));
  }
  std::vector<ibv_gid_entry> table(gid_slots);
  const ssize_t got =
      gid_slots == 0 ? 0 : ibv_query_gid_table(context.get(), table.data(), table.size(), 0);
  table.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  const auto addresses = addresses_by_interface();
  bool any_v1 = false, any_v2 = false, any_ethernet = false;
  for (std::uint32_t p = 1; p <= attr.phys_port_cnt; ++p) {
    const ibv_port_attr& pa = port_attrs[p - 1];
    PortReport port;
    port.number = p;
    port.state = port_state_name(pa.state);
    port.phys_state = phys_state_name(pa.phys_state);
    port.active_mtu = mtu_octets(pa.active_mtu);
    const bool ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    any_ethernet = any_ethernet || ethernet;
    // IBV_LINK_LAYER_UNSPECIFIED is InfiniBand (older providers leave it unset).
    port.link_layer = ethernet ? "Ethernet" : "InfiniBand";
    if (!ethernet) port.lid = pa.lid;
    read_gids(context.get(), table, got < 0 ? static_cast<int>(-got) : 0, pa, port);
    if (ethernet && !iwarp) {
      for (const auto& g : port.gids) {
        if (g.type == "roce-v1") any_v1 = true;
        if (g.type == "roce-v2") any_v2 = true;
      }
      for (const char* v : {"roce-v1", "roce-v2"}) {
        for (const auto& g : port.gids) {
          if (g.type == v) {
            port.roce_versions.push_back(v);
            break;
          }
        }
      }
    }
    if (auto it = nl_ports.find(p); it != nl_ports.end() && !it->second.netdev.empty()) {
      set_netdev(port, it->second.netdev_index.value_or(0), it->second.netdev, "netlink",
                 addresses);
    } else {
      const std::string why = nl && nl_error.empty() ? "RDMA netlink names no netdev for this port"
                                                     : "RDMA netlink failed (" + nl_error + ")";
      std::optional<std::uint32_t> named;
      for (const auto& g : port.gids) {
        if (!g.netdev_index) continue;
        named = g.netdev_index;
        char name[IF_NAMESIZE] = {};
        if (::if_indextoname(*g.netdev_index, name) != nullptr) {
          set_netdev(port, *g.netdev_index, name, "gid", addresses);
          break;
        }
      }
      if (!port.netdev) {
        port.netdev_unknown =
            why + (named ? ", and the GID entries name ifindex " + std::to_string(*named) +
                               ", which this network namespace does not have"
                         : std::string(", and no GID entry names one") +
                               (iwarp ? " (iWARP GID entries never do)" : ""));
      }
    }
    r.ports.push_back(std::move(port));
  }
  r.kind = iwarp           ? "iwarp"
           : !any_ethernet ? "ib"
           : any_v2        ? "roce-v2"
           : any_v1        ? "roce-v1"
                           : "roce";

  // Capabilities, asked for real on a scratch PD and CQ destroyed on return.
  auto& caps = r.capabilities;
  caps.xrc = ask_xrc(device);
  caps.atomics = ask_atomics(attr);
  Pd pd(ibv_alloc_pd(context.get()));
  if (!pd) {
    const Capability no_pd = failed(errno, "ibv_alloc_pd", "; nothing could be created to ask");
    caps.srq = caps.ud = caps.odp = caps.memory_windows = no_pd;
    return r;
  }
  caps.srq = ask_srq(pd.get(), attr);
  caps.odp = ask_odp(pd.get(), ex, have_ex);
  caps.memory_windows = ask_memory_windows(pd.get(), attr);
  Cq cq(ibv_create_cq(context.get(), 4, nullptr, nullptr, 0));
  caps.ud = cq ? ask_ud(pd.get(), cq.get(), iwarp)
               : failed(errno, "ibv_create_cq", "; the UD QP needs one");
  return r;
}

}  // namespace rdma_interop::transport::verbs
