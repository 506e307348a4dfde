// exit_codes.h - rdma-probe's exit statuses (also listed in --help).
#pragma once

namespace rdma_interop::probe {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // connection setup or the exchange failed
inline constexpr int kExitUsage = 2;        // bad arguments, personality or URI
inline constexpr int kExitUnreachable = 3;  // nothing answered at the TCP level
inline constexpr int kExitNotIwarp = 4;     // probe: something answered, but not MPA

}  // namespace rdma_interop::probe
