#!/usr/bin/env bash
# bench-backlog.sh - the listen backlog under a connect storm, on loopback, in one run:
#   1. accepted connections per second through a saturated listener (rdma-probe serve
#      --backlog B --accept-delay D, both policies) next to a raw TCP listener with the same
#      backlog and the same acceptor delay (accept, sleep D, write one byte, close), driven
#      by the same storm client (rdma-storm --raw-tcp), as a ratio;
#   2. the time a storm of N attempts takes to drain, per policy, for N = 1k, 4k, 16k, and
#      how it grows with N.
# Benchmarks, not tests: nothing is asserted; the numbers go into the issue's note.
#
# Usage: tools/bench-backlog.sh [BUILD_DIR]
#   BUILD_DIR  where rdma-probe and rdma-storm are built (default build-bench; a Release
#              build: cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release &&
#              cmake --build build-bench --target rdma-probe rdma-storm)
# Environment: BACKLOG (64), ACCEPT_DELAY_MS (1), CONCURRENCY (96 client threads),
#   RATE_ATTEMPTS (3000, the saturated-rate runs), DRAIN_SIZES ("1000 4000 16000"; empty:
#   skip part 2).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-bench}
backlog=${BACKLOG:-64}
delay_ms=${ACCEPT_DELAY_MS:-1}
concurrency=${CONCURRENCY:-96}
rate_attempts=${RATE_ATTEMPTS:-3000}
drain_sizes=${DRAIN_SIZES-"1000 4000 16000"}
probe="$build/tools/rdma-probe"
storm="$build/tools/rdma-storm/rdma-storm"
for b in "$probe" "$storm"; do
  [[ -x $b ]] || { echo "bench-backlog: $b not built (see the usage in this script)" >&2; exit 2; }
done
python=/usr/bin/python3
personality=tests/storm/personalities/storm.json
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# The raw TCP baseline: the same backlog, the same acceptor delay, one byte for the Reply.
cat >"$work/raw_server.py" <<'PY'
import socket, sys, time
backlog, delay = int(sys.argv[1]), float(sys.argv[2]) / 1000.0
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 0))
srv.listen(backlog)
print(srv.getsockname()[1], flush=True)
while True:
    conn, _ = srv.accept()
    if delay > 0:
        time.sleep(delay)
    try:
        conn.sendall(b"A")
    except OSError:
        pass
    conn.close()
PY

field() {  # field JSON_FILE EXPR: a value of the storm report
  "$python" -c "import json,sys; r=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"
}

# Starts rdma-probe serve with POLICY; sets port and serve_pid.
start_serve() {
  local policy=$1 out=$work/serve-$1-$RANDOM.jsonl
  "$probe" serve --json --listen tcp://127.0.0.1:0 --personality "$personality" \
    --backlog "$backlog" --overflow "$policy" --accept-delay "$delay_ms" \
    --exchange-timeout 2 >"$out" 2>"$out.err" &
  serve_pid=$!
  pids+=("$serve_pid")
  for _ in $(seq 100); do
    [[ -s $out ]] && break
    sleep 0.05
  done
  port=$("$python" -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['address'].rsplit(':',1)[1])" "$out")
}
stop_serve() {
  kill "$serve_pid" 2>/dev/null || true
  wait "$serve_pid" 2>/dev/null || true
}

storm_run() {  # storm_run OUT URI ATTEMPTS [extra...]
  local out=$1 uri=$2 n=$3
  shift 3
  "$storm" "$uri" --attempts "$n" --concurrency "$concurrency" --timeout 15 \
    --duration-limit 600 --progress 0 --personality "$personality" --json "$@" >"$out"
}

echo "bench-backlog: backlog $backlog, acceptor delay $delay_ms ms, $concurrency client threads, loopback, $(nproc) cores"
echo
echo "1. accepted connections per second, listener saturated ($rate_attempts attempts)"
"$python" "$work/raw_server.py" "$backlog" "$delay_ms" >"$work/raw.port" &
pids+=("$!")
for _ in $(seq 100); do [[ -s $work/raw.port ]] && break; sleep 0.05; done
raw_port=$(cat "$work/raw.port")
storm_run "$work/raw.json" "tcp://127.0.0.1:$raw_port" "$rate_attempts" --raw-tcp
raw_rate=$(field "$work/raw.json" 'r["connected_per_s"]')
printf '   %-28s %9.1f accepted/s  (connected %s of %s, p50 %s ms, p99 %s ms)\n' "raw TCP accept loop" \
  "$raw_rate" "$(field "$work/raw.json" 'r["outcomes"]["connected"]')" "$rate_attempts" \
  "$(field "$work/raw.json" 'r["latency_ms"]["connected"]["p50"]')" \
  "$(field "$work/raw.json" 'r["latency_ms"]["connected"]["p99"]')"
for policy in drop reject; do
  start_serve "$policy"
  storm_run "$work/rate-$policy.json" "tcp://127.0.0.1:$port" "$rate_attempts"
  stop_serve
  rate=$(field "$work/rate-$policy.json" 'r["connected_per_s"]')
  printf '   %-28s %9.1f accepted/s  (%s; ratio to raw %.3f)\n' "rdma-probe serve, $policy" "$rate" \
    "$(field "$work/rate-$policy.json" '", ".join(f"{k} {v}" for k, v in r["outcomes"].items() if v)')" \
    "$("$python" -c "print($rate / $raw_rate if $raw_rate else 0)")"
done

echo
echo "2. time for a storm of N attempts to drain (no retries)"
for policy in drop reject; do
  prev=""
  for n in $drain_sizes; do
    start_serve "$policy"
    storm_run "$work/drain-$policy-$n.json" "tcp://127.0.0.1:$port" "$n"
    stop_serve
    t=$(field "$work/drain-$policy-$n.json" 'r["elapsed_s"]')
    growth=""
    [[ -n $prev ]] && growth=$("$python" -c "print(f'x{$t / $prev:.2f} for x{$n / $prev_n:.0f} attempts')")
    printf '   %-7s N=%-6s %8.2f s  %s  [%s]\n' "$policy" "$n" "$t" "$growth" \
      "$(field "$work/drain-$policy-$n.json" '", ".join(f"{k} {v}" for k, v in r["outcomes"].items() if v)')"
    prev=$t
    prev_n=$n
  done
done
