#!/usr/bin/env bash
# install-deps.sh - installs rdma-interop's build and test dependencies from Debian.
#
# Usage: tools/install-deps.sh
# Installs only what is missing (apt-get, as root; through sudo when not root), so a second
# run is quick and offline. README.md says why each package is here.
set -euo pipefail

packages=(
  # build
  cmake g++ make pkg-config clang libclang-rt-14-dev
  # core dependencies
  libisal-dev libibverbs-dev librdmacm-dev liburing-dev
  # personality files (JSON) and the CLIs; man-db renders their man pages (cli tier)
  nlohmann-json3-dev libcli11-dev man-db
  # tests, benchmarks (iperf3: the yardstick e2e_bench's raw TCP stream must match), fuzzing
  libgtest-dev libgmock-dev libbenchmark-dev iperf3
  # Python bindings and the pytest suites (Debian's, for /usr/bin/python3)
  python3 python3-dev python3-pybind11 pybind11-dev python3-pytest python3-mypy python3-yaml
  # captures and the namespace lab
  tshark tcpdump iproute2 nftables
  # the HTML report's test in a real browser (headless, no network)
  chromium
  # the kernel tier: a qemu guest running Debian's kernel with siw and rxe
  # (build-guest.sh fetches the kernel, its headers and source itself)
  qemu-system-x86 busybox-static cpio xz-utils kmod
  # playbooks/ and the ansible tier: what the prerequisites role installs on a lab node, the
  # control machine's Ansible, and the sshd each namespace node of the tier runs
  rdma-core ibverbs-utils rdmacm-utils perftest
  ansible-core ansible-lint openssh-server openssh-client
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

as_root=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  as_root=(sudo)
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
# tshark asks whether non-root users may capture; the default (no) is what a lab wants.
echo "wireshark-common wireshark-common/install-setuid boolean false" | "${as_root[@]}" debconf-set-selections
# iperf3 asks whether to run a server on port 5201 at boot: the benchmark starts its own.
echo "iperf3 iperf3/start_daemon boolean false" | "${as_root[@]}" debconf-set-selections
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
