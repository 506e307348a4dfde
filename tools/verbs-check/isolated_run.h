// isolated_run.h - one check in processes of its own.
//
// verbs-check's main process never touches rdma-core. For each check it forks a runner
// (its own process group), which forks the server before initialising librdmacm or
// libibverbs itself: a process that forks after opening verbs contexts hands the child
// contexts it cannot use. The runner plays the client, reaps the server (or kills it, for
// dead-peer-read) and writes the check's JSON line to a pipe; the main process bounds the
// whole run and kills the runner's process group if it overruns, or at once on a stop request
// (SIGINT, SIGTERM: g_stop_signal, serve_run.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tools/verbs-check/checks.h"

namespace rdma_interop::verbs_check {

// The check's result line: {"check","ok","result","expected","got","detail",...}. Stopped
// by a signal, it is an error whose detail says so, and "stopped" is true.
nlohmann::ordered_json run_isolated(const Config& config, const CheckInfo& check,
                                    std::uint16_t port);

}  // namespace rdma_interop::verbs_check
