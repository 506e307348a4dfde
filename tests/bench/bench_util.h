// bench_util.h - the small helpers the scripted benchmarks (credit_bench, e2e_bench,
// stream_bench) and their raw TCP baselines share: the clock they time with, seconds since a
// start, and giving up with a message (die, or_die).
//
// Header-only: each is a line or two, and credit_bench links none of the other .cc files here.
#pragma once

#include <errno.h>  // program_invocation_short_name (glibc)

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "core/util/expected.h"

namespace rdma_interop::bench {

// Monotonic: a benchmark's intervals must not jump with the wall clock.
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Prints "<program>: <why>" on stderr and exits with status 1. The prefix is the name the
// program was run under (glibc's program_invocation_short_name, argv[0]'s last component),
// so each bench keeps its own ("stream_bench: ...") without passing it in.
[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, why.c_str());
  std::exit(1);
}

// The value, or die() with the error.
template <class T>
T or_die(Expected<T, std::string> v) {
  if (!v) die(v.error());
  return std::move(*v);
}

}  // namespace rdma_interop::bench
