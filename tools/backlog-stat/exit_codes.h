// exit_codes.h - backlog-stat's exit statuses (also listed in --help).
#pragma once

namespace rdma_interop::backlog_stat {

inline constexpr int kExitShown = 0;         // something shown (or --watch ended by a signal)
inline constexpr int kExitNothing = 1;       // nothing to show, with a message saying why
inline constexpr int kExitUsage = 2;         // bad options
inline constexpr int kExitNoPermission = 3;  // the run directory cannot be read

}  // namespace rdma_interop::backlog_stat
