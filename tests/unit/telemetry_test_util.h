// telemetry_test_util.h - a temporary run directory, a pid known to be dead, and sample
// listener and connection snapshots.
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

// A connection with every figure set to something distinct, so a field that is dropped or
// swapped on the way through a file shows.
inline ConnectionSnapshot connection(std::string peer, std::uint32_t credits = 5) {
  ConnectionSnapshot c;
  c.local_address = "198.18.0.1:40122";
  c.peer_address = "198.18.0.2:7300";
  c.scheme = "tcp";
  c.peer = std::move(peer);
  c.state = "connected";
  c.queued = 3;
  c.queue_limit = 64;
  c.held = 1;
  c.refused = 12;
  auto& k = c.credit;
  k.credits = credits;
  k.control_credits = 2;
  k.data_slots_in_use = 4;
  k.control_slots_in_use = 1;
  k.credits_granted_total = 1000;
  k.sent = 995;
  k.updates_sent = 40;
  k.stalls_no_credit = 7;
  k.stalls_no_slot = 8;
  k.update_stalls = 9;
  k.posted = 16;
  k.granted = 14;
  k.pending_grant = 2;
  k.control_posted = 2;
  k.control_return_pending = 1;
  k.granted_total = 2000;
  k.received = 1984;
  k.updates_received = 41;
  return c;
}

}  // namespace rdma_interop::telemetry::testing
