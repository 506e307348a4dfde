// exit_codes.h - rdma-probe's exit statuses: the table every tool shares
// (tools/common/exit_status.h), under the names rdma-probe's commands use.
#pragma once

#include "tools/common/exit_status.h"

namespace rdma_interop::probe {

inline constexpr int kExitOk = tools::kExitOk;
inline constexpr int kExitFailed =
    tools::kExitFailed;                               // setup or the exchange failed, or cut short
inline constexpr int kExitUsage = tools::kExitUsage;  // bad arguments, personality or URI
inline constexpr int kExitUnreachable = tools::kExitUnreachable;  // nothing answered (TCP)
inline constexpr int kExitNotIwarp = tools::kExitNotIwarp;        // probe: it answered, but not MPA
inline constexpr int kExitCannotRun = tools::kExitCannotRun;      // serve: cannot listen there

}  // namespace rdma_interop::probe
