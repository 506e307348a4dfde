#include "op_cost.h"

#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

namespace rdma_interop::bench {
namespace {

// tracefs is at /sys/kernel/tracing since Linux 4.1, under debugfs before; perf mounts it on
// first use, tools/bench-e2e.sh does too.
std::optional<std::uint64_t> tracepoint_id(const char* event) {
  for (const char* root : {"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}) {
    std::ifstream in(std::string(root) + "/events/" + event + "/id");
    std::uint64_t id = 0;
    if (in >> id) return id;
  }
  return std::nullopt;
}

// Threads only: iperf3, run as a child process for a baseline, must not count as ours.
// inherit_thread is Linux 5.13; older kernels get plain inherit, which counts child
// processes too, so the benches take no sample while iperf3 runs.
int open_counter(std::uint64_t id, bool threads_only) {
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.config = id;
  attr.inherit = 1;
  attr.inherit_thread = threads_only ? 1 : 0;
  return static_cast<int>(
      ::syscall(SYS_perf_event_open, &attr, 0 /* this process */, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

}  // namespace

CostMeter CostMeter::open() {
  const auto id = tracepoint_id("raw_syscalls/sys_enter");
  if (!id) {
    return CostMeter(-1,
                     "cannot read raw_syscalls/sys_enter's id from tracefs (not root, or "
                     "not mounted: mount -t tracefs nodev /sys/kernel/tracing)");
  }
  // Threads started before the counter would not be counted: refuse rather than undercount.
  std::error_code ec;
  const auto threads = std::distance(std::filesystem::directory_iterator("/proc/self/task", ec),
                                     std::filesystem::directory_iterator());
  if (!ec && threads != 1) {
    std::string why = "opened with ";  // appended: GCC 12 -Wrestrict bug 105329
    why += std::to_string(threads);
    why += " threads running";
    return CostMeter(-1, why);
  }
  int fd = open_counter(*id, true);
  if (fd < 0 && errno == EINVAL) fd = open_counter(*id, false);
  if (fd < 0) {
    return CostMeter(-1, std::string("perf_event_open(raw_syscalls:sys_enter): ") +
                             std::strerror(errno) + " (needs root or CAP_PERFMON)");
  }
  return CostMeter(fd, "");
}

CostMeter::CostMeter(CostMeter&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), unavailable_(std::move(other.unavailable_)) {}

CostMeter::~CostMeter() {
  if (fd_ >= 0) ::close(fd_);
}

CostMeter::Sample CostMeter::sample() const {
  Sample s;
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + t.tv_usec; };
  s.cpu_us = us(ru.ru_utime) + us(ru.ru_stime);
  s.voluntary_switches = static_cast<std::uint64_t>(ru.ru_nvcsw);
  s.involuntary_switches = static_cast<std::uint64_t>(ru.ru_nivcsw);
  std::uint64_t count = 0;
  // An inherited counter reads as the sum over every thread that inherited it.
  if (fd_ >= 0 && ::read(fd_, &count, sizeof count) == sizeof count) s.syscalls = count;
  return s;
}

PerOp per_op(const CostMeter::Sample& before, const CostMeter::Sample& after, double ops) {
  PerOp p;
  if (ops <= 0) return p;
  p.cpu_us = (after.cpu_us - before.cpu_us) / ops;
  p.voluntary_switches =
      static_cast<double>(after.voluntary_switches - before.voluntary_switches) / ops;
  p.involuntary_switches =
      static_cast<double>(after.involuntary_switches - before.involuntary_switches) / ops;
  if (before.syscalls && after.syscalls) {
    p.syscalls = static_cast<double>(*after.syscalls - *before.syscalls) / ops;
  }
  return p;
}

}  // namespace rdma_interop::bench
