// process_watch.h - which processes of this node have exited, through pidfds.
//
// The XRC lifetime engine drops every reference a process held when the process goes
// (XrcLifetime::on_process_exit). A node daemon learns of it here: pidfd_open(2) (Linux 5.3)
// gives a descriptor per process that polls readable once the process has exited, whoever
// its parent is and however it died, with no race on pid reuse (the descriptor names the
// process, not the number). A process that is already gone cannot be watched: watch() says
// so, and the caller treats it as exited at once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rdma_interop::transport::verbs {

class ProcessWatch {
 public:
  ProcessWatch() = default;
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  // Starts watching `pid`. The error is a sentence (no such process, no pidfd_open in this
  // kernel). Watching a pid twice is a no-op.
  std::optional<std::string> watch(pid_t pid);
  void forget(pid_t pid);
  bool watching(pid_t pid) const { return fds_.count(pid) != 0; }
  std::size_t size() const { return fds_.size(); }

  // Waits up to `timeout` for any watched process to exit; returns those that did (each
  // once: they are no longer watched), in pid order. Empty on timeout.
  std::vector<pid_t> wait(std::chrono::milliseconds timeout);

 private:
  std::map<pid_t, int> fds_;
};

}  // namespace rdma_interop::transport::verbs
