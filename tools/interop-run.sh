#!/usr/bin/env bash
# interop-run.sh - the main job: installs what it needs, builds, installs rdma-probe and the
# Python package, builds a lab, runs the interop matrix and prints it.
#
# Usage: tools/interop-run.sh [--lab FILE] [--results DIR] [--build-dir DIR] [--no-build]
#                             [-- PYTEST_ARGS...]
#   --lab FILE       YAML lab file of real hosts reached over SSH (rdma_interop.lab schema;
#                    rdma-probe must be on their PATH). Default: two network namespaces on
#                    this machine joined by a veth pair, 198.18.0.0/15 (needs root).
#   --results DIR    where matrix.json, matrix-junit.xml and matrix.txt go
#                    (default $RDMA_INTEROP_RESULTS or ./interop-results)
#   --build-dir DIR  CMake build directory (default $BUILD_DIR or build)
#   --no-build       skip dependencies, build and install (rerun against what is installed)
#   --no-kernel      skip the kernel peers: by default the Linux kernel's siw and rxe, in a
#                    qemu guest (tools/kernel-guest), get their own matrix after the first,
#                    written to RESULTS/kernel/ (a few minutes on 2 cores)
#   --no-devices     skip the device tier: by default, after the kernel matrix, two qemu
#                    guests with kernel siw and rxe form a lab reached over SSH and the
#                    device tier runs across them (python3 -m rdma_interop.device_tier),
#                    written to RESULTS/devices/ (about 7 minutes on 2 cores)
#   -- ARGS          passed to pytest, e.g. -- -k 'siw and cxgb4'
# Environment: JOBS (default nproc).
#
# Exits 0 when every cell of the matrix is PASS or an expected, explained failure (XFAIL);
# 1 when a cell failed or was skipped, or nothing ran; 2 on bad usage.
set -uo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
results=${RDMA_INTEROP_RESULTS:-$root/interop-results}
lab_file=""
do_build=1
do_kernel=1
do_devices=1
pytest_extra=()

usage() { sed -n '2,/^set /p' "$0" | sed -e '/^set /d' -e 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lab) [[ $# -ge 2 ]] || { echo "interop-run: --lab needs a file" >&2; exit 2; }
           lab_file=$2; shift 2 ;;
    --lab=*) lab_file=${1#--lab=}; shift ;;
    --results) [[ $# -ge 2 ]] || { echo "interop-run: --results needs a directory" >&2; exit 2; }
               results=$2; shift 2 ;;
    --results=*) results=${1#--results=}; shift ;;
    --build-dir) [[ $# -ge 2 ]] || { echo "interop-run: --build-dir needs a directory" >&2; exit 2; }
                 build=$2; shift 2 ;;
    --build-dir=*) build=${1#--build-dir=}; shift ;;
    --no-build) do_build=0; shift ;;
    --no-kernel) do_kernel=0; shift ;;
    --no-devices) do_devices=0; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; pytest_extra=("$@"); break ;;
    *) echo "interop-run: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n "$lab_file" ]]; then
  [[ -f "$lab_file" ]] || { echo "interop-run: no such lab file: $lab_file" >&2; exit 2; }
  lab_file=$(cd "$(dirname "$lab_file")" && pwd)/$(basename "$lab_file")
