#include "iperf3.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

extern char** environ;

namespace rdma_interop::bench {
namespace {

// A port nobody listens on right now: the kernel's pick for a socket we close again.
Expected<std::uint16_t, std::string> free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) ::close(fd);
  if (!ok) return unexpected(std::string("no free loopback port: ") + std::strerror(errno));
  return ntohs(a.sin_port);
}

// Starts argv with stdout on `out` (or /dev/null when -1) and stderr on /dev/null.
Expected<pid_t, std::string> spawn(const std::vector<std::string>& args, int out) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out >= 0) {
    posix_spawn_file_actions_adddup2(&actions, out, STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc == ENOENT)
    return unexpected(std::string("iperf3 is not installed (apt-get install iperf3)"));
  if (rc != 0) return unexpected(std::string("cannot start iperf3: ") + std::strerror(rc));
  return pid;
}

// Runs a client to the end; its stdout, or why not.
Expected<std::string, std::string> run_client(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    return unexpected(std::string("pipe: ") + std::strerror(errno));
  auto pid = spawn(args, pipe_fds[1]);
  ::close(pipe_fds[1]);
  if (!pid) {
    ::close(pipe_fds[0]);
    return unexpected(pid.error());
  }
  std::string text;
  char buf[4096];
  ssize_t r;
  while ((r = ::read(pipe_fds[0], buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR)) {
    if (r > 0) text.append(buf, static_cast<std::size_t>(r));
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(*pid, &status, 0);
  return text;
}

// The one-off server exits after its client; one that does not within 5 s is killed (ours:
// the pid came from spawn).
void reap(pid_t pid) {
  for (int i = 0; i < 500; ++i) {
    if (::waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

bool exited(pid_t pid) {
  return ::waitpid(pid, nullptr, WNOHANG) == pid;
}

}  // namespace

Expected<Iperf3Result, std::string> iperf3_loopback(double seconds) {
  const int whole = std::max(1, static_cast<int>(std::lround(seconds)));
  auto port = free_loopback_port();
  if (!port) return unexpected(port.error());
  const std::string p = std::to_string(*port);
  auto server = spawn({"iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", p}, -1);
  if (!server) return unexpected(server.error());

  // The server listens a moment after it starts; a refused client never reaches it, so
  // retrying until it answers leaves the one-off server its one test.
  std::string why = "iperf3 server never listened on 127.0.0.1:" + p;
  for (int attempt = 0; attempt < 200; ++attempt) {
    if (exited(*server)) return unexpected("iperf3 server exited before the test (port " + p + ")");
    auto out =
        run_client({"iperf3", "-c", "127.0.0.1", "-p", p, "-t", std::to_string(whole), "-J"});
    if (!out) {
      why = out.error();
      break;
    }
    const auto doc = nlohmann::json::parse(*out, nullptr, false);
    if (doc.is_discarded()) {
      why = "iperf3 printed no JSON";
      break;
    }
    if (doc.contains("error")) {
      why = "iperf3: ";  // appended: GCC 12 -Wrestrict bug 105329
      why += doc.value("error", std::string("?"));
      if (why.find("refused") == std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    const auto bps = doc.value("/end/sum_received/bits_per_second"_json_pointer, -1.0);
    if (bps <= 0) {
      why = "iperf3 JSON has no end.sum_received.bits_per_second";
      break;
    }
    reap(*server);
    return Iperf3Result{bps / 1e9, whole, doc.value("/start/version"_json_pointer, std::string())};
  }
  ::kill(*server, SIGTERM);
  reap(*server);
  return unexpected(why);
}

}  // namespace rdma_interop::bench
