// telemetry_test_util.h - a temporary run directory and a pid known to be dead.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/telemetry/listener_snapshot.h"

namespace rdma_interop::telemetry::testing {

class TempRunDir {
 public:
  TempRunDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "telemetry-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempRunDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// A child that exited and was reaped: kill(pid, 0) says ESRCH until the pid is reused, which
// takes a full wrap of pid_max.
inline pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

inline ListenerSnapshot listener(std::string address, std::uint32_t pending = 0) {
  ListenerSnapshot l;
  l.local_address = std::move(address);
  l.scheme = "tcp";
  l.overflow = cm::BacklogOverflow::kReject;
  l.counters.backlog = 64;
  l.counters.pending = pending;
  l.counters.requests = pending;
  return l;
}

}  // namespace rdma_interop::telemetry::testing
