#!/usr/bin/dash
# /init of the rdma-interop kernel guest (see build-guest.sh). Runs as PID 1 from the
# initramfs: brings up the network the host reaches through qemu's user-mode hostfwd, the
# 9p share with the host's build, the kernel's siw and rxe, and the command agent.
#
# Devices it makes:
#   siw0  soft-iWARP on eth0 (10.0.2.15; the host is 10.0.2.2 through qemu's user network)
#   rxe0  soft-RoCE on veth-a (10.9.0.1), its peer rxe1 on veth-b (10.9.0.2): RoCE traffic
#         stays inside the guest, so the two rxe ends and the siw end never share a netdev.
# As a lab node (rdma_lab.node=N on the kernel command line, see below) it makes instead
# siw0 and rxe0 on two link NICs joined to the other nodes, and runs an SSH server.
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

# Lab node mode (tests/devices/guest_lab.py): the kernel command line carries
#   rdma_lab.node=N      this node's number, 1..254
#   rdma_lab.key=B64     the root's authorized SSH key, base64 (a key line has spaces)
# and qemu gives the node two link NICs, found by MAC (PCI order is not a promise):
#   52:54:00:12:04:NN  the iWARP link: 198.18.4.N/24, siw0 on it
#   52:54:00:12:05:NN  the RoCE link:  198.18.5.N/24, rxe0 on it
# Each link is a qemu socket netdev to the other node (127.0.0.1 on the host, never
# multicast). siw and rxe get a link each: rdma_cm picks a device by the source address, and
# two devices on one netdev would make that choice ambiguous.
lab_node=$(sed -n 's/.*rdma_lab\.node=\([0-9]*\).*/\1/p' /proc/cmdline)
lab_key=$(sed -n 's/.*rdma_lab\.key=\([A-Za-z0-9+\/=]*\).*/\1/p' /proc/cmdline)
nic_by_mac() {
  for dev in /sys/class/net/*; do
    [ "$(cat "$dev/address")" = "$1" ] && { basename "$dev"; return 0; }
  done
  return 1
}
if [ -n "$lab_node" ]; then
  nn=$(printf '%02x' "$lab_node")
  iw_nic=$(nic_by_mac "52:54:00:12:04:$nn") || fail "lab node $lab_node: no iWARP link NIC"
  roce_nic=$(nic_by_mac "52:54:00:12:05:$nn") || fail "lab node $lab_node: no RoCE link NIC"
  ip addr add "198.18.4.$lab_node/24" dev "$iw_nic"
  ip addr add "198.18.5.$lab_node/24" dev "$roce_nic"
  ip link set "$iw_nic" up
  ip link set "$roce_nic" up
  hostname "node$lab_node"
else
  ip link add veth-a type veth peer name veth-b
  ip addr add 10.9.0.1/24 dev veth-a
  ip addr add 10.9.0.2/24 dev veth-b
  ip link set veth-a up
  ip link set veth-b up
fi

mkdir -p /host
share_opts=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$share_opts" host0 /host 2>/dev/null || echo "rdma-guest: no 9p share" >/dev/console

if [ -n "$lab_node" ]; then
  rdma link add siw0 type siw netdev "$iw_nic" || fail "rdma link add siw0"
  rdma link add rxe0 type rxe netdev "$roce_nic" || fail "rdma link add rxe0"
  # sshd for the device tier: key login as root only, host keys made at first connect.
  mkdir -p /root/.ssh /etc/dropbear && chmod 700 /root/.ssh
  echo "$lab_key" | base64 -d >/root/.ssh/authorized_keys || fail "rdma_lab.key is not base64"
  chmod 600 /root/.ssh/authorized_keys
  dropbear -R -s -E -p 22 2>/tmp/dropbear.log || fail "dropbear did not start"
else
  rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0"
  rdma link add rxe0 type rxe netdev veth-a || fail "rdma link add rxe0"
  rdma link add rxe1 type rxe netdev veth-b || echo "rdma-guest: rdma link add rxe1 failed" >/dev/console
fi

# The agent: one shell command per TCP connection on port 7000 (forwarded by the host).
nc -ll -p 7000 -e /bin/rdma-guest-agent &
echo "RDMA-GUEST-READY kernel=$(uname -r)" >/dev/console
while true; do sleep 3600; done
