#!/usr/bin/env bash
# build-guest.sh - builds the qemu guest that runs the Linux kernel's own siw and rxe.
#
# Usage: tools/kernel-guest/build-guest.sh [--print-dir] [--force]
#
# Fetches Debian's current linux-image-amd64 kernel and, because Debian builds without
# CONFIG_RDMA_SIW, builds siw.ko out of tree from linux-source-6.1 against the matching
# headers. Assembles an initramfs root without debootstrap: busybox, iproute2 (the `rdma`
# tool), rdma-core's userspace (libibverbs, librdmacm, the siw/rxe providers, rping,
# ibv_* and perftest) and every library they link, extracted with dpkg-deb; the kernel
# modules the guest needs, with depmod run over them; our /init and command agent.
#
# The result is cached under $RDMA_INTEROP_GUEST_CACHE (default ~/.cache/rdma-interop/guest)
# in a directory named after the kernel version, so a second run prints it in a second:
#   vmlinuz  initrd.img  manifest.json
# The last line of output is that directory (--print-dir prints only that, building first
# if needed). --force rebuilds.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache_root=${RDMA_INTEROP_GUEST_CACHE:-$HOME/.cache/rdma-interop/guest}
print_dir=0
force=0
for arg in "$@"; do
  case $arg in
    --print-dir) print_dir=1 ;;
    --force) force=1 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-guest: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

log() { [[ $print_dir -eq 1 ]] || printf 'build-guest: %s\n' "$*" >&2; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi; }
export DEBIAN_FRONTEND=noninteractive

# The guest runs whatever kernel Debian currently ships as linux-image-amd64.
kver=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: linux-image-\(.*\)$/\1/p' | head -1)
if [[ -z $kver ]]; then
  as_root apt-get update -qq >&2
  kver=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: linux-image-\(.*\)$/\1/p' | head -1)
fi
[[ -n $kver ]] || { echo "build-guest: cannot tell which kernel linux-image-amd64 is" >&2; exit 1; }
out="$cache_root/$kver"
stamp=$(sha256sum "$here"/build-guest.sh "$here"/guest-init.sh "$here"/guest-agent.sh | sha256sum | cut -c1-16)

if [[ $force -eq 0 && -f $out/manifest.json ]] && grep -q "\"recipe\": \"$stamp\"" "$out/manifest.json"; then
  log "cached: $out"
  echo "$out"
  exit 0
fi

log "kernel $kver; building into $out"
need=(qemu-system-x86 busybox-static "linux-headers-$kver" gcc make xz-utils cpio kmod)
missing=()
for p in "${need[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [[ ${#missing[@]} -gt 0 ]]; then
  log "installing ${missing[*]}"
  as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/rdma-guest-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
debs="$work/debs"
root="$work/root"
mkdir -p "$debs" "$root"

# Userspace: the packages we run in the guest and the library closure they depend on.
# Maintainer-script-only and interactive packages are left out: nothing is configured.
# dropbear-bin: the SSH server a lab node needs (the device tier reaches nodes over real SSH).
roots=(busybox-static dash iproute2 ibverbs-providers libibverbs1 librdmacm1 ibverbs-utils
  rdmacm-utils perftest libisal2 libstdc++6 libgcc-s1 libc6 libnl-3-200 libnl-route-3-200
  dropbear-bin)
skip='^(adduser|cdebconf|debconf|dpkg|install-info|passwd|libpam-modules.*|libnewt.*|libslang.*|libtextwrap.*|libdebian-installer.*|tar|pci\.ids|readline-common|kmod|libkmod2)$'
mapfile -t pkgs < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances "${roots[@]}" 2>/dev/null |
  grep -v '^ ' | grep -v '<' | sort -u | grep -Ev "$skip")
log "fetching ${#pkgs[@]} userspace packages and the kernel"
(cd "$debs" && apt-get download -q "${pkgs[@]}" "linux-image-$kver-unsigned" linux-source-6.1 >&2 2>/dev/null) ||
  (cd "$debs" && apt-get download -q "${pkgs[@]}" "linux-image-$kver" linux-source-6.1 >&2)