fi
[[ "$results" = /* ]] || results=$root/$results

step() { printf '\n==> %s\n' "$*"; }
as_root=()
[[ $(id -u) -eq 0 ]] || as_root=(sudo)

if [[ $do_build -eq 1 ]]; then
  step "dependencies"
  bash tools/install-deps.sh || exit 1

  step "build ($build, $jobs jobs)"
  cmake -S . -B "$build" >/dev/null && cmake --build "$build" -j "$jobs" || exit 1

  step "install (rdma-probe on PATH, rdma_interop for /usr/bin/python3)"
  "${as_root[@]}" cmake --install "$build" >/dev/null || exit 1
fi

probe=$(command -v rdma-probe) || {
  echo "interop-run: rdma-probe is not on PATH after the install (PATH=$PATH)" >&2
  exit 1
}
# From a neutral directory, so this is the installed package and not the source tree.
(cd / && /usr/bin/python3 -c "import rdma_interop.lab, rdma_interop.matrix") || {
  echo "interop-run: /usr/bin/python3 cannot import the installed rdma_interop package" >&2
  exit 1
}

if [[ -z "$lab_file" && $(id -u) -ne 0 ]]; then
  echo "interop-run: the default namespace lab needs root (ip netns add); run as root or pass --lab FILE" >&2
  exit 1
fi

step "interop matrix (${lab_file:-2 namespace hosts}; results in $results)"
rm -f "$results/matrix.json"
# --opt=value: options a conftest defines are unknown to pytest's first pass over the command
# line, which would otherwise take a separate value for a test path (and root the run at /).
pytest_args=(tests/interop -v -p no:cacheprovider --rootdir="$root" --rdma-probe="$probe"
             --results="$results")
[[ -n "$lab_file" ]] && pytest_args+=(--lab="$lab_file")
/usr/bin/python3 -m pytest "${pytest_args[@]}" "${pytest_extra[@]}"
pytest_status=$?

# The verdict comes from the matrix itself: every cell PASS or XFAIL, at least one cell.
/usr/bin/python3 - "$results/matrix.json" "$pytest_status" <<'EOF'
import json, sys
path, pytest_status = sys.argv[1], int(sys.argv[2])
try:
    s = json.load(open(path))["summary"]
except (OSError, ValueError, KeyError) as e:
    print(f"interop-run: no matrix ({e}); pytest exited {pytest_status}")
    sys.exit(1)
ok = s["total"] > 0 and s["fail"] == 0 and s["skip"] == 0 and pytest_status == 0
print(f"\ninterop-run: {s['total']} cases: {s['pass']} pass, {s['expected-fail']} expected-fail, "
      f"{s['fail']} fail, {s['skip']} skip -> {'OK' if ok else 'FAILED'} ({path})")
sys.exit(0 if ok else 1)
EOF
status=$?

if [[ $do_kernel -eq 1 ]]; then
  step "kernel peers: siw and rxe in a qemu guest (results in $results/kernel)"
  rm -f "$results/kernel/matrix.json"
  if bash tools/kernel-guest/build-guest.sh; then
    RDMA_INTEROP_RESULTS="$results" RDMA_INTEROP_BUILD="$root/$build" \
      /usr/bin/python3 -m pytest tests/kernel -q -rs -p no:cacheprovider --rootdir="$root"
    kernel_status=$?
    # The kernel matrix shows findings (kernel deviations, crashes) as cells; the verdict is
    # the tests', which fail only when our side misbehaves or a case cannot be observed.
    [[ -f "$results/kernel/matrix.json" ]] || kernel_status=1
    [[ $kernel_status -eq 0 ]] || status=1
    echo "interop-run: kernel peers: pytest exited $kernel_status ($results/kernel/matrix.txt)"
  else
    echo "interop-run: could not build the kernel guest" >&2
    status=1
  fi
fi

if [[ $do_devices -eq 1 ]]; then
  step "device tier: siw with siw, rxe with rxe across two qemu guests (results in $results/devices)"
  rm -f "$results/devices/device-matrix.json"
  if bash tools/kernel-guest/build-guest.sh; then
    RDMA_INTEROP_RESULTS="$results" RDMA_INTEROP_BUILD="$root/$build" \
      /usr/bin/python3 -m pytest tests/devices -q -rs -p no:cacheprovider --rootdir="$root"
    devices_status=$?
    [[ -f "$results/devices/device-matrix.json" ]] || devices_status=1
    [[ $devices_status -eq 0 ]] || status=1
    echo "interop-run: device tier: pytest exited $devices_status ($results/devices/device-matrix.txt)"
  else
    echo "interop-run: could not build the kernel guest" >&2
    status=1
  fi
fi
exit $status
