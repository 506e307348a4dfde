#!/usr/bin/env bash
# interop-run.sh - the main job: installs what it needs, builds, installs rdma-probe and the
# Python package, builds a lab, runs the interop matrix and prints it.
#
# Usage: tools/interop-run.sh [--lab FILE] [--results DIR] [--build-dir DIR] [--no-build]
#                             [--strict] [-- PYTEST_ARGS...]
#   --lab FILE       YAML lab file of real hosts reached over SSH (rdma_interop.lab schema;
#                    rdma-probe must be on their PATH). Default: two network namespaces on
#                    this machine joined by a veth pair, 198.18.0.0/15 (needs root).
#   --results DIR    where the reports go: matrix.txt, matrix.json, matrix-junit.xml and
#                    matrix.html (one self-contained page: the matrix as a coloured grid,
#                    each cell opening its evidence), the kernel's in DIR/kernel/, the
#                    devices' in DIR/devices/ (default $RDMA_INTEROP_RESULTS or
#                    interop-results/ in the repository; a relative DIR, as a relative
#                    --lab FILE, is taken from where the script was run). Checked before
#                    anything runs: it must be a directory we can write, or one we can create.
#   --strict         FINDING cells (a peer that deviates from the standard or crashed) fail
#                    the run too, and are failures in the JUnit files
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
# Verdicts, in every matrix: PASS; XFAIL (the standard requires this failure and both sides
# reported it); FINDING (the peer deviates from the standard or crashed: evidence attached);
# FAIL (we or the harness did something wrong or unexplained); SKIP (with the reason).
#
# Exit status: 0 when no cell FAILed (FINDINGs are reported, not failed: see --strict; the
# kernel and device matrices may SKIP with the device's reason); 1 when a cell FAILed, a cell
# of the personality matrix was skipped, a stage's tests failed or wrote no matrix, or, with
# --strict, a cell is a FINDING; 2 on bad usage, an unusable --results included.
set -uo pipefail

caller=$(pwd)  # relative --lab and --results are the caller's, as any command's paths are
cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD_DIR:-build}
jobs=${JOBS:-$(nproc)}
results=${RDMA_INTEROP_RESULTS:-$root/interop-results}
lab_file=""
do_build=1
do_kernel=1
do_devices=1
strict=0
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
    --strict) strict=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; pytest_extra=("$@"); break ;;
    *) echo "interop-run: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n "$lab_file" ]]; then
  [[ "$lab_file" = /* ]] || lab_file=$caller/$lab_file
  [[ -f "$lab_file" ]] || { echo "interop-run: no such lab file: $lab_file" >&2; exit 2; }
  lab_file=$(cd "$(dirname "$lab_file")" && pwd)/$(basename "$lab_file")
fi
[[ "$results" = /* ]] || results=$caller/$results

# Refused before anything runs: a run that cannot save its reports is wasted.
results_problem() {
  local dir=$1 probe
  if [[ -e $dir && ! -d $dir ]]; then echo "it is not a directory"; return; fi
  mkdir -p -- "$dir" 2>/dev/null || { echo "it cannot be created"; return; }
  probe=$(mktemp -p "$dir" .interop-run-write-check.XXXXXX 2>/dev/null) ||
    { echo "it is not writable"; return; }
  rm -f -- "$probe"
}
result_dirs=("$results")
[[ $do_kernel -eq 1 ]] && result_dirs+=("$results/kernel")
[[ $do_devices -eq 1 ]] && result_dirs+=("$results/devices")
for dir in "${result_dirs[@]}"; do
  problem=$(results_problem "$dir")
  if [[ -n $problem ]]; then
    echo "interop-run: --results: cannot write reports to $dir: $problem" >&2
    exit 2
  fi
done
[[ $strict -eq 1 ]] && export RDMA_INTEROP_STRICT=1

step() { printf '\n==> %s\n' "$*"; }
as_root=()
[[ $(id -u) -eq 0 ]] || as_root=(sudo)

if [[ $do_build -eq 1 ]]; then
  step "dependencies"
  bash tools/install-deps.sh || exit 1

  step "build ($build, $jobs jobs)"
  cmake -S . -B "$build" >/dev/null && cmake --build "$build" -j "$jobs" --target toolkit || exit 1

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
rm -f "$results/matrix.json" "$results/matrix.html"
# --opt=value: options a conftest defines are unknown to pytest's first pass over the command
# line, which would otherwise take a separate value for a test path (and root the run at /).
pytest_args=(tests/interop -v -p no:cacheprovider --rootdir="$root" --rdma-probe="$probe"
             --results="$results")
[[ -n "$lab_file" ]] && pytest_args+=(--lab="$lab_file")
/usr/bin/python3 -m pytest "${pytest_args[@]}" "${pytest_extra[@]}"
pytest_status=$?
# The verdict comes from the matrices themselves (rdma_interop.run_verdict, from this
# checkout) after the last stage: every cell of the personality matrix must run, no cell
# may FAIL.
verdict_args=(--stage "interop matrix" "$results/matrix.json" "$pytest_status"
              --no-skips "interop matrix")
reports=("$results/matrix.html")

if [[ $do_kernel -eq 1 ]]; then
  step "kernel peers: siw and rxe in a qemu guest (results in $results/kernel)"
  rm -f "$results/kernel/matrix.json" "$results/kernel/matrix.html"
  if bash tools/kernel-guest/build-guest.sh; then
    # The kernel's deviations and crashes are FINDING cells; the tests fail only when our
    # side misbehaves or a case cannot be observed.
    RDMA_INTEROP_RESULTS="$results" RDMA_INTEROP_BUILD="$root/$build" \
      /usr/bin/python3 -m pytest tests/kernel -q -rs -p no:cacheprovider --rootdir="$root"
    kernel_status=$?
  else
    echo "interop-run: could not build the kernel guest" >&2
    kernel_status=1
  fi
  verdict_args+=(--stage "kernel peers" "$results/kernel/matrix.json" "$kernel_status")
  reports+=("$results/kernel/matrix.html")
fi

if [[ $do_devices -eq 1 ]]; then
  step "device tier: siw with siw, rxe with rxe across two qemu guests (results in $results/devices)"
  rm -f "$results/devices/device-matrix.json" "$results/devices/device-matrix.html"
  if bash tools/kernel-guest/build-guest.sh; then
    RDMA_INTEROP_RESULTS="$results" RDMA_INTEROP_BUILD="$root/$build" \
      /usr/bin/python3 -m pytest tests/devices -q -rs -p no:cacheprovider --rootdir="$root"
    devices_status=$?
  else
    echo "interop-run: could not build the kernel guest" >&2
    devices_status=1
  fi
  verdict_args+=(--stage "device tier" "$results/devices/device-matrix.json" "$devices_status")
  reports+=("$results/devices/device-matrix.html")
fi

step "verdict"
[[ $strict -eq 1 ]] && verdict_args+=(--strict)
PYTHONPATH="$root/bindings/python" /usr/bin/python3 -m rdma_interop.run_verdict "${verdict_args[@]}"
status=$?
for page in "${reports[@]}"; do
  [[ -f $page ]] && echo "interop-run: report: $page"
done
exit $status
