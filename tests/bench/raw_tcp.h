// raw_tcp.h - the raw TCP baselines e2e_bench sets our provider against, on loopback.
//
// Each is meant as an honest upper bound for what our provider does over the same sockets:
// the least a TCP application can do per operation, with the same thread layout (client
// and server are threads of this process, as ours are).
//
// Threading: each call starts and joins its own threads; the meter is only sampled.
#pragma once

#include <cstddef>
#include <string>

#include "core/util/expected.h"
#include "op_cost.h"

namespace rdma_interop::bench {

// A figure and what each operation cost the process.
struct Measured {
  double value = 0;
  PerOp cost;
};

// Connections/s: connect, accept, one octet client to server (both ends are up), close.
// Costs per connection set up and torn down, the listener's own amortised over `n`.
Expected<Measured, std::string> tcp_connects_per_second(const CostMeter& meter, int n);

// Connections/s for MPA's conversation over plain TCP, each connect waiting for it as ours
// does: connect, a 20-octet "Request", a 20-octet "Reply" back, a 20-octet "RTR", close
// (TCP_NODELAY both ends). What setup would cost if MPA's three messages cost nothing but
// their round trips: the protocol's share of the gap to tcp_connects_per_second.
Expected<Measured, std::string> tcp_mpa_shaped_connects_per_second(const CostMeter& meter, int n);

// Gbit/s of one stream for `seconds`, written in `write_size` pieces and read in pieces as
// large (iperf3 writes 128 KiB; larger writes cost fewer syscalls per octet). Socket buffers
// are the kernel's autotuned defaults, as iperf3 leaves them. Costs per 64 KiB carried.
Expected<Measured, std::string> tcp_stream_gbps(const CostMeter& meter, double seconds,
                                                std::size_t write_size);

// Microseconds per 64-octet ping-pong round trip (TCP_NODELAY both ends): one write and
// one read on each side. Costs per round trip, both sides together.
Expected<Measured, std::string> tcp_round_trip_us(const CostMeter& meter, int rounds);

}  // namespace rdma_interop::bench
