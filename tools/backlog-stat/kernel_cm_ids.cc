#include "tools/backlog-stat/kernel_cm_ids.h"

#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <system_error>

namespace rdma_interop::backlog_stat {
namespace {

using nlohmann::json;

std::string string_field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_number()) return it->dump();
  return {};
}

std::int64_t integer_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<std::int64_t>() : 0;
}

void collect(const json& j, std::vector<KernelListener>& out) {
  if (j.is_array()) {
    for (const auto& e : j) collect(e, out);
    return;
  }
  if (!j.is_object() || string_field(j, "state") != "LISTEN") return;
  KernelListener k;
  k.device = string_field(j, "ifname");
  k.port = static_cast<std::uint32_t>(integer_field(j, "port"));
  k.local_address = string_field(j, "src-addr");
  // iproute2 before 5.x printed the port on its own.
  if (const auto p = j.find("src-port"); p != j.end() && p->is_number_integer()) {
    k.local_address += ":" + std::to_string(p->get<std::int64_t>());
  }
  k.ps = string_field(j, "ps");
  k.pid = integer_field(j, "pid");
  k.process = string_field(j, "comm");
  out.push_back(std::move(k));
}

}  // namespace

std::string_view status_name(KernelScan::Status s) {
  switch (s) {
    case KernelScan::Status::kOk: return "ok";
    case KernelScan::Status::kNoRdma: return "no_rdma";
    case KernelScan::Status::kToolMissing: return "rdma_tool_missing";
    case KernelScan::Status::kFailed: return "error";
  }
  return "error";
}

Expected<std::vector<KernelListener>, std::string> parse_cm_ids(std::string_view rdma_json) {
  std::vector<KernelListener> out;
  const auto whole = json::parse(rdma_json, nullptr, false);
  if (!whole.is_discarded()) {
    collect(whole, out);
    return out;
  }
  // Some versions print one document per device, one per line.
  std::size_t start = 0;
  while (start < rdma_json.size()) {
    auto end = rdma_json.find('\n', start);
    if (end == std::string_view::npos) end = rdma_json.size();
    const auto line = rdma_json.substr(start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const auto doc = json::parse(line, nullptr, false);
    if (doc.is_discarded()) {
      return unexpected(std::string("`rdma -j resource show cm_id` printed something that is not JSON"));
    }
    collect(doc, out);
  }
  return out;
}

KernelScan scan_kernel_listeners(const std::filesystem::path& sysfs) {
  KernelScan scan;
  std::error_code ec;
  if (!std::filesystem::is_directory(sysfs, ec) ||
      std::filesystem::directory_iterator(sysfs, ec) == std::filesystem::directory_iterator()) {
    scan.status = KernelScan::Status::kNoRdma;
    scan.detail = "the kernel has no RDMA device (" + sysfs.string() +
                  " is missing or empty): no kernel RDMA CM listeners";
    return scan;
  }
  FILE* pipe = ::popen("rdma -j resource show cm_id 2>/dev/null", "r");
  if (pipe == nullptr) {
    scan.status = KernelScan::Status::kFailed;
    scan.detail = "cannot run `rdma`";
    return scan;
  }
  std::string text;
  char buffer[4096];
  while (const auto n = std::fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, n);
  const int status = ::pclose(pipe);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 127) {
    scan.status = KernelScan::Status::kToolMissing;
    scan.detail = "the iproute2 `rdma` tool is not installed: cannot list kernel RDMA CM listeners";
    return scan;
  }
  if (code != 0) {
    scan.status = KernelScan::Status::kFailed;
    scan.detail = "`rdma -j resource show cm_id` failed (exit status " + std::to_string(code) + ")";
    return scan;
  }
  auto parsed = parse_cm_ids(text);
  if (!parsed) {
    scan.status = KernelScan::Status::kFailed;
    scan.detail = parsed.error();
    return scan;
  }
  scan.listeners = std::move(*parsed);
  return scan;
}

}  // namespace rdma_interop::backlog_stat
