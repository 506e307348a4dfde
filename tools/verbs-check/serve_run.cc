#include "tools/verbs-check/serve_run.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>

#include "tools/verbs-check/child_wait.h"

namespace rdma_interop::verbs_check {

volatile std::sig_atomic_t g_stop_signal = 0;

namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// How long the child may run beyond its two --timeout waits (listen, accept, a last
// disconnect) before this process kills it.
constexpr auto kServeMargin = 15s;
// After the child's pipe closed, how long it may take to be gone.
constexpr auto kExitWait = 3s;

void on_stop(int signal_number) {
  g_stop_signal = signal_number;
}

void set_handler(int signal_number, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a wait in poll() returns at once
  ::sigaction(signal_number, &action, nullptr);
}

// The child's report lines (checks.h, run_server), by their first word.
struct Report {
  std::string ready;   // the listening address
  std::string error;   // why it could not listen
  std::string device;  // "rxe0"
  std::string transport;
  std::string client;  // the peer that connected
  std::string failed;  // why it ended early
  bool dying = false;  // the client asked it to die
};

Report parse_report(const std::string& text) {
  Report r;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const auto space = line.find(' ');
    const std::string word = line.substr(0, space);
    const std::string rest = space == std::string::npos ? "" : line.substr(space + 1);
    if (word == "ready") {
      r.ready = rest;
    } else if (word == "error") {
      r.error = rest;
    } else if (word == "device") {
      std::istringstream in(rest);
      in >> r.device >> r.transport;
    } else if (word == "client") {
      r.client = rest;
    } else if (word == "failed") {
      r.failed = rest;
    } else if (word == "dying") {
      r.dying = true;
    }
  }
  return r;
}

}  // namespace

void install_stop_handlers() {
  set_handler(SIGTERM, on_stop);
  set_handler(SIGINT, on_stop);
}

json serve_check(const Config& config, const CheckInfo& check, std::uint16_t port) {
  const auto start = Clock::now();
  const std::string expected = kills_server(check.name) ? "killed as requested" : "exit 0";
  json r{{"check", check.name}, {"port", port},      {"address", config.address},
         {"ok", false},         {"result", "error"}, {"expected", expected},
         {"server", nullptr},   {"client", nullptr}, {"detail", ""}};
  auto finish = [&] {
    r["elapsed_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    return r;
  };
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    r["detail"] = "pipe2 failed";
    return finish();
  }
  std::fflush(nullptr);  // nothing buffered may be written twice by the child
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(report[0]);
    ::close(report[1]);
    r["detail"] = "fork failed";
    return finish();
  }
  if (child == 0) {
    // A stray SIGTERM ends the child as it would any process; this one has no handler.
    set_handler(SIGTERM, SIG_DFL);
    set_handler(SIGINT, SIG_DFL);
    ::close(report[0]);
    ::_exit(run_server(config, port, report[1]));
  }
  ::close(report[1]);
  bool cut_short = false;
  // The child waits up to --timeout for its client and then serves it up to --timeout.
  const auto limit =
      2 * config.timeout + std::chrono::duration_cast<std::chrono::milliseconds>(kServeMargin);
  const std::string text =
      read_until(report[0], start + limit, /*one_line=*/false, cut_short, &g_stop_signal);
  ::close(report[0]);
  std::string how;
  if (cut_short) {
    how = g_stop_signal != 0 ? "stopped"
                             : "killed after " + std::to_string(limit.count() / 1000) + " s";
    reap(child, 0ms);  // SIGKILL
  } else {
    how = reap(child, kExitWait);
  }
  const Report report_lines = parse_report(text);
  if (how == "signal 9" && report_lines.dying) how = "killed as requested";
  r["server"] = how;
  r["client"] = report_lines.client.empty() ? json(nullptr) : json(report_lines.client);
  if (!report_lines.device.empty()) {
    r["device"] = report_lines.device;
    r["transport"] = report_lines.transport;
  }
  r["ok"] = how == expected;
  r["result"] = how == expected ? "pass" : "error";
  if (!report_lines.error.empty()) {
    r["detail"] = "could not listen: " + report_lines.error;
  } else if (report_lines.ready.empty() && !cut_short) {
    r["detail"] = "the server ended (" + how + ") before it listened";
  } else if (!report_lines.failed.empty()) {
    r["detail"] = report_lines.failed;
  } else if (how == "stopped") {
    r["detail"] = "stopped by signal " + std::to_string(g_stop_signal) + " while serving";
  } else if (cut_short) {
    r["detail"] = "the server did not end within " + std::to_string(limit.count() / 1000) +
                  " s; it was killed";
  } else if (how == "exit 0" && kills_server(check.name)) {
    r["detail"] = "served until the client left, which never asked it to die";
  } else if (how == "killed as requested") {
    r["detail"] = "served " + report_lines.client + " on " + report_lines.ready +
                  ", then died by SIGKILL at its request";
  } else if (how == "exit 0") {
    r["detail"] = "served " + report_lines.client + " on " + report_lines.ready;
  } else {
    r["detail"] = "the server ended with " + how;
  }
  return finish();
}

}  // namespace rdma_interop::verbs_check
