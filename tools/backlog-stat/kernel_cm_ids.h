// kernel_cm_ids.h - the kernel's own RDMA CM listeners, through iproute2's `rdma` tool
// (`rdma -j resource show cm_id`, which reads the RDMA netlink resource tracking).
//
// The kernel keeps no backlog figures for them (that is issue 5's point): we show where
// they listen, on which device, and who owns them.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/expected.h"
#include "tools/backlog-stat/listener_row.h"

namespace rdma_interop::backlog_stat {

inline constexpr const char* kSysfsInfiniband = "/sys/class/infiniband";

struct KernelScan {
  enum class Status {
    kOk,           // `rdma` answered (listeners may still be empty)
    kNoRdma,       // no RDMA device: /sys/class/infiniband is missing or empty
    kToolMissing,  // the iproute2 `rdma` tool is not installed
    kFailed,       // it ran and failed, or printed something we cannot parse
  };
  Status status = Status::kOk;
  std::string detail;  // one sentence for anything but kOk
  std::vector<KernelListener> listeners;
};
// "ok", "no_rdma", "rdma_tool_missing", "error": the "kernel_status" of --json.
std::string_view status_name(KernelScan::Status s);

// Looks at `sysfs` first: without a device there is nothing to ask the kernel.
KernelScan scan_kernel_listeners(const std::filesystem::path& sysfs = kSysfsInfiniband);

// The LISTEN entries of `rdma -j resource show cm_id` output. Accepts the JSON of iproute2
// 5.x and 6.x: one array of objects (or one per device), "src-addr" as "ADDR:PORT" or as
// "ADDR" with a separate "src-port".
Expected<std::vector<KernelListener>, std::string> parse_cm_ids(std::string_view rdma_json);

}  // namespace rdma_interop::backlog_stat
