"""The qemu guest that runs the Linux kernel's own siw and rxe, as a test peer.

tools/kernel-guest/build-guest.sh builds (and caches) a kernel and initramfs; this module
boots it under TCG, waits for its agent, runs shell commands in it and watches its console
for kernel oopses, BUGs and panics.

Networking, and the one rule that matters: the host reaches the guest only through qemu's
user-mode network with ``hostfwd`` bound to 127.0.0.1. Guest ports 7001..7000+forwards are
forwarded from free host ports (``host_port(7001)``); port 7000 is the agent. The guest
reaches the host's loopback services at 10.0.2.2:PORT (qemu's user-mode gateway), so a
host listener on 127.0.0.1:PORT serves a guest client. Never connect from the host to a
guest-side address such as 10.0.2.15: that traffic would leave the machine.

Inside the guest: siw0 on eth0 (10.0.2.15), rxe0 on veth-a (10.9.0.1) and rxe1 on veth-b
(10.9.0.2); the host's source tree (with its build directories) is mounted read-only at
/host through 9p, so ``/host/build/tools/rdma-probe`` runs there.
"""

from __future__ import annotations

import base64
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdma_interop.tool_output import json_lines

from tests.support.paths import REPO_ROOT, results_dir

AGENT_PORT = 7000
#: A lab node's SSH server (dropbear), forwarded like the others.
SSH_PORT = 22
FIRST_FORWARDED_PORT = 7001
GUEST_SIW_ADDRESS = "10.0.2.15"
GUEST_RXE_ADDRESSES = ("10.9.0.1", "10.9.0.2")
#: What a guest client dials to reach a host listener on 127.0.0.1.
HOST_FROM_GUEST = "10.0.2.2"
#: MpaPolicy.first_fpdu_delay_ms (rdma-probe connect --first-fpdu-delay) for our initiator
#: against the guest's siw responder: siw hands its socket to the QP only after sending its
#: MPA Reply, and an FPDU landing in between sits unread (core/cm/mpa_policy.h). 50 ms is
#: plenty on real hosts; a TCG guest on a busy 2-core host wants more.
SIW_FIRST_FPDU_DELAY_MS = 200

READY_MARK = "RDMA-GUEST-READY"
FAILED_MARK = "RDMA-GUEST-FAILED"
RC_MARK = "RDMA-GUEST-RC "

#: Console lines that mean the guest kernel hit a bug: the start of a crash report.
CRASH_PATTERN = re.compile(
    r"(Oops: |BUG: |Kernel panic - |general protection fault|WARNING: CPU: |"
    r"kernel BUG at |Unable to handle kernel|watchdog: BUG: soft lockup)")
_TRACE_END = re.compile(r"(---\[ end trace|end Kernel panic)")

BUILDER = REPO_ROOT / "tools" / "kernel-guest" / "build-guest.sh"


class GuestError(RuntimeError):
    """The guest could not be built, booted or reached."""


@dataclass(frozen=True)
class LabLink:
    """One link NIC of a lab guest: its kind and the qemu `-netdev` that carries it (e.g. a
    dgram netdev to tests/devices/link_hub.py's switch on 127.0.0.1; never multicast, which
    would leave the machine). The netdev's id must be `netdev_id`."""

    kind: str  # "iwarp" (198.18.4.0/24, siw0) or "roce" (198.18.5.0/24, rxe0)
    netdev: str
    netdev_id: str


_LINK_OCTET = {"iwarp": 4, "roce": 5}


@dataclass(frozen=True)
class LabNode:
    """What makes a guest a lab node (guest-init.sh): its number, the root's authorized SSH
    key and its link NICs, each with the MAC the init script finds it by."""

    number: int
    authorized_key: str
    links: tuple[LabLink, ...]

    def kernel_arguments(self) -> str:
        key = base64.b64encode(self.authorized_key.strip().encode()).decode()
        return f"rdma_lab.node={self.number} rdma_lab.key={key}"

    def qemu_arguments(self) -> list[str]:
        args = []
        for link in self.links:
            mac = f"52:54:00:12:{_LINK_OCTET[link.kind]:02x}:{self.number:02x}"
            args += ["-netdev", link.netdev,
                     "-device", f"virtio-net-pci,netdev={link.netdev_id},mac={mac}"]
        return args

    def address(self, kind: str) -> str:
        return f"198.18.{_LINK_OCTET[kind]}.{self.number}"