for deb in "$debs"/*.deb; do
  case $(basename "$deb") in
    linux-image-* | linux-source-*) ;;
    *) dpkg-deb -x "$deb" "$root" ;;
  esac
done

# Kernel image and modules, from the package (not the host: the host runs another kernel).
kroot="$work/kernel"
mkdir -p "$kroot"
dpkg-deb -x "$debs"/linux-image-"$kver"*.deb "$kroot"
cp "$kroot/boot/vmlinuz-$kver" "$work/vmlinuz"

# siw.ko: Debian's config leaves CONFIG_RDMA_SIW unset; build it from the same source release.
log "building siw.ko"
tar -xJf <(dpkg-deb --fsys-tarfile "$debs"/linux-source-6.1_*.deb | tar -xO ./usr/src/linux-source-6.1.tar.xz) \
  -C "$work" --wildcards 'linux-source-6.1/drivers/infiniband/sw/siw/*'
siw_src="$work/linux-source-6.1/drivers/infiniband/sw/siw"
make -s -C "/lib/modules/$kver/build" M="$siw_src" CONFIG_RDMA_SIW=m modules >&2 2>"$work/siw-build.log" ||
  { cat "$work/siw-build.log" >&2; exit 1; }

# Only the modules the guest loads, with everything they depend on.
mods="$root/lib/modules/$kver"
mkdir -p "$mods/kernel" "$mods/extra"
cp "$siw_src/siw.ko" "$mods/extra/"
cp "$kroot/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$mods/"
# crc32c_generic: libcrc32c names it only as a softdep alias ("crc32c"), which we do not resolve.
seeds=(virtio_pci virtio_net veth 9p 9pnet_virtio rdma_rxe rdma_ucm ib_uverbs iw_cm crc32_generic crc32c_generic)
declare -A have=()
queue=()
find_mod() { find "$kroot/lib/modules/$kver/kernel" -name "$1.ko*" -print -quit; }
for s in "${seeds[@]}"; do queue+=("$s"); done
queue+=($(modinfo -F depends "$mods/extra/siw.ko" | tr ',' ' '))
while [[ ${#queue[@]} -gt 0 ]]; do
  m=${queue[0]}
  queue=("${queue[@]:1}")
  m=${m//-/_}
  [[ -n $m && -z ${have[$m]:-} ]] || continue
  have[$m]=1
  f=$(find_mod "$m")
  [[ -z $f ]] && f=$(find_mod "${m//_/-}")
  [[ -n $f ]] || continue  # built in
  rel=${f#"$kroot/lib/modules/$kver/"}
  mkdir -p "$mods/$(dirname "$rel")"
  cp "$f" "$mods/$rel"
  for d in $(modinfo -F depends "$f" | tr ',' ' '); do queue+=("$d"); done
  for d in $(modinfo -F softdep "$f" | tr ' ' '\n' | grep -v ':$' || true); do queue+=("$d"); done
done
depmod -b "$root" "$kver"
log "$(find "$mods" -name '*.ko*' | wc -l) modules"

install -m 0755 "$here/guest-init.sh" "$root/init"
install -m 0755 "$here/guest-agent.sh" "$root/bin/rdma-guest-agent"
# busybox applets where the packages left a gap (mount, modprobe, nc, ...); real tools win.
# Commands run under dash: busybox ash prefers its own applets (busybox ip) to the PATH.
mkdir -p "$root"/{bin,sbin,proc,sys,dev,tmp,run,host,root,etc}
for applet in $("$root/bin/busybox" --list); do
  [[ -e $root/bin/$applet || -e $root/sbin/$applet || -e $root/usr/bin/$applet || -e $root/usr/sbin/$applet ]] ||
    ln -s busybox "$root/bin/$applet"
done
# Debian 12 is merged-/usr: the packages ship /usr/lib, /usr/bin; the loader is /lib64.
for d in bin sbin lib lib64; do
  if [[ -d $root/$d && -d $root/usr/$d && ! -L $root/$d ]]; then cp -a "$root/$d/." "$root/usr/$d/"; rm -rf "${root:?}/$d"; fi
  [[ -e $root/$d ]] || ln -s "usr/$d" "$root/$d"
done
# dash, not busybox sh: an SSH session's commands must find the real tools on PATH first.
echo "root:x:0:0:root:/root:/bin/dash" >"$root/etc/passwd"
printf '/bin/sh\n/bin/dash\n/usr/bin/dash\n' >"$root/etc/shells"
echo "root:x:0:" >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale" "$root/usr/share/info"

log "packing initramfs"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.img"

mkdir -p "$out"
mv "$work/vmlinuz" "$work/initrd.img" "$out/"
cat >"$out/manifest.json" <<JSON
{
  "kernel": "$kver",
  "recipe": "$stamp",
  "built": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "packages": $(printf '%s\n' "${pkgs[@]}" | sed 's/.*/"&"/' | paste -sd, | sed 's/^/[/; s/$/]/'),
  "initrd_bytes": $(stat -c %s "$out/initrd.img")
}
JSON
log "done: $out"
echo "$out"
