#!/usr/bin/env bash
# test-all.sh - installs what it needs, builds, and runs every test tier.
#
# Usage: tools/test-all.sh [TIER ...]
#   Tiers, in order (default: all of them):
#   unit      GoogleTest unit tests, incl. the tcp provider over real loopback sockets, and the
#             capture peer's socket tests, built with AddressSanitizer + UBSan (build-asan)
#   python    pytest of the Python API: wire codecs, provider, lab, matrix
#   cli       rdma-probe serve/connect as separate processes, every shipped personality pair
#   faults    a scripted peer killed or misbehaving at each MPA step; rdma-probe survives
#   capture   our traffic captured (loopback and a namespace lab run), decoded by tshark
#   interop   the interop matrix across two network-namespace hosts (root)
#   storm     connect storms from 4 namespace hosts against a backlog-64 listener (root)
#   mesh      N:N message meshes of 4-5 namespace hosts over credit flow control: a stalled
#             peer, request/reply with a slow party, a misbehaving peer, a soak (root)
#   stream    sockets over RDMA streams between 2 namespace hosts: unchanged http.server and
#             urllib under the stream preload, plain fallbacks, the Python socket API (root)
#   ansible   playbooks/site.yml over real SSH to 3 namespace nodes running sshd (root)
#   kernel    our stack against the Linux kernel's siw and rxe in a qemu guest (TCG)
#   devices   the device tier across a lab of two qemu guests over real SSH: siw with siw,
#             rxe with rxe, rdma-core's tools, perftest and ours; a device and a node lost
#   tsan      the unit tests that run threads, built with ThreadSanitizer
#   fuzz      each libFuzzer harness for FUZZ_SECONDS (default 20)
#   bench     a Release build of the benchmarks (build-bench), each run briefly: fails on a
#             build error, a crash or a reported error, never on a missed target
# Environment: BUILD_DIR (default build), JOBS (default nproc), FUZZ_SECONDS,
#   RDMA_INTEROP_SKIP_KERNEL=1, RDMA_INTEROP_SKIP_DEVICES=1 (those tiers' tests report
#   skipped; CI runs them).
# Exits non-zero if any tier fails; the last line counts tiers passed and failed.
set -uo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
all_tiers=(unit python cli faults capture interop storm mesh stream ansible kernel devices tsan fuzz bench)
tiers=("$@")
[[ ${#tiers[@]} -gt 0 ]] || tiers=("${all_tiers[@]}")
for t in "${tiers[@]}"; do
  [[ " ${all_tiers[*]} " == *" $t "* ]] || { echo "test-all: unknown tier '$t' (tiers: ${all_tiers[*]})" >&2; exit 2; }
done

step() { printf '\n==> %s\n' "$*"; }
need_root() { [[ $(id -u) -eq 0 ]] && echo "" || echo sudo; }

step "dependencies"
bash tools/install-deps.sh || exit 1

wants() { [[ " ${tiers[*]} " == *" $1 "* ]]; }

if wants python || wants cli || wants faults || wants capture || wants interop || wants storm || wants mesh || wants stream || wants ansible || wants kernel || wants devices; then
  step "build ($build)"
  # What the tiers below run: the toolkit, the Python module, the capture peer, and the one
  # unit test the kernel tier runs inside its guest (verbs_provider_test, built with `all`:
  # uninstrumented, as the guest has no sanitizer runtimes). The other unit tests build in
  # build-asan (unit tier), the benchmarks in build-bench (bench tier).
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMA_INTEROP_UNIT_TESTS_IN_ALL=OFF \
    -DRDMA_INTEROP_BENCH=OFF >/dev/null &&
    cmake --build "$build" -j "$jobs" || exit 1
  # The Python package and CLIs for /usr/bin/python3 and PATH.
  $(need_root) cmake --install "$build" >/dev/null || exit 1
fi

passed=0
failed=0
failed_names=()
run_tier() {
  local name=$1
  shift
  step "tier $name"
  local start=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
    echo "tier $name: passed in $((SECONDS - start)) s"
  else
    failed=$((failed + 1))
    failed_names+=("$name")
    echo "tier $name: FAILED in $((SECONDS - start)) s"
  fi
}

pytest_tier() {
  # Exit code 5 (no tests collected) is a failure here: a tier that runs nothing is broken.
  # The slowest tests are listed: the 50-minute CI budget is spent where they say.
  RDMA_INTEROP_BUILD="$root/$build" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
    --durations=5 "$@"
}

kernel_tier() {
  # The guest image is built (or found in its cache) first, so its progress shows here and a
  # build failure is not mistaken for a test failure.
  if [[ ${RDMA_INTEROP_SKIP_KERNEL:-0} != 1 ]]; then
    bash tools/kernel-guest/build-guest.sh || return 1
  fi
  pytest_tier -rs tests/kernel
}

devices_tier() {
  if [[ ${RDMA_INTEROP_SKIP_DEVICES:-0} != 1 ]]; then
    bash tools/kernel-guest/build-guest.sh || return 1
  fi
  pytest_tier -rs -s tests/devices
}

# Sanitizer trees compile at -Og -g1: GCC's level for debugging, the -O1 the sanitizers'
# documentation advises without the passes GCC leaves out for debuggers, and line tables
# kept for the stack traces. Against -O1 it took the unit tier's build from 618 s to 396 s
# on 2 cores, and its tests (then one process per scenario) from 108 s to 122 s (UBSan's
# checks are most of the compile: stream_session_test.cc 19 s at -O1, 11 s at -Og). Clang
# reads -Og as -O1.
# The engine libraries compile as unity builds in every tree but the main one (RDMA_INTEROP_UNITY
# in CMakeLists.txt): about 30 s less in each of the four.
# Each unit test executable runs as one CTest test (RDMA_INTEROP_CTEST_PER_EXECUTABLE): a
# sanitized process costs about 0.2 s to start and to check for leaks, and one per scenario
# (1132) was 240 s of the unit tier's test time, 121 s of its wall time on 2 cores; one per
# executable (61), 32-34 s. A skipped scenario (no RDMA device, not root) then shows only in
# its executable's output, which ctest prints for a failure alone.
sanitizer_build=(-DCMAKE_BUILD_TYPE=RelWithDebInfo
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-Og -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-Og -g1 -DNDEBUG"
  -DRDMA_INTEROP_UNITY=ON -DRDMA_INTEROP_CTEST_PER_EXECUTABLE=ON)

unit_tier() {
  # One build of the unit tests, instrumented: an uninstrumented run of the same tests found
  # nothing this one does not, and cost a second compile of every test in each CI run.
  cmake -S . -B build-asan "${sanitizer_build[@]}" -DRDMA_INTEROP_SANITIZE=ON \
    -DRDMA_INTEROP_PYTHON=OFF -DRDMA_INTEROP_BENCH=OFF >/dev/null &&
    cmake --build build-asan -j "$jobs" --target unit_tests iwarp_capture_peer &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE tshark
}

tsan_tier() {
  # A race is a failure, not a warning that scrolls past.
  cmake -S . -B build-tsan "${sanitizer_build[@]}" -DRDMA_INTEROP_TSAN=ON \
    -DRDMA_INTEROP_PYTHON=OFF -DRDMA_INTEROP_BENCH=OFF >/dev/null &&
    cmake --build build-tsan -j "$jobs" --target thread_tests &&
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      ctest --test-dir build-tsan/tests/unit --output-on-failure -j "$jobs" -L thread
}

fuzz_tier() {
  CC=clang CXX=clang++ cmake -S . -B build-fuzz "${sanitizer_build[@]}" -DRDMA_INTEROP_FUZZ=ON \
    -DRDMA_INTEROP_TESTS=OFF \
    -DRDMA_INTEROP_PYTHON=OFF -DRDMA_INTEROP_BENCH=OFF >/dev/null &&
    cmake --build build-fuzz -j "$jobs" --target fuzzers &&
    bash tools/run-fuzzers.sh build-fuzz "${FUZZ_SECONDS:-20}"
}

bench_tier() {
  # The README's Release build (-O3: it once failed where RelWithDebInfo passed), only the
  # targets the bench scripts run, so the tier stays a few minutes on 2 cores. Each benchmark
  # runs briefly so none can rot; the figures mean little this short and are not checked.
  local b=build-bench
  cmake -S . -B "$b" -DCMAKE_BUILD_TYPE=Release -DRDMA_INTEROP_UNITY=ON >/dev/null &&
    cmake --build "$b" -j "$jobs" --target bench_programs || return 1
  echo "-- bench-e2e.sh"
  bash tools/bench-e2e.sh "$b" -- --seconds 0.5 --connections 100 --rounds 2000 \
    --require-counters --json "$b/e2e-bench.json" || return 1
  echo "-- bench-stream.sh"
  bash tools/bench-stream.sh "$b" -- --seconds 0.5 --rounds 2000 --opens 200 --idle 2000 \
    --require-counters --json "$b/stream-bench.json" || return 1
  echo "-- bench-fpdu.sh"
  BENCH_REPETITIONS=1 bash tools/bench-fpdu.sh "$b" --benchmark_min_time=0.01 || return 1
  echo "-- bench-credit.sh"
  bash tools/bench-credit.sh "$b" -- --seconds 0.3 --window 16 || return 1
  echo "-- bench-backlog.sh"
  RATE_ATTEMPTS=300 DRAIN_SIZES="300 600" bash tools/bench-backlog.sh "$b"
}

wants unit && run_tier unit unit_tier
wants python && run_tier python pytest_tier tests/python
wants cli && run_tier cli pytest_tier tests/cli
wants faults && run_tier faults pytest_tier tests/faults
wants capture && run_tier capture pytest_tier tests/capture
wants interop && run_tier interop pytest_tier tests/interop
wants storm && run_tier storm pytest_tier -s tests/storm
wants mesh && run_tier mesh pytest_tier -s tests/mesh
wants stream && run_tier stream pytest_tier tests/stream
wants ansible && run_tier ansible pytest_tier tests/ansible
wants kernel && run_tier kernel kernel_tier
wants devices && run_tier devices devices_tier
wants tsan && run_tier tsan tsan_tier
wants fuzz && run_tier fuzz fuzz_tier
wants bench && run_tier bench bench_tier

echo
[[ $failed -eq 0 ]] || echo "failed tiers: ${failed_names[*]}"
echo "tiers: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
