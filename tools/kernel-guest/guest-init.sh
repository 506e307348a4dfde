#!/usr/bin/dash
# /init of the rdma-interop kernel guest (see build-guest.sh). Runs as PID 1 from the
# initramfs: brings up the network the host reaches through qemu's user-mode hostfwd, the
# 9p share with the host's build, the kernel's siw and rxe, and the command agent.
#
# Devices it makes:
#   siw0  soft-iWARP on eth0 (10.0.2.15; the host is 10.0.2.2 through qemu's user network)
#   rxe0  soft-RoCE on veth-a (10.9.0.1), its peer rxe1 on veth-b (10.9.0.2): RoCE traffic
#         stays inside the guest, so the two rxe ends and the siw end never share a netdev.
# The console prints "RDMA-GUEST-READY" once the agent listens, or "RDMA-GUEST-FAILED: why".
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts
ulimit -l unlimited
ulimit -c 0

fail() {
  echo "RDMA-GUEST-FAILED: $*" >/dev/console
  exec sh
}

for m in virtio_pci virtio_net 9pnet_virtio 9p veth crc32_generic crc32c_generic siw rdma_rxe ib_uverbs rdma_ucm; do
  modprobe "$m" || fail "modprobe $m"
done

ip link set lo up
ip link set eth0 up || fail "no eth0"
ip addr add 10.0.2.15/24 dev eth0
ip route add default via 10.0.2.2
ip link add veth-a type veth peer name veth-b
ip addr add 10.9.0.1/24 dev veth-a
ip addr add 10.9.0.2/24 dev veth-b
ip link set veth-a up
ip link set veth-b up

mkdir -p /host
share_opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$share_opts" host0 /host 2>/dev/null || echo "rdma-guest: no 9p share" >/dev/console

rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
rdma link add rxe0 type rxe netdev veth-a || fail "rdma link add rxe0"
rdma link add rxe1 type rxe netdev veth-b || echo "rdma-guest: rdma link add rxe1 failed" >/dev/console

# The agent: one shell command per TCP connection on port 7000 (forwarded by the host).
nc -ll -p 7000 -e /bin/rdma-guest-agent &
echo "RDMA-GUEST-READY kernel=$(uname -r)" >/dev/console
while true; do sleep 3600; done