@dataclass(frozen=True)
class GuestResult:
    rc: int
    output: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass(frozen=True)
class KernelCrash:
    """One crash report read off the guest console: its first line and the whole trace
    (and, once the guest is known, the console log file that keeps it)."""

    title: str
    trace: str
    console_log: str = ""

    def note(self) -> str:
        """One short line for a matrix cell: the crash's first line."""
        return f"peer crashed: {self.title}"

    def gist(self) -> str:
        """Where it happened: the workqueue, RIP and the calls, innermost first."""
        lines = [ln.split("] ", 1)[-1].strip() for ln in self.trace.splitlines()]
        where = [ln for ln in lines if ln.startswith(("RIP:", "Workqueue:"))]
        # Frames marked "?" are stale stack words, not calls.
        calls = [ln.split("+")[0] for ln in lines
                 if "+0x" in ln and not ln.startswith(("RIP:", "Code:", "?"))]
        return "; ".join([*where, "call trace: " + " <- ".join(calls)])


def build_images(quiet: bool = True) -> Path:
    """Builds or finds the cached guest images; returns their directory."""
    result = subprocess.run(["bash", str(BUILDER)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL if quiet else None, text=True)
    if result.returncode != 0:
        raise GuestError(f"{BUILDER} failed (exit {result.returncode}); run it by hand to see why")
    return Path(result.stdout.strip().splitlines()[-1])


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class GuestJob:
    """A command started in the background in the guest (see Guest.spawn)."""

    def __init__(self, guest: Guest, job_id: str, command: str):
        self._guest = guest
        self.job_id = job_id
        self.command = command

    def _path(self, suffix: str) -> str:
        return f"/tmp/job-{self.job_id}.{suffix}"

    def output(self) -> str:
        return self._guest.run(f"cat {self._path('out')} 2>/dev/null", timeout=30).output

    def finished(self) -> bool:
        return self._guest.run(f"test -e {self._path('rc')}", timeout=30).rc == 0

    def wait(self, timeout: float) -> GuestResult:
        """Waits for the command to end; raises TimeoutError (it keeps running) if not."""
        deadline = time.monotonic() + timeout
        while True:
            r = self._guest.run(f"cat {self._path('rc')} 2>/dev/null", timeout=30)
            if r.output.strip():
                return GuestResult(int(r.output.strip()), self.output())
            if time.monotonic() > deadline:
                raise TimeoutError(f"guest job '{self.command}' still running after {timeout} s; "
                                   f"output so far:\n{self.output()}")
            time.sleep(0.2)

    def wait_for_output(self, text: str, timeout: float) -> str:
        """Waits until `text` appears in the job's output (e.g. a server saying it listens)."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.output()
            if text in out:
                return out
            if time.monotonic() > deadline:
                raise TimeoutError(f"'{text}' not seen from guest job '{self.command}' in "
                                   f"{timeout} s; output:\n{out}")
            time.sleep(0.2)

    def kill(self, signal_name: str = "KILL") -> None:
        self._guest.run(f"kill -{signal_name} -$(cat {self._path('pid')}) 2>/dev/null; true",
                        timeout=30)


class Guest:
    """One booted guest. Use as a context manager, or start() and stop()."""

    def __init__(self, *, log_dir: Path, share: Path = REPO_ROOT, forwards: int = 8,
                 memory_mb: int = 1024, boot_timeout: float = 180.0,
                 lab_node: LabNode | None = None):
        self.log_dir = Path(log_dir)
        self.share = Path(share)
        self.forwards = forwards
        self.memory_mb = memory_mb
        self.boot_timeout = boot_timeout
        self.images: Path | None = None
        self.kernel_version = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._ports: dict[int, int] = {}
        self._jobs = 0
        self._boots = 0
        self.console_path = self.log_dir / "console.log"
        self.lab_node = lab_node

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> Guest:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if shutil.which("qemu-system-x86_64") is None:
            raise GuestError("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")
        if self.images is None:
            self.images = build_images()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._boots += 1
        if self.console_path.exists():
            # Keep the console of an earlier boot (a crash) next to the new one.
            self.console_path.rename(self.log_dir / f"console.boot{self._boots - 1}.log")
        ports = _free_ports(self.forwards + 2)
        self._ports = {AGENT_PORT + i: p for i, p in enumerate(ports[:-1])}
        if self.lab_node is not None:
            self._ports[SSH_PORT] = ports[-1]
        fwd = ",".join(f"hostfwd=tcp:127.0.0.1:{h}-:{g}" for g, h in self._ports.items())
        append = "console=ttyS0 panic=-1 printk.time=1"
        links: list[str] = []
        if self.lab_node is not None:
            append += f" {self.lab_node.kernel_arguments()}"
            links = self.lab_node.qemu_arguments()
        cmd = [
            "qemu-system-x86_64", "-accel", "tcg", "-m", str(self.memory_mb), "-smp", "1",
            "-nodefaults", "-display", "none", "-no-reboot",
            "-kernel", str(self.images / "vmlinuz"), "-initrd", str(self.images / "initrd.img"),
            "-append", append,
            "-chardev", f"file,id=con,path={self.console_path}", "-serial", "chardev:con",
            "-netdev", f"user,id=n0,{fwd}", "-device", "virtio-net-pci,netdev=n0", *links,
            "-virtfs",
            f"local,path={self.share},mount_tag=host0,security_model=none,readonly=on",
        ]
        with open(self.log_dir / "qemu.log", "ab") as qlog:
            self._proc = subprocess.Popen(cmd, stdout=qlog, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.boot_timeout
        while time.monotonic() < deadline:
            text = self.console()
            if FAILED_MARK in text:
                line = text[text.index(FAILED_MARK):].splitlines()[0]
                self.stop()
                raise GuestError(f"guest setup failed: {line} (console: {self.console_path})")
            if READY_MARK in text:
                m = re.search(r"RDMA-GUEST-READY kernel=(\S+)", text)
                self.kernel_version = m.group(1) if m else ""
                self._await_agent(max(deadline, time.monotonic() + 60))
                return
            if self._proc.poll() is not None:
                raise GuestError(f"qemu exited with {self._proc.returncode} while booting; "
                                 f"see {self.log_dir / 'qemu.log'} and {self.console_path}")
            time.sleep(0.25)
        self.stop()
        raise GuestError(f"guest not ready after {self.boot_timeout} s (console: {self.console_path})")

    def _await_agent(self, deadline: float) -> None:
        """Waits until the agent answers through the forward. /init prints the ready mark
        right after it starts nc in the background, so under TCG the first connection can
        still find no listener: the guest resets it, and slirp passes that on."""
        while True:
            try:
                self.run("true", timeout=max(1.0, min(60.0, deadline - time.monotonic())))
                return
            except (OSError, GuestError) as e:
                if (time.monotonic() >= deadline or self._proc is None
                        or self._proc.poll() is not None):
                    self.stop()
                    raise GuestError(f"the guest's agent does not answer: {e} "
                                     f"(console: {self.console_path})") from e
                time.sleep(0.5)

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=30)
        self._proc = None

    def restart(self) -> None:
        """Boots a fresh guest (after a crash); forwarded host ports change."""
        self.stop()
        self.start()

    def alive(self) -> bool:
        if self._proc is None or self._proc.poll() is not None:
            return False
        try:
            return self.run("true", timeout=20).ok
        except (GuestError, OSError):
            return False

    @property
    def boots(self) -> int:
        return self._boots

    # -- network -----------------------------------------------------------------------

    def host_port(self, guest_port: int) -> int:
        """The 127.0.0.1 port on the host that reaches `guest_port` in the guest (22 is
        the SSH server of a lab node)."""
        if guest_port not in self._ports or guest_port == AGENT_PORT:
            raise ValueError(f"guest port {guest_port} is not forwarded; forwarded: "
                             f"{FIRST_FORWARDED_PORT}..{AGENT_PORT + self.forwards}")
        return self._ports[guest_port]

    @property
    def forwarded_guest_ports(self) -> list[int]:
        return [g for g in self._ports if g not in (AGENT_PORT, SSH_PORT)]

    # -- commands ----------------------------------------------------------------------

    def run(self, command: str, timeout: float = 60.0) -> GuestResult:
        """Runs `command` with dash in the guest (as root, in /tmp); stdout+stderr merged."""
        if self._proc is None:
            raise GuestError("the guest is not running")
        try:
            with socket.create_connection(("127.0.0.1", self._ports[AGENT_PORT]),
                                          timeout=timeout) as s:
                s.settimeout(timeout)
                s.sendall(base64.b64encode(command.encode()) + b"\n")
                s.shutdown(socket.SHUT_WR)
                chunks = []
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
        except (TimeoutError, socket.timeout) as e:
            raise GuestError(f"guest command timed out after {timeout} s: {command}") from e
        text = b"".join(chunks).decode(errors="replace")
        idx = text.rfind(RC_MARK)
        if idx < 0:
            raise GuestError(f"guest agent gave no exit status for: {command}\n{text}")
        rc = int(text[idx + len(RC_MARK):].split()[0])
        return GuestResult(rc, text[:idx])

    def check(self, command: str, timeout: float = 60.0) -> str:
        """Runs `command`; raises GuestError with its output unless it exits 0."""
        r = self.run(command, timeout)
        if not r.ok:
            raise GuestError(f"guest command failed (exit {r.rc}): {command}\n{r.output}")
        return r.output

    def spawn(self, command: str) -> GuestJob:
        """Starts `command` in the background; returns a handle to wait on or kill it."""
        self._jobs += 1
        job = GuestJob(self, str(self._jobs), command)
        encoded = base64.b64encode(command.encode()).decode()
        out, rc, pid = job._path("out"), job._path("rc"), job._path("pid")
        # setsid: the job leads its own process group, so kill() ends its children too.
        self.check(f"echo {encoded} | base64 -d > /tmp/job-{job.job_id}.sh; "
                   f"( setsid dash /tmp/job-{job.job_id}.sh > {out} 2>&1 < /dev/null & "
                   f"echo $! > {pid}; wait $!; echo $? > {rc} ) > /dev/null 2>&1 &",
                   timeout=30)
        deadline = time.monotonic() + 10
        while self.run(f"test -s {pid}", timeout=30).rc != 0:
            if time.monotonic() > deadline:
                raise GuestError(f"guest job did not start: {command}")
            time.sleep(0.05)
        return job

    # -- console -----------------------------------------------------------------------

    def console(self) -> str:
        try:
            return self.console_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def console_mark(self) -> int:
        """A position in the console; pass it to crashes_since() after a test step."""
        return len(self.console())

    def crashes_since(self, mark: int = 0) -> list[KernelCrash]:
        return parse_crashes(self.console()[mark:])

    def crashes(self, mark: int, grace_s: float = 1.5) -> list[KernelCrash]:
        """Every crash report since `mark`, each with its whole trace. Waits up to `grace_s`
        for a report to start, and then for its trace to end. The caller restarts the guest
        (which keeps this console as console.boot<N>.log, named in each crash)."""
        deadline = time.monotonic() + grace_s
        while not self.crashes_since(mark) and time.monotonic() < deadline:
            time.sleep(0.25)
        if self.crashes_since(mark):
            deadline = time.monotonic() + 3 * grace_s
            while "end trace" not in self.console()[mark:] and time.monotonic() < deadline:
                time.sleep(0.25)
        log = str(self.log_dir / f"console.boot{self.boots}.log")
        return [KernelCrash(c.title, c.trace, log) for c in self.crashes_since(mark)]


def parse_crashes(console: str) -> list[KernelCrash]:
    """Finds kernel crash reports (oops, BUG, panic, WARNING) in console text."""
    lines = console.splitlines()
    crashes: list[KernelCrash] = []
    i = 0
    while i < len(lines):
        if CRASH_PATTERN.search(lines[i]):
            start = i
            j = i + 1
            while j < len(lines) and j - start < 120:
                if _TRACE_END.search(lines[j]):
                    j += 1
                    break
                j += 1
            title = re.sub(r"^\[\s*[\d.]+\]\s*", "", lines[start]).strip()
            crashes.append(KernelCrash(title, "\n".join(lines[start:j])))
            i = j
        else:
            i += 1
    return crashes


def guest_path(path: Path) -> str:
    """`path`, inside the repository, as the guest sees it through the /host share."""
    try:
        return "/host/" + str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        raise GuestError(f"{path} is outside {REPO_ROOT}, which is all the guest can see") from None


def default_log_dir() -> Path:
    return results_dir("kernel-guest")
