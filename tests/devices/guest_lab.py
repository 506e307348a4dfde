"""A lab of qemu guests on this machine, each a lab node with the kernel's siw and rxe,
reached over real SSH: the proof of the device tier where the host has no RDMA device.

    with GuestLab(Path("interop-results/device-lab"), nodes=2) as lab:
        lab.lab_file          # a lab file (rdma_interop.lab schema) naming every node
        lab.guests[1].stop()  # a node dies

Each guest is tests/support/guest.py's guest booted as a lab node (tools/kernel-guest/
guest-init.sh, "lab node mode"): an SSH server (dropbear) reached through `hostfwd` on
127.0.0.1, and two link NICs, one per device kind, each a qemu dgram netdev to a switch port
of link_hub.py (UDP on 127.0.0.1; never multicast, which would leave the machine):

    node N   siw0 on the iWARP link 198.18.4.N/24    rxe0 on the RoCE link 198.18.5.N/24

The host never sends to a 198.18.4/5 address: only the guests are on those links.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

from tests.support.guest import SSH_PORT, Guest, GuestError, LabLink, LabNode, guest_path
from tests.support.paths import REPO_ROOT, build_dir

from .link_hub import LinkHub

#: The directories, in the build tree, that hold our tools; put on a node's PATH.
TOOL_DIRS = ("tools", "tools/rdma-probe", "tools/verbs-check", "tools/rdma-storm",
             "tools/rdma-mesh", "tools/backlog-stat")


class GuestLab:
    """Lab-node guests joined by an iWARP link and a RoCE link; a lab file for them."""

    def __init__(self, work_dir: Path, nodes: int = 2, memory_mb: int = 768) -> None:
        if not 2 <= nodes <= 254:
            raise ValueError("a guest lab has 2 to 254 nodes")
        self.nodes = nodes
        self.hubs: dict[str, LinkHub] = {}
        self.work_dir = Path(work_dir)
        self.memory_mb = memory_mb
        self.guests: list[Guest] = []
        self.lab_file = self.work_dir / "lab.yml"
        self.key = self.work_dir / "lab_ed25519"
        self.known_hosts = self.work_dir / "known_hosts"
        self.boot_seconds = 0.0

    def __enter__(self) -> GuestLab:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for stale in (self.key, self.key.with_suffix(".pub"), self.known_hosts):
            stale.unlink(missing_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "rdma-interop-lab",
                        "-f", str(self.key)], check=True, stdin=subprocess.DEVNULL)
        self.known_hosts.touch()
        pub = self.key.with_suffix(".pub").read_text()
        self.hubs = {kind: LinkHub(self.nodes) for kind in ("iwarp", "roce")}
        for hub in self.hubs.values():
            hub.start()
        for number in range(1, self.nodes + 1):
            links = tuple(LabLink(kind, hub.qemu_netdev(number - 1, f"l{kind}"), f"l{kind}")
                          for kind, hub in self.hubs.items())
            self.guests.append(Guest(log_dir=self.work_dir / f"node{number}", forwards=1,
                                     memory_mb=self.memory_mb,
                                     lab_node=LabNode(number, pub, links)))
        began = time.monotonic()
        errors: list[BaseException] = []

        def boot(g: Guest) -> None:
            try:
                g.start()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=boot, args=(g,)) for g in self.guests]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise GuestError(f"guest lab did not boot: {errors[0]}") from errors[0]
        self.boot_seconds = time.monotonic() - began
        self._write_lab_file()

    def _write_lab_file(self) -> None:
        paths = [guest_path(build_dir() / d) for d in TOOL_DIRS if (build_dir() / d).is_dir()]
        lines = ["# Written by tests/devices/guest_lab.py for this run's guests.", "hosts:"]
        q = json.dumps  # JSON strings are YAML strings: paths with ': ' or '#' stay paths
        for g in self.guests:
            node = g.lab_node
            assert node is not None
            lines += [
                f"  - name: node{node.number}",
                f"    address: {node.address('iwarp')}",
                "    devices: all",
                f"    path: [{', '.join(q(p) for p in paths)}]",
                "    environment:",
                f"      RDMA_INTEROP_PERSONALITY_DIR: "
                f"{q(guest_path(REPO_ROOT / 'tools' / 'personalities'))}",
                "    ssh:",
                "      host: 127.0.0.1",
                "      user: root",
                f"      port: {g.host_port(SSH_PORT)}",
                f"      key: {q(str(self.key))}",
                f"      known_hosts: {q(str(self.known_hosts))}",
            ]
        self.lab_file.write_text("\n".join(lines) + "\n")

    def stop(self) -> None:
        for g in self.guests:
            g.stop()
        for hub in self.hubs.values():
            hub.stop()
