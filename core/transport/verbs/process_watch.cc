#include "core/transport/verbs/process_watch.h"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdma_interop::transport::verbs {

ProcessWatch::~ProcessWatch() {
  for (const auto& kv : fds_) ::close(kv.second);
}

std::optional<std::string> ProcessWatch::watch(pid_t pid) {
  if (fds_.count(pid)) return std::nullopt;
  // The syscall, not glibc's wrapper: the wrapper needs glibc 2.36, the kernel only 5.3.
  const long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) {
    const int e = errno;
    if (e == ESRCH) return "process " + std::to_string(pid) + " does not exist (it has exited)";
    if (e == ENOSYS) return "pidfd_open is not available (Linux 5.3 or later is needed)";
    return "pidfd_open(" + std::to_string(pid) + "): " + std::strerror(e);
  }
  fds_[pid] = static_cast<int>(fd);
  return std::nullopt;
}

void ProcessWatch::forget(pid_t pid) {
  auto it = fds_.find(pid);
  if (it == fds_.end()) return;
  ::close(it->second);
  fds_.erase(it);
}

std::vector<pid_t> ProcessWatch::wait(std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<pid_t> pids;
  for (const auto& [pid, fd] : fds_) {
    fds.push_back(pollfd{fd, POLLIN, 0});
    pids.push_back(pid);
  }
  std::vector<pid_t> exited;
  if (fds.empty()) return exited;
  int n;
  do {
    n = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return exited;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) exited.push_back(pids[i]);
  }
  for (pid_t pid : exited) forget(pid);
  return exited;
}

}  // namespace rdma_interop::transport::verbs
