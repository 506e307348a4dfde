// serve_run.h - verbs-check --serve: the server side of each check, for a client on another
// node (verbs-check --peer there).
//
// For each check, one at a time and in the client's order, the serve process forks a child
// that runs run_server (checks.h) on ADDRESS:PORT+i: the code the one-node runner's forked
// server runs. It reads the child's report lines ("ready", "client PEER", "failed WHY",
// "dying") and reaps it. A dead-peer check's client asks its server to die over the message
// link; the child then raises SIGKILL on itself, so its kernel tears the queue pair and the
// connection down as a dying process's does, and the serve goes on to the next check.
//
// As in isolated_run.h, this process never touches rdma-core: only the children open the
// provider, after the fork. Every wait is bounded: the child by --timeout for its client
// and --timeout for the check after it came, this process's watch over it by twice
// --timeout + kServeMargin, after which the child is killed. A stop request (SIGTERM, SIGINT; see StopFlag) kills the
// child being watched and ends the run.
#pragma once

#include <csignal>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tools/verbs-check/checks.h"

namespace rdma_interop::verbs_check {

// Set by the SIGTERM / SIGINT handler install_stop_handlers() installs; the serve's waits
// look at it every 100 ms. Children get the default handlers back.
extern volatile std::sig_atomic_t g_stop_signal;
void install_stop_handlers();

// Serves check `check` on `port` for a client on another node; returns its JSON line:
//   {"check","port","address","ok","result","expected","server","client","detail",
//    "device","transport","elapsed_ms"}
// "server" is how the child ended ("exit 0", "killed as requested", "exit 2", "signal 9",
// "killed after N s", "stopped"); "expected" what it must be for this check ("killed as
// requested" for the checks that kill the server, else "exit 0"); "result" pass when they
// agree, else error; "client" the peer that connected (null if none did).
nlohmann::ordered_json serve_check(const Config& config, const CheckInfo& check,
                                   std::uint16_t port);

}  // namespace rdma_interop::verbs_check
