#!/usr/bin/env bash
# bench-e2e.sh - the tcp provider against raw TCP on loopback, ratios from one run.
#
# Usage: tools/bench-e2e.sh [BUILD_DIR] [-- e2e_bench options]
#   BUILD_DIR  a Release build (default build-bench):
#              cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release && cmake --build build-bench
# Options after --: --seconds S (per stream run, default 2), --connections N (default 500).
# Prints connection setup rate, RDMA Write streaming (CRC off/on) and 64 B round trip, each
# next to the raw TCP baseline measured in the same run, with the targets.
set -euo pipefail
build=${1:-build-bench}
[[ $# -gt 0 ]] && shift
[[ ${1:-} == "--" ]] && shift
bin="$build/tests/bench/e2e_bench"
[[ -x "$bin" ]] || { echo "bench-e2e: $bin not built (see --help in this script)" >&2; exit 2; }
exec "$bin" "$@"
