#!/usr/bin/env bash
# bench-credit.sh - message endpoints with end-to-end credits on loopback, ratios from one run.
#
# Usage: tools/bench-credit.sh [BUILD_DIR] [-- credit_bench options]
#   BUILD_DIR  a Release build (default build-bench):
#              cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench
# Options after --: --seconds S (per measurement, default 2), --size N (default 64),
#   --window W (receive buffers per peer; repeatable, default 16, 256 and 1024).
# Prints the 64 B message rate with credits next to raw TCP messages pipelined over one
# connection (targets: window 16 >= 0.8x, 256 and up >= 0.95x), with context switches and
# syscalls per message of both, and what two healthy receivers get from an unthrottled
# sender while a third stops consuming, next to the same without the stall (>= 0.95x).
# Syscalls are counted as root (perf_event_open on raw_syscalls:sys_enter).
set -euo pipefail
build=${1:-build-bench}
[[ $# -gt 0 ]] && shift
[[ ${1:-} == "--" ]] && shift
bin="$build/tests/bench/credit_bench"
[[ -x "$bin" ]] || { echo "bench-credit: $bin not built (see --help in this script)" >&2; exit 2; }
# The syscall counter needs the tracepoint's id from tracefs (as bench-e2e.sh).
if [[ ! -d /sys/kernel/tracing/events && $(id -u) -eq 0 ]]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
exec "$bin" "$@"
