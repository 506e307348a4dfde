// raw_tcp_try.h - one try against a plain TCP acceptor, the benchmarks' baseline.
//
// The baseline server (tools/bench-backlog.sh) accepts, waits its acceptor delay, writes one
// byte and closes: the byte stands for the MPA Reply, so the same storm client measures both.
// 'A' is connected, 'R' overflow_rejected; EOF, a reset or no byte in time is expired; a
// refused connect is other/unreachable. Each failure carries the ConnectError a provider
// would report for it, so the storm retries it as it would retry the provider's.
#pragma once

#include "core/transport/provider_uri.h"
#include "tools/rdma-storm/attempt_outcome.h"
#include "tools/rdma-storm/storm_config.h"

namespace rdma_interop::storm {

TryResult raw_tcp_try(const transport::ProviderUri& target, Millis timeout, Millis hold);

}  // namespace rdma_interop::storm
