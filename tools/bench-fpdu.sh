#!/usr/bin/env bash
# bench-fpdu.sh - runs tests/bench/fpdu_bench and prints FPDU rates against the baselines.
#
#   tools/bench-fpdu.sh BUILD_DIR [extra Google Benchmark flags...]
#
# BUILD_DIR should be a Release build (-DCMAKE_BUILD_TYPE=Release). Environment:
#   BENCH_REPETITIONS  repetitions per benchmark, medians are reported (default 3)
#   BENCH_JSON         keep the raw JSON at this path (default: a temporary file)
#   BENCH_STRICT=1     exit 1 if a target is missed (a benchmark's error always does)
# Targets (payload >= 4 KiB): encode (CRC on, markers off) >= 0.9x the CRC32c-alone rate;
# decode (CRC on, markers off) >= 0.8x the CRC32c+memcpy rate, where CRC32c+memcpy is
# measured: crc32c_update then memcpy of the same buffer in one loop (the harmonic
# combination 1/(1/crc + 1/memcpy) of the separate runs is printed beside it).
set -euo pipefail

[[ $# -ge 1 ]] || { echo "usage: $0 BUILD_DIR [benchmark flags...]" >&2; exit 2; }
build_dir=$1
shift
bench="$build_dir/tests/bench/fpdu_bench"
[[ -x $bench ]] || { echo "$bench not built (configure with -DRDMA_INTEROP_BENCH=ON)" >&2; exit 2; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rdma-interop-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
json=${BENCH_JSON:-$tmp/fpdu_bench.json}

"$bench" --benchmark_out="$json" --benchmark_out_format=json \
  --benchmark_repetitions="${BENCH_REPETITIONS:-3}" --benchmark_report_aggregates_only=true \
  "$@" >"$tmp/console.txt" 2>&1 || { cat "$tmp/console.txt" >&2; exit 1; }

BENCH_STRICT=${BENCH_STRICT:-0} /usr/bin/python3 - "$json" <<'PY'
import json
import os
import sys

with open(sys.argv[1]) as f:
    doc = json.load(f)

rates = {}  # run_name -> bytes/s (median when repeated)
errors = 0  # a benchmark that reports an error fails the run (the bench tier relies on it)
for b in doc["benchmarks"]:
    if b.get("error_occurred"):
        print(f"error: {b['name']}: {b.get('error_message')}", file=sys.stderr)
        errors += 1
        continue
    agg = b.get("aggregate_name")
    if agg not in (None, "median"):
        continue
    if agg is None and b.get("run_type") == "iteration" and b["run_name"] in rates:
        continue  # repeated without aggregates: keep the first
    rates[b["run_name"]] = b.get("bytes_per_second", 0.0)

ctx = doc.get("context", {})
print(f"fpdu_bench on {ctx.get('host_name', '?')}: {ctx.get('num_cpus', '?')} CPUs at "
      f"{ctx.get('mhz_per_cpu', '?')} MHz, load {ctx.get('load_avg', ['?'])[0]}, "
      f"{ctx.get('date', '')}")
print("GB/s = 1e9 payload octets per second (median of the repetitions)")

sizes = sorted({int(n.rsplit("/", 1)[1]) for n in rates})
gb = lambda r: r / 1e9 if r else float("nan")
label = lambda s: f"{s // 1024}K" if s >= 1024 else str(s)
missed = met = 0

print()
print("Targets (CRC on, markers off; CRC+memcpy measured as crc32c_update then memcpy in one loop)")
hdr = (f"{'size':>5} {'crc32c':>7} {'memcpy':>7} {'crc+cpy':>7} {'(harm.)':>7} | "
       f"{'encode':>7} {'enc/crc':>7} {'>=0.9':>5} | {'decode':>7} {'dec/c+m':>7} {'>=0.8':>5}")
print(hdr)
print("-" * len(hdr))
for s in sizes:
    crc = rates.get(f"crc32c/{s}")
    cpy = rates.get(f"memcpy/{s}")
    both = rates.get(f"crc32c_memcpy/{s}")
    harm = 1 / (1 / crc + 1 / cpy) if crc and cpy else None
    enc = rates.get(f"encode/crc1/markers0/{s}")
    dec = rates.get(f"decode/crc1/markers0/{s}")
    enc_ratio = enc / crc if enc and crc else float("nan")
    dec_ratio = dec / both if dec and both else float("nan")

    def mark(ratio, target):
        global missed, met
        if s < 4096:
            return "-"
        if ratio >= target:
            met += 1
            return "yes"
        missed += 1
        return "NO"

    print(f"{label(s):>5} {gb(crc):7.2f} {gb(cpy):7.2f} {gb(both):7.2f} {gb(harm):7.2f} | "
          f"{gb(enc):7.2f} {enc_ratio:7.2f} {mark(enc_ratio, 0.9):>5} | "
          f"{gb(dec):7.2f} {dec_ratio:7.2f} {mark(dec_ratio, 0.8):>5}")

print()
print("All variants, GB/s (c = CRC, m = markers; decode_recv16k: the stream in 16 KiB pieces)")
cols = [("encode", 1, 0), ("encode", 1, 1), ("encode", 0, 0), ("encode", 0, 1),
        ("decode", 1, 0), ("decode", 1, 1), ("decode", 0, 0), ("decode", 0, 1),
        ("decode_recv16k", 1, 0)]
names = [f"{'enc' if w == 'encode' else 'dec' if w == 'decode' else 'dec16k'} c{c}m{m}"
         for w, c, m in cols]
print(f"{'size':>5} " + " ".join(f"{n:>10}" for n in names))
for s in sizes:
    cells = [gb(rates.get(f"{w}/crc{c}/markers{m}/{s}")) for w, c, m in cols]
    print(f"{label(s):>5} " + " ".join(f"{v:10.2f}" for v in cells))
print()
print("64K is the largest payload one FPDU carries: 65517 octets (markers off), 64493 (on).")
print(f"targets met: {met}/{met + missed}")
if errors or not rates:
    print(f"bench-fpdu: {errors} benchmarks reported an error, {len(rates)} gave a rate",
          file=sys.stderr)
    sys.exit(1)
if missed and os.environ.get("BENCH_STRICT") == "1":
    sys.exit(1)
PY
