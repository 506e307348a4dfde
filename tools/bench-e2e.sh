#!/usr/bin/env bash
# bench-e2e.sh - the tcp provider against raw TCP and iperf3 on loopback, ratios from one run.
#
# Usage: tools/bench-e2e.sh [BUILD_DIR] [-- e2e_bench options]
#   BUILD_DIR  a Release build (default build-bench):
#              cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release &&
#              cmake --build build-bench --target e2e_bench
# Options after --: --seconds S (per stream run, default 2), --connections N (default 500),
#   --rounds N (64 B round trips, default 20000), --json PATH (the figures as JSON),
#   --require-counters (fail if syscalls cannot be counted).
# Prints connection setup rate, RDMA Write streaming (CRC off/on) and 64 B round trip, each
# next to the raw TCP baseline measured in the same run (for Writes, the better of a raw
# stream and iperf3), then context switches and syscalls per operation, with issue 19's
# targets. A missed target is printed, not an error. Needs iperf3 on PATH; syscalls are
# counted as root (perf_event_open on raw_syscalls:sys_enter).
set -euo pipefail
build=${1:-build-bench}
[[ $# -gt 0 ]] && shift
[[ ${1:-} == "--" ]] && shift
bin="$build/tests/bench/e2e_bench"
[[ -x "$bin" ]] || { echo "bench-e2e: $bin not built (see --help in this script)" >&2; exit 2; }
# The syscall counter needs the tracepoint's id from tracefs; perf mounts it on first use,
# and so do we.
if [[ ! -d /sys/kernel/tracing/events && $(id -u) -eq 0 ]]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
exec "$bin" "$@"
