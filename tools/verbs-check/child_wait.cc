#include "tools/verbs-check/child_wait.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace rdma_interop::verbs_check {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string read_until(int fd, Clock::time_point deadline, bool one_line, bool& timed_out,
                       const volatile std::sig_atomic_t* stop) {
  std::string out;
  timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms || (stop != nullptr && *stop != 0)) {
      timed_out = true;
      return out;
    }
    pollfd p{fd, POLLIN, 0};
    const auto slice = stop != nullptr ? std::min(left, std::chrono::milliseconds(100)) : left;
    const int n = ::poll(&p, 1, static_cast<int>(slice.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buffer[4096];
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return out;
    out.append(buffer, static_cast<std::size_t>(got));
    if (one_line && out.find('\n') != std::string::npos) return out.substr(0, out.find('\n'));
  }
}

std::string reap(pid_t pid, std::chrono::milliseconds wait) {
  const auto deadline = Clock::now() + wait;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return "gone";
    if (Clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return "killed after " + std::to_string(wait.count()) + " ms";
    }
    ::usleep(20000);
  }
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace rdma_interop::verbs_check
