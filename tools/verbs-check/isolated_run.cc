#include "tools/verbs-check/isolated_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>

#include "core/transport/verbs/cm_address.h"
#include "core/util/json_text.h"
#include "tools/verbs-check/child_wait.h"
#include "tools/verbs-check/serve_run.h"

namespace rdma_interop::verbs_check {
namespace {

using json = nlohmann::ordered_json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kServerStartWait = 10s;
constexpr auto kServerExitWait = 3s;
constexpr auto kRunnerMargin = 15s;  // beyond the check's own timeout

json error_json(std::string detail) {
  return json{{"ok", false}, {"result", "error"}, {"got", nullptr}, {"detail", std::move(detail)}};
}

// The runner: forks the server first, then plays the client. Two nodes (Config::peer): the
// server is the peer's verbs-check --serve, and the runner only plays the client.
json runner(const Config& config, const CheckInfo& check, std::uint16_t port) {
  if (!config.peer.empty()) {
    json out = run_client(config, check.name, port, 0);
    if (!out.contains("server")) out["server"] = "remote (verbs-check --serve)";
    return out;
  }
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return error_json("pipe2 failed");
  const pid_t server = ::fork();
  if (server < 0) return error_json("fork failed");
  if (server == 0) {
    ::close(ready[0]);
    ::_exit(run_server(config, port, ready[1]));
  }
  ::close(ready[1]);
  bool timed_out = false;
  const std::string line =
      read_until(ready[0], Clock::now() + kServerStartWait, /*one_line=*/true, timed_out);
  // ready[0] stays open until the server is gone: it reports more lines (checks.h), unread
  // here, and a pipe without a reader would end it with SIGPIPE.
  json out;
  if (line.rfind("ready ", 0) != 0) {
    const std::string why = line.rfind("error ", 0) == 0 ? line.substr(6)
                            : timed_out                  ? "no answer in time"
                                                         : "it exited";
    out = error_json("the server could not listen: " + why);
    // It is on its way out after saying so: give it the time a check's server has to end,
    // or "killed after 0 ms" would describe our haste, not the server.
    out["server"] = reap(server, kServerExitWait);
  } else {
    out = run_client(config, check.name, port, server);
    out["server"] =
        kills_server(check.name) ? "killed by the check" : reap(server, kServerExitWait);
  }
  ::close(ready[0]);
  // Which device and transport the address belongs to, for the report.
  if (auto address = transport::verbs::resolve_verbs_host(config.address, 0)) {
    if (auto device = transport::verbs::device_of_address(address->get())) {
      out["device"] = *device;
      out["transport"] = transport::verbs::rdma_device_transport(*device);
    }
  }
  return out;
}

}  // namespace

json run_isolated(const Config& config, const CheckInfo& check, std::uint16_t port) {
  const auto start = Clock::now();
  json result{{"check", check.name},        {"ok", false},    {"result", "error"},
              {"expected", check.expected}, {"got", nullptr}, {"detail", ""},
              {"address", config.address},  {"port", port}};
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    result["detail"] = "pipe2 failed";
    return result;
  }
  std::fflush(nullptr);  // nothing buffered may be written twice by a child
  const pid_t pid = ::fork();
  if (pid < 0) {
    result["detail"] = "fork failed";
    return result;
  }
  if (pid == 0) {
    // The runner and its server end as any process on a signal; only the main process
    // stops in order (serve_run.h).
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::setpgid(0, 0);
    ::close(pipefd[0]);
    const std::string text = json_text(runner(config, check, port)) + "\n";
    [[maybe_unused]] const auto n = ::write(pipefd[1], text.data(), text.size());
    ::_exit(0);
  }
  ::setpgid(pid, pid);  // also here: whichever runs first, the group exists before a kill
  ::close(pipefd[1]);
  bool timed_out = false;
  const auto limit =
      config.timeout + std::chrono::duration_cast<std::chrono::milliseconds>(kRunnerMargin);
  const std::string text =
      read_until(pipefd[0], start + limit, /*one_line=*/false, timed_out, &g_stop_signal);
  ::close(pipefd[0]);
  if (timed_out) {
    ::kill(-pid, SIGKILL);  // the runner and its server: our own process group
    ::waitpid(pid, nullptr, 0);
    if (g_stop_signal != 0) {
      result["stopped"] = true;
      result["detail"] = "stopped by signal " + std::to_string(g_stop_signal) +
                         " before the check finished; its processes were killed";
    } else {
      result["detail"] =
          "the check did not finish within " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit).count()) +
          " s; its processes were killed";
    }
  } else {
    const std::string how = reap(pid, 5000ms);
    json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_discarded() || !line.is_object()) {
      result["detail"] = "the check's process ended (" + how + ") without a result";
    } else {
      for (auto& [k, v] : line.items()) result[k] = v;  // may refine "expected" (transport)
    }
  }
  result["elapsed_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return result;
}

}  // namespace rdma_interop::verbs_check
