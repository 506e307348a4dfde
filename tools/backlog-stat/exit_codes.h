// exit_codes.h - backlog-stat's exit statuses: the table every tool shares
// (tools/common/exit_status.h), under the names backlog-stat uses.
#pragma once

#include "tools/common/exit_status.h"

namespace rdma_interop::backlog_stat {

// Something or nothing shown (nothing to show is an answer, as with ss), or --watch ended by
// a signal.
inline constexpr int kExitShown = tools::kExitOk;
inline constexpr int kExitUsage = tools::kExitUsage;  // bad options
// The run directory cannot be read: no permission, a symbolic link, not a directory.
inline constexpr int kExitCannotRead = tools::kExitCannotRun;

}  // namespace rdma_interop::backlog_stat
