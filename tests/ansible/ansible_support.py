"""The ansible tier's lab: namespace nodes that run their own sshd, and ansible-playbook runs.

A SshNodeLab is one NamespaceLab of 1 + n hosts. Host 0 is the control machine (it runs
ansible-playbook and has no sshd: the machine's own namespace has no route into the lab);
hosts 1..n are lab nodes, each running Debian's sshd on its namespace address with a host key
and an authorized key generated for this lab, an install prefix and a state directory of
its own (the namespaces share one filesystem).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdma_interop.lab import NamespaceHost, NamespaceLab

from tests.support.paths import REPO_ROOT, build_dir
from tests.support.waiting import eventually

PLAYBOOKS = REPO_ROOT / "playbooks"
SSHD = "/usr/sbin/sshd"
# sshd's privilege-separation directory; Debian's init script would make it.
SSHD_PRIVSEP_DIR = Path("/run/sshd")
RECAP_RE = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
                      r"\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)", re.M)


@dataclass
class Node:
    name: str
    host: NamespaceHost
    root: Path  # this node's own files: sshd, prefix, state

    @property
    def address(self) -> str:
        return self.host.address

    @property
    def prefix(self) -> Path:
        return self.root / "prefix"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"


@dataclass
class PlaybookRun:
    returncode: int
    output: str
    recap: dict[str, dict[str, int]]

    def changed(self) -> dict[str, int]:
        return {host: counts["changed"] for host, counts in self.recap.items()}

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.output.splitlines()[-lines:])


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP lines: {host: {"ok": n, "changed": n, ...}}."""
    keys = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")
    return {m.group(1): dict(zip(keys, map(int, m.groups()[1:])))
            for m in RECAP_RE.finditer(output)}


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True, timeout=30)


class SshNodeLab:
    """Namespace nodes with sshd, a key for the control machine, and ansible-playbook."""

    def __init__(self, lab: NamespaceLab, workdir: Path) -> None:
        self.lab = lab
        self.workdir = workdir
        self.control = lab.hosts[0]
        self.key = workdir / "id_lab"
        self.known_hosts = workdir / "known_hosts"
        self.nodes = [Node(f"node{i}", host, workdir / f"node{i}")
                      for i, host in enumerate(lab.hosts[1:], 1)]
        self._sshd: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        _keygen(self.key, "rdma-interop ansible tier")
        (self.workdir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        SSHD_PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        known = []
        for node in self.nodes:
            node.root.mkdir()
            host_key = node.root / "ssh_host_ed25519_key"
            _keygen(host_key, node.name)
            known.append(f"{node.address} {Path(f'{host_key}.pub').read_text().strip()}")
            config = node.root / "sshd_config"
            config.write_text("\n".join([
                f"ListenAddress {node.address}:22",
                f"HostKey {host_key}",
                f"PidFile {node.root / 'sshd.pid'}",
                f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "Subsystem sftp internal-sftp",
                "",
            ]))
            check = subprocess.run([SSHD, "-t", "-f", str(config)], capture_output=True,
                                   text=True, timeout=30)
            if check.returncode != 0:
                raise RuntimeError(f"sshd -t: {check.stderr.strip()}")
            self._sshd.append(node.host.popen([SSHD, "-D", "-e", "-f", str(config)]))
        self.known_hosts.write_text("\n".join(known) + "\n")
        for node in self.nodes:
            self._wait_for_ssh(node)

    def ssh(self, node: Node, command: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """`command` on `node` over SSH from the control machine, as Ansible would reach it."""
        return self.control.run(
            ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"UserKnownHostsFile={self.known_hosts}", "-i", str(self.key),
             "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=5", "-l", "root", node.address,
             command], timeout=timeout)

    def _wait_for_ssh(self, node: Node, timeout: float = 30) -> None:
        last: list[str] = []

        def answers() -> bool:
            done = self.ssh(node, "true")
            last[:] = [done.stderr.strip()]
            return done.returncode == 0

        if not eventually(answers, timeout, interval=0.3):
            raise RuntimeError(f"sshd on {node.name} ({node.address}) did not answer: {last[0]}")

    def write_inventory(self, **extra_vars: Any) -> Path:
        """node1: controller and initiator; node2: initiator and responder; node3: responder.
        So the pairs are node1->node2, node1->node3 and node2->node3."""
        import yaml  # type: ignore[import]  # Debian python3-yaml

        hosts = {
            node.name: {
                "ansible_host": node.address,
                "rdma_interop_prefix": str(node.prefix),
                "rdma_interop_state_dir": str(node.state_dir),
                "ansible_remote_tmp": str(node.root / "ansible-tmp"),
            } for node in self.nodes
        }
        common_args = (f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes "
                       "-o IdentitiesOnly=yes")
        inventory = {"all": {
            "hosts": hosts,
            "vars": {
                "ansible_user": "root",
                "ansible_ssh_private_key_file": str(self.key),
                "ansible_ssh_common_args": common_args,
                "ansible_python_interpreter": "/usr/bin/python3",
                "rdma_interop_source": str(REPO_ROOT),
                # One build tree for every node (the test run's own), one prefix each.
                "rdma_interop_build_dir": str(build_dir()),
                "rdma_interop_lab_ssh_key": str(self.key),
                "rdma_interop_lab_known_hosts": str(self.known_hosts),
                # Namespaces share this machine's init: a unit would not run in the namespace.
                "rdma_interop_supervisor": "process",
                "rdma_interop_report_dir": str(self.workdir / "report"),
                **extra_vars,
            },
            "children": {
                "controller": {"hosts": {"node1": None}},
                "initiators": {"hosts": {"node1": None, "node2": None}},
                "responders": {"hosts": {"node2": None, "node3": None}},
            },
        }}
        path = self.workdir / "inventory.yml"
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        return path

    def playbook(self, playbook: str, *args: str, timeout: float = 900) -> PlaybookRun:
        """ansible-playbook on the control machine; its state stays in the work directory."""
        home = self.workdir / "ansible-home"
        env = {
            "ANSIBLE_CONFIG": str(PLAYBOOKS / "ansible.cfg"),
            "ANSIBLE_HOME": str(home),
            "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(home / "cp"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        argv = ["env", *(f"{k}={v}" for k, v in env.items()), "ansible-playbook",
                "-i", str(self.workdir / "inventory.yml"), str(PLAYBOOKS / playbook), *args]
        done = self.control.run(argv, timeout=timeout)
        output = done.stdout + done.stderr
        return PlaybookRun(done.returncode, output, parse_recap(output))

    def listening(self, node: Node) -> set[int]:
        """TCP ports listening in the node's namespace."""
        done = node.host.run(["ss", "-Hltn"])
        return {int(line.split()[3].rsplit(":", 1)[1]) for line in done.stdout.splitlines()
                if line.strip()}

    def stop(self) -> None:
        for proc in self._sshd:
            proc.terminate()
        for proc in self._sshd:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
