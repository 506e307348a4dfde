// op_cost.h - what a measured section costs the whole process: CPU time, context switches
// and syscalls.
//
// CPU time and context switches come from getrusage(RUSAGE_SELF): every thread of the
// process, live or exited; CPU time is user + system, switches voluntary (it blocked) and
// involuntary (it was preempted). CPU time per operation is steadier than a rate on a shared
// machine: another tenant's load stretches the wall clock, not (much) the time a thread
// runs. Syscalls come from a perf
// counter on the raw_syscalls:sys_enter tracepoint (what `perf stat -e raw_syscalls:sys_enter`
// counts), opened with inherit so every thread started after it counts too; it needs root
// (or CAP_PERFMON) and tracefs for the tracepoint's id. A benchmark that runs client and
// server as threads of one process therefore counts both sides together.
//
// Threading: open() on the main thread before any other thread starts; sample() from any
// thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace rdma_interop::bench {

// Costs per operation of one measured section.
struct PerOp {
  double cpu_us = 0;  // user + system, every thread, microseconds
  double voluntary_switches = 0;
  double involuntary_switches = 0;
  std::optional<double> syscalls;  // empty when the counter could not be opened
  double context_switches() const { return voluntary_switches + involuntary_switches; }
};

class CostMeter {
 public:
  struct Sample {
    double cpu_us = 0;
    std::uint64_t voluntary_switches = 0;
    std::uint64_t involuntary_switches = 0;
    std::optional<std::uint64_t> syscalls;
  };

  // Never fails: without the syscall counter, samples carry no syscalls and
  // unavailable() says why.
  static CostMeter open();
  CostMeter(CostMeter&& other) noexcept;
  CostMeter& operator=(CostMeter&&) = delete;
  CostMeter(const CostMeter&) = delete;
  ~CostMeter();

  Sample sample() const;
  const std::string& unavailable() const { return unavailable_; }

 private:
  CostMeter(int fd, std::string unavailable) : fd_(fd), unavailable_(std::move(unavailable)) {}
  int fd_ = -1;
  std::string unavailable_;
};

// (after - before) / ops; syscalls only when both samples have them.
PerOp per_op(const CostMeter::Sample& before, const CostMeter::Sample& after, double ops);

}  // namespace rdma_interop::bench
