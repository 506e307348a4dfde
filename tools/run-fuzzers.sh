#!/usr/bin/env bash
# run-fuzzers.sh - runs every libFuzzer harness for a fixed time, two at a time.
#
#   tools/run-fuzzers.sh BUILD_DIR [SECONDS_EACH]
#
# BUILD_DIR is a tree configured with -DRDMA_INTEROP_FUZZ=ON (see tests/fuzz/CMakeLists.txt).
# SECONDS_EACH defaults to 60; the environment variable FUZZ_SECONDS overrides both.
# FUZZ_JOBS (default 2) is how many fuzzers run at once.
# Each fuzzer starts from a temporary copy of tests/fuzz/corpus/<fuzzer>/ (new inputs never
# land in the repository) and prints one line: executions, time, coverage. Exit status is 1
# if any fuzzer found a crash, leak, UB report, timeout or OOM; the reproducer's path and
# the log are printed, and the temporary directory is kept for them.
set -euo pipefail

usage() { echo "usage: $0 BUILD_DIR [SECONDS_EACH]" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
build_dir=$(cd "$1" && pwd) || usage
seconds=${FUZZ_SECONDS:-${2:-60}}
jobs=${FUZZ_JOBS:-2}
[[ $seconds =~ ^[0-9]+$ && $jobs =~ ^[1-9][0-9]*$ ]] || usage

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fuzz_bin="$build_dir/tests/fuzz"
list="$fuzz_bin/fuzzers.txt"
[[ -f $list ]] || { echo "$list not found: configure with -DRDMA_INTEROP_FUZZ=ON" >&2; exit 2; }
IFS=';' read -r -a fuzzers <"$list"

work=$(mktemp -d "${TMPDIR:-/tmp}/rdma-interop-fuzz.XXXXXX")
cleanup() { [[ -n ${keep_work:-} ]] || rm -rf "$work"; }
trap cleanup EXIT

# ASan/UBSan defaults: UB is fatal (the build uses -fno-sanitize-recover too), leaks count.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {
  local name=$1 dir="$work/$1"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  if [[ -d $repo/tests/fuzz/corpus/$name ]]; then
    cp "$repo/tests/fuzz/corpus/$name"/* "$dir/corpus/" 2>/dev/null || true
  fi
  local dict=()
  [[ -f $repo/tests/fuzz/$name.dict ]] && dict=("-dict=$repo/tests/fuzz/$name.dict")
  local rc=0
  "$fuzz_bin/$name" "${dict[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" -close_fd_mask=1 "$dir/corpus" >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

# Two at a time (2 cores): start a job, and once $jobs are running wait for any to finish.
running=0
for name in "${fuzzers[@]}"; do
  [[ -x $fuzz_bin/$name ]] || { echo "$fuzz_bin/$name not built" >&2; exit 2; }
  run_one "$name" &
  running=$((running + 1))
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=0
for name in "${fuzzers[@]}"; do
  dir="$work/$name"
  rc=$(cat "$dir/rc" 2>/dev/null || echo 99)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$dir/log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$dir/log" | tail -1 || true)
  artifacts=$(find "$dir/artifacts" -type f | sort)
  if [[ $rc == 0 && -z $artifacts ]]; then
    printf '%-20s ok     %10s execs in %ss  (%s)\n' "$name" "${execs:-?}" "${secs:-?}" "$cov"
  else
    failed=1
    printf '%-20s FAILED exit %s after %s execs\n' "$name" "$rc" "${execs:-?}"
    for a in $artifacts; do echo "  reproducer: $a ($(stat -c %s "$a") bytes)"; done
    echo "  log: $dir/log"
    grep -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|fuzz invariant' \
      "$dir/log" | head -5 | sed 's/^/  /' || true
  fi
done
if ((failed)); then
  keep_work=1
  echo "fuzz run FAILED; artifacts and logs kept under $work" >&2
  echo "reproduce: $fuzz_bin/<fuzzer> <reproducer>" >&2
  exit 1
fi
echo "all ${#fuzzers[@]} fuzzers ran ${seconds}s each without findings"
