// child_wait.h - bounded waits on a forked child: read its pipe, reap it. Shared by the
// one-node runner (isolated_run.h) and the two-node serve (serve_run.h).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <string>

namespace rdma_interop::verbs_check {

// Reads from `fd` until EOF, a newline (when `one_line`: returns the line without it), the
// deadline (`timed_out` set) or, when `stop` is given, *stop becoming non-zero (checked at
// least every 100 ms; `timed_out` set too).
std::string read_until(int fd, std::chrono::steady_clock::time_point deadline, bool one_line,
                       bool& timed_out, const volatile std::sig_atomic_t* stop = nullptr);

// Waits for `pid` up to `wait`, SIGKILLs it if it is still there. Returns how it ended:
// "exit N", "signal N", "killed after N ms", or "gone" (not our child, or already reaped).
std::string reap(pid_t pid, std::chrono::milliseconds wait);

}  // namespace rdma_interop::verbs_check
