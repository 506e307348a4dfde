#!/usr/bin/env bash
# bench-stream.sh - the stream layer (issue 24) against raw TCP and iperf3 on loopback, ratios
# from one run.
#
# Usage: tools/bench-stream.sh [BUILD_DIR] [-- stream_bench options]
#   BUILD_DIR  a Release build (default build-bench):
#              cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release &&
#              cmake --build build-bench --target stream_bench
# Options after --: --seconds S (per stream run, default 2), --rounds N (64 B round trips,
#   default 20000), --opens N (streams opened per run, default 10000), --idle N (idle streams,
#   default 10000), --json PATH (the figures as JSON), --require-counters (fail if syscalls
#   cannot be counted).
# Prints 64 KiB stream throughput, the 64 B request/response round trip and streams opened per
# second, each next to its raw TCP baseline measured in the same run (for throughput, five
# rounds, each run of ours against the best raw TCP streams just before and after it and
# iperf3's, and the median round's ratio), the memory of idle streams, then context switches, syscalls
# and the stream layer's messages and Writes per operation, with issue 24's targets. A missed
# target is printed, not an error. Needs iperf3 on PATH; syscalls are counted as root
# (perf_event_open on raw_syscalls:sys_enter).
set -euo pipefail
build=${1:-build-bench}
[[ $# -gt 0 ]] && shift
[[ ${1:-} == "--" ]] && shift
bin="$build/tests/bench/stream_bench"
[[ -x "$bin" ]] || { echo "bench-stream: $bin not built (see --help in this script)" >&2; exit 2; }
# The syscall counter needs the tracepoint's id from tracefs; perf mounts it on first use,
# and so do we.
if [[ ! -d /sys/kernel/tracing/events && $(id -u) -eq 0 ]]; then
  mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
exec "$bin" "$@"
