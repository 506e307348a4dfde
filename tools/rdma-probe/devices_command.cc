// rdma-probe devices: this node's RDMA devices, each with its kind, driver, ports, network
// interfaces and addresses, limits and capabilities (core/transport/verbs/device_inventory.h
// asks; this file prints).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/transport/verbs/cm_address.h"
#include "core/transport/verbs/device_inventory.h"
#include "core/util/json_text.h"
#include "core/util/printable_text.h"
#include "tools/rdma-probe/commands.h"
#include "tools/rdma-probe/exit_codes.h"

namespace rdma_interop::probe {
namespace {

using json = nlohmann::ordered_json;
using transport::verbs::Capability;
using transport::verbs::DeviceReport;
using transport::verbs::InventoryError;
using transport::verbs::PortReport;

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "";
  return name;
}

json text_or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

json capability_json(const Capability& c) {
  return {{"supported", c.supported},
          {"errno", c.error == 0 ? json(nullptr) : json(c.error)},
          {"detail", c.detail}};
}

json port_json(const PortReport& p) {
  json gids = json::array();
  for (const auto& g : p.gids) {
    gids.push_back({{"index", g.index},
                    {"gid", g.gid},
                    {"type", text_or_null(g.type)},
                    {"netdev_index", g.netdev_index ? json(*g.netdev_index) : json(nullptr)}});
  }
  json netdev = nullptr;
  json addresses = json::array();  // as `ip -brief address` shows them: "10.0.2.15/24"
  if (p.netdev) {
    netdev = {{"name", p.netdev->name}, {"ifindex", p.netdev->index}, {"source", p.netdev->source}};
    for (const auto& a : p.netdev->addresses) {
      addresses.push_back(a.address + "/" + std::to_string(a.prefix));
    }
  }
  return {{"port", p.number},
          {"state", p.state},
          {"phys_state", text_or_null(p.phys_state)},
          {"active_mtu", p.active_mtu},
          {"lid", p.lid ? json(*p.lid) : json(nullptr)},
          {"link_layer", p.link_layer},
          {"roce_versions", p.roce_versions},
          {"netdev", netdev},
          {"netdev_unknown", text_or_null(p.netdev_unknown)},
          {"addresses", addresses},
          {"gids", gids},
          {"gid_error", text_or_null(p.gid_error)}};
}

json device_json(const DeviceReport& d) {
  const auto& l = d.limits;
  json ports = json::array();
  for (const auto& p : d.ports) ports.push_back(port_json(p));
  const auto& c = d.capabilities;
  return {{"name", d.name},
          {"kind", d.kind},
          {"transport", d.transport},
          {"node_type", d.node_type},
          {"driver", text_or_null(d.driver)},
          {"driver_source", d.driver_source},
          {"bus_driver", text_or_null(d.bus_driver)},
          {"node_guid", d.node_guid},
          {"sys_image_guid", d.sys_image_guid},
          {"fw_ver", d.fw_ver},
          {"vendor_id", d.vendor_id},
          {"vendor_part_id", d.vendor_part_id},
          {"hw_ver", d.hw_ver},
          {"limits",
           {{"max_qp", l.max_qp},
            {"max_qp_wr", l.max_qp_wr},
            {"max_sge", l.max_sge},
            {"max_cq", l.max_cq},
            {"max_cqe", l.max_cqe},
            {"max_mr", l.max_mr},
            {"max_mr_size", l.max_mr_size},
            {"max_pd", l.max_pd},
            {"max_srq", l.max_srq},
            {"max_qp_rd_atom", l.max_qp_rd_atom},
            {"max_qp_init_rd_atom", l.max_qp_init_rd_atom}}},
          {"ports", ports},
          {"capabilities",
           {{"xrc", capability_json(c.xrc)},
            {"srq", capability_json(c.srq)},
            {"ud", capability_json(c.ud)},
            {"odp", capability_json(c.odp)},
            {"memory_windows", capability_json(c.memory_windows)},
            {"atomics", capability_json(c.atomics)}}}};
}

// Device strings reach the terminal only through printable(): a name or firmware string is
// whatever the driver chose.
std::string p(const std::string& s) {
  return printable(s);
}

void print_port(const PortReport& port) {
  std::string line = "  port " + std::to_string(port.number) + "  " + port.state;
  if (!port.phys_state.empty()) line += " (" + port.phys_state + ")";
  line += "  " + port.link_layer;
  for (const auto& v : port.roce_versions) line += " " + v;
  line += "  mtu " + std::to_string(port.active_mtu);
  if (port.lid) line += "  lid " + std::to_string(*port.lid);
  std::printf("%s\n", line.c_str());
  if (port.netdev) {
    std::string addresses;
    for (const auto& a : port.netdev->addresses) {
      // Piece by piece: GCC 12 -O3 flags `" " + std::string&&` (-Wrestrict, bug 105329).
      addresses += ' ';
      addresses += p(a.address);
      addresses += '/';
      addresses += std::to_string(a.prefix);
    }
    std::printf("    netdev %s (ifindex %u, from %s):%s\n", p(port.netdev->name).c_str(),
                port.netdev->index, port.netdev->source.c_str(),
                addresses.empty() ? " no IP address" : addresses.c_str());
  } else {
    std::printf("    netdev unknown: %s\n", p(port.netdev_unknown).c_str());
  }
  for (const auto& g : port.gids) {
    std::printf("    gid %-3u %-40s %s\n", g.index, p(g.gid).c_str(),
                g.type.empty() ? "(type unknown)" : g.type.c_str());
  }
  if (!port.gid_error.empty()) std::printf("    gids: %s\n", p(port.gid_error).c_str());
}

void print_device(const DeviceReport& d) {
  std::printf("%s  kind %s  driver %s  (%s, transport %s)\n", p(d.name).c_str(), d.kind.c_str(),
              d.driver.empty() ? "unknown" : p(d.driver).c_str(), p(d.node_type).c_str(),
              d.transport.c_str());
  if (d.driver.empty() || d.driver_source != "netlink") {
    std::printf("  driver from %s\n", p(d.driver_source).c_str());
  }
  std::printf("  fw %s  hw_ver 0x%x  vendor 0x%x part %u  node_guid %s  sys_image_guid %s%s\n",
              p(d.fw_ver).c_str(), d.hw_ver, d.vendor_id, d.vendor_part_id, d.node_guid.c_str(),
              d.sys_image_guid.c_str(),
              d.bus_driver.empty() ? "" : ("  bus driver " + p(d.bus_driver)).c_str());
  for (const auto& port : d.ports) print_port(port);
  const auto& l = d.limits;
  std::printf("  limits  qp %d  qp_wr %d  sge %d  cq %d  cqe %d  mr %d  pd %d  srq %d\n", l.max_qp,
              l.max_qp_wr, l.max_sge, l.max_cq, l.max_cqe, l.max_mr, l.max_pd, l.max_srq);
  std::printf("          qp_rd_atom %d  qp_init_rd_atom %d  mr_size 0x%llx\n", l.max_qp_rd_atom,
              l.max_qp_init_rd_atom, static_cast<unsigned long long>(l.max_mr_size));
  std::printf("  capabilities\n");
  const auto& c = d.capabilities;
  const std::pair<const char*, const Capability*> rows[] = {{"xrc", &c.xrc},
                                                            {"srq", &c.srq},
                                                            {"ud", &c.ud},
                                                            {"odp", &c.odp},
                                                            {"memory windows", &c.memory_windows},
                                                            {"atomics", &c.atomics}};
  for (const auto& [name, cap] : rows) {
    std::printf("    %-15s %-3s (%s)\n", name, cap->supported ? "yes" : "no",
                p(cap->detail).c_str());
  }
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

int run_devices(const DevicesOptions& options) {
  const auto present = transport::verbs::rdma_device_names();
  std::vector<std::string> wanted;
  if (options.devices.empty()) {
    wanted = present;
  } else {
    for (const auto& name : options.devices) {
      if (std::find(present.begin(), present.end(), name) == present.end()) {
        print_usage_error("devices",
                          "no RDMA device '" + printable(name) + "' on this node (present: " +
                              (present.empty() ? "none, ibv_get_device_list found no device"
                                               : printable(joined(present))) +
                              ")");
        return kExitUsage;
      }
      if (std::find(wanted.begin(), wanted.end(), name) == wanted.end()) wanted.push_back(name);
    }
  }

  std::vector<Expected<DeviceReport, InventoryError>> reports;
  bool all_ok = true;
  for (const auto& name : wanted) {
    reports.push_back(transport::verbs::query_device_inventory(name));
    all_ok = all_ok && reports.back().has_value();
  }
  const int status = all_ok ? kExitOk : kExitFailed;

  if (options.json) {
    json devices = json::array();
    for (std::size_t i = 0; i < reports.size(); ++i) {
      if (reports[i]) {
        devices.push_back(device_json(*reports[i]));
      } else {
        devices.push_back({{"name", wanted[i]},
                           {"error", reports[i].error().detail},
                           {"errno", reports[i].error().error}});
      }
    }
    json out{{"schema", "rdma-interop/devices/1"}, {"node", host_name()}, {"devices", devices}};
    if (wanted.empty()) out["note"] = "no RDMA device";
    std::cout << json_text(out) << "\n";
    return status;
  }
  if (wanted.empty()) {
    std::printf("no RDMA device on this node (ibv_get_device_list found none)\n");
    return status;
  }
  std::printf("node %s: %zu RDMA device%s\n", p(host_name()).c_str(), wanted.size(),
              wanted.size() == 1 ? "" : "s");
  for (std::size_t i = 0; i < reports.size(); ++i) {
    std::printf("\n");
    if (reports[i]) {
      print_device(*reports[i]);
    } else {
      std::printf("%s  cannot be reported: %s\n", p(wanted[i]).c_str(),
                  p(reports[i].error().detail).c_str());
    }
  }
  return status;
}

}  // namespace rdma_interop::probe
