"""Lab hosts for multi-node interop runs: network namespaces here, or real nodes over SSH.

A *host* is something we can run a command on and reach at an address (ARCHITECTURE.md,
"Multi-node model"). Two kinds:

    NamespaceHost   a network namespace on this machine (`ip netns exec`)
    SshHost         a real node (`ssh -o BatchMode=yes`), listed in a YAML lab file

A lab is a set of hosts that can reach each other:

    with NamespaceLab(n_hosts=2) as lab:            # needs root and iproute2
        server, client = lab.hosts
        responder = server.popen(["rdma-probe", "serve", "--listen", f"tcp://{server.address}:7174", ...])
        client.run(["rdma-probe", "connect", f"tcp://{server.address}:7174", ...], timeout=30)

    with load_lab_file("lab.yaml") as lab:          # real hosts
        ...

NamespaceLab builds n namespaces named `<prefix>-p<pid>-t<start>-l<index>-h<i>`, gives each a
loopback and one `eth0` with 198.18.<index>.<i+1>/24 (RFC 2544 benchmarking space,
198.18.0.0/15, never routed on the Internet), and joins them with a veth pair (two hosts) or a
bridge that lives in a namespace of its own (`...-br`). Nothing is created in the caller's
namespace: no interface, address or route appears there. It checks every host reaches every
other over TCP before returning, and always tears everything down: on context exit, on an
exception, on SIGINT/SIGTERM (turned into LabInterrupted while a lab is open) and at interpreter
exit. Namespaces left behind by an earlier run that was SIGKILLed (its pid is gone) are
removed when the next lab starts; namespaces of live runs, and any namespace without our
prefix pattern, are never touched.
"""

from __future__ import annotations

import atexit
import ipaddress
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Literal, Protocol, runtime_checkable

__all__ = [
    "LAB_NETWORK",
    "Host",
    "Lab",
    "LabError",
    "LabFileError",
    "LabInterrupted",
    "NamespaceHost",
    "NamespaceLab",
    "SshHost",
    "SshLab",
    "load_lab_file",
    "namespaces_available",
]

# RFC 2544 / RFC 5735: reserved for benchmarking, so a lab never collides with a real network.
LAB_NETWORK = ipaddress.ip_network("198.18.0.0/15")
_LAB_SUBNETS = 512  # /24s in the /15
DEFAULT_PREFIX = "rdmai"
_PREFIX_RE = re.compile(r"^[A-Za-z0-9_]{1,24}$")
# Port the connectivity check listens on, inside our own namespaces only.
_CHECK_PORT = 7099
_IP = "ip"


class LabError(RuntimeError):
    """A lab could not be built, checked or torn down; the message says which step and why."""


class LabFileError(ValueError):
    """A lab file is not valid; the message names the file and the field."""


class LabInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived while a lab was open (raised so cleanup code runs)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


# ---------------------------------------------------------------------------------------------
# Hosts
# ---------------------------------------------------------------------------------------------


@runtime_checkable
class Host(Protocol):
    """Something we can run a command on, reachable by peers at `address`."""

    @property
    def name(self) -> str: ...

    @property
    def address(self) -> str: ...

    def run(
        self, cmd: Sequence[str], timeout: float | None = 60.0, *, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Runs `cmd` to completion; stdout/stderr captured as text. TimeoutExpired on timeout."""
        ...

    def popen(
        self, cmd: Sequence[str], *, stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE,
    ) -> subprocess.Popen[str]:
        """Starts `cmd` (text mode, line-buffered); terminate() delivers SIGTERM to it."""
        ...


class _ProcessRegistry:
    """Processes a lab's hosts started, so teardown can stop the ones still running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._procs: list[subprocess.Popen[str]] = []

    def add(self, proc: subprocess.Popen[str]) -> None:
        with self._lock:
            self._procs = [p for p in self._procs if p.poll() is None]
            self._procs.append(proc)

    def stop_all(self, grace: float = 3.0) -> None:
        with self._lock:
            procs, self._procs = self._procs, []
        running = [p for p in procs if p.poll() is None]
        for p in running:
            _quietly(p.terminate)
        deadline = time.monotonic() + grace
        for p in running:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _quietly(p.kill)
                _quietly(lambda: p.wait(timeout=2.0))


def _quietly(fn: Any) -> None:
    try:
        fn()
    except (OSError, subprocess.SubprocessError, ProcessLookupError):
        pass


def _run_captured(
    argv: Sequence[str], timeout: float | None, input: str | None
) -> subprocess.CompletedProcess[str]:
    """Runs argv to completion with text stdout/stderr captured; stdin closed unless given."""
    return subprocess.run(
        argv, input=input, capture_output=True, text=True, errors="replace", timeout=timeout,
        stdin=None if input is not None else subprocess.DEVNULL, check=False,
    )


@dataclass
class NamespaceHost:
    """A network namespace on this machine; commands run through `ip netns exec`."""

    name: str
    address: str
    netns: str
    _registry: _ProcessRegistry = field(default_factory=_ProcessRegistry, repr=False, compare=False)

    def command(self, cmd: Sequence[str]) -> list[str]:
        """The argv that runs `cmd` inside the namespace (ip execs it: same pid, same signals)."""
        return [_IP, "netns", "exec", self.netns, *cmd]

    def run(
        self, cmd: Sequence[str], timeout: float | None = 60.0, *, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return _run_captured(self.command(cmd), timeout, input)

    def popen(
        self, cmd: Sequence[str], *, stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE,
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            self.command(cmd), stdin=stdin, stdout=stdout, stderr=stderr, text=True, bufsize=1
        )
        self._registry.add(proc)
        return proc


class SshPopen(subprocess.Popen[str]):
    """A command on a remote host. Signals go to the remote process, not the local ssh client.

    ssh without a terminal does not forward signals, so the remote side records the command's
    pid in a file and send_signal() runs `kill` there through a second ssh connection.
    """

    def __init__(self, host: SshHost, cmd: Sequence[str], **kwargs: Any) -> None:
        self.remote_host = host
        self.remote_pidfile = f"/tmp/rdma-interop-{uuid.uuid4().hex}.pid"
        # The wrapper backgrounds the command so it can delete the pid file when it ends.
        wrapper = (
            f'"$@" & echo $! > {self.remote_pidfile}; wait $!; rc=$?; '
            f"rm -f {self.remote_pidfile}; exit $rc"
        )
        remote = shlex.join(["sh", "-c", wrapper, "sh", *cmd])
        super().__init__(host.ssh_command(remote), **kwargs)

    def send_signal(self, sig: int) -> None:
        if self.poll() is not None:
            return
        name = signal.Signals(sig).name.removeprefix("SIG")
        # The pid file appears a moment after the command starts: wait for it briefly.
        remote = (
            f"for _ in 1 2 3 4 5 6 7 8 9 10; do test -f {self.remote_pidfile} && break; "
            f"sleep 0.2; done; kill -s {name} \"$(cat {self.remote_pidfile})\""
        )
        try:
            subprocess.run(
                self.remote_host.ssh_command(remote), capture_output=True, text=True,
                timeout=15, stdin=subprocess.DEVNULL, check=False,
            )
        except subprocess.TimeoutExpired:
            pass
        if sig == signal.SIGKILL:
            super().send_signal(sig)  # and the local client, which would otherwise linger


@dataclass
class SshHost:
    """A real node reached with `ssh -o BatchMode=yes` (keys only, never a password prompt)."""

    name: str
    address: str
    ssh_host: str
    user: str | None = None
    port: int = 22
    key: str | None = None
    # Checked against this file (not ~/.ssh/known_hosts) when given: labs rebuild nodes, and a
    # stale entry in the operator's own file would stop every run.
    known_hosts: str | None = None
    connect_timeout: int = 10
    # The rdma-probe to run there: a path, or a name on the remote PATH.
    rdma_probe: str = "rdma-probe"
    # Directories put first on the remote PATH for every command (where our tools are).
    path: tuple[str, ...] = ()
    # Variables set for every command (e.g. RDMA_INTEROP_PERSONALITY_DIR where the toolkit is
    # not installed but run from a build tree).
    environment: tuple[tuple[str, str], ...] = ()
    # The RDMA devices the device tier uses on this node: None for all it has.
    devices: tuple[str, ...] | None = None
    # An ssh ControlPath: commands share one connection (a session costs a key exchange,
    # seconds on a slow node) once open_master() made it; close_master() ends it. Without a
    # master, commands connect on their own.
    control_path: str | None = None
    _registry: _ProcessRegistry = field(default_factory=_ProcessRegistry, repr=False, compare=False)

    def ssh_command(self, remote_command: str) -> list[str]:
        """The argv that runs the shell command line `remote_command` on this host."""
        argv = [
            "ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.connect_timeout}",
            "-o", "StrictHostKeyChecking=accept-new", "-o", "ServerAliveInterval=15",
            "-p", str(self.port),
        ]
        if self.key:
            argv += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
        if self.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}"]
        if self.user:
            argv += ["-l", self.user]
        if self.control_path:
            argv += ["-o", "ControlMaster=no", "-o", f"ControlPath={self.control_path}"]
        if self.path:
            remote_command = (f"PATH={':'.join(shlex.quote(d) for d in self.path)}:\"$PATH\"; "
                              f"export PATH; {remote_command}")
        for name, value in reversed(self.environment):
            remote_command = f"{name}={shlex.quote(value)}; export {name}; {remote_command}"
        return [*argv, "--", self.ssh_host, remote_command]

    def _master_argv(self, *extra: str) -> list[str]:
        argv = self.ssh_command("true")
        del argv[argv.index("--"):]
        argv[argv.index("ControlMaster=no")] = "ControlMaster=yes"
        return [*argv, *extra, "--", self.ssh_host]

    def open_master(self, timeout: float = 60.0) -> bool:
        """Starts the shared connection (see control_path) in the background; False if it
        could not (commands then connect on their own). Its output goes nowhere: a master
        left holding a pipe would keep a caller's read of that pipe from ever ending."""
        if not self.control_path:
            return False
        try:
            r = subprocess.run(self._master_argv("-f", "-N", "-o", "ControlPersist=600"),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return False
        return r.returncode == 0

    def close_master(self) -> None:
        """Ends the shared connection, if any."""
        if self.control_path:
            _quietly(lambda: subprocess.run(self._master_argv("-O", "exit"),
                                            stdin=subprocess.DEVNULL, capture_output=True,
                                            timeout=10, check=False))

    def command(self, cmd: Sequence[str]) -> list[str]:
        return self.ssh_command(shlex.join(cmd))

    def run(
        self, cmd: Sequence[str], timeout: float | None = 60.0, *, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return _run_captured(self.command(cmd), timeout, input)

    def popen(
        self, cmd: Sequence[str], *, stdin: int | IO[Any] | None = subprocess.DEVNULL,
        stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE,
    ) -> subprocess.Popen[str]:
        proc = SshPopen(self, cmd, stdin=stdin, stdout=stdout, stderr=stderr, text=True,
                        errors="replace", bufsize=1)
        self._registry.add(proc)
        return proc


# ---------------------------------------------------------------------------------------------
# Labs
# ---------------------------------------------------------------------------------------------


class Lab(Protocol):
    """A set of hosts that reach each other; a context manager that cleans up after itself."""

    @property
    def hosts(self) -> Sequence[Host]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Lab: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def namespaces_available() -> tuple[bool, str]:
    """Whether this process can build a NamespaceLab, and if not, why (for pytest skips)."""
    if os.geteuid() != 0:
        return False, "namespace lab needs root (ip netns add)"
    try:
        probe = subprocess.run(
            [_IP, "netns", "list"], capture_output=True, text=True, timeout=10,
            stdin=subprocess.DEVNULL, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"`ip netns` is unavailable: {e}"
    if probe.returncode != 0:
        return False, f"`ip netns list` failed: {probe.stderr.strip()}"
    return True, ""


def _process_start_ticks(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (/proc/PID/stat field 22), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; count after it.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])


_OWNER_START = _process_start_ticks(os.getpid()) or 0


def _ip(*args: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Runs `ip ARGS`; raises LabError naming the command and ip's complaint when check fails."""
    try:
        result = subprocess.run(
            [_IP, *args], capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise LabError(f"`ip {' '.join(args)}` timed out after {timeout} s") from e
    if check and result.returncode != 0:
        raise LabError(f"`ip {' '.join(args)}` failed: {result.stderr.strip() or result.returncode}")
    return result


def _list_namespaces() -> list[str]:
    out = _ip("-j", "netns", "list").stdout.strip()
    if not out:
        return []
    return [str(entry["name"]) for entry in json.loads(out)]


def _namespace_pids(netns: str) -> list[int]:
    result = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in result.stdout.split() if p.isdigit()]


def _ns_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(prefix)}-p(\d+)-t(\d+)-l(\d+)-(h\d+|br)$")


def _kill_and_delete(netns: str) -> list[str]:
    """Stops what still runs inside `netns` (ours) and deletes it; returns problems found."""
    problems = []
    for _ in range(3):
        pids = _namespace_pids(netns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            except OSError as e:
                problems.append(f"kill {pid} in {netns}: {e}")
        time.sleep(0.1)
    result = _ip("netns", "del", netns, check=False)
    if result.returncode != 0 and netns in _list_namespaces():
        problems.append(f"ip netns del {netns}: {result.stderr.strip()}")
    return problems


def remove_stale_namespaces(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Deletes namespaces named by our pattern whose creating process no longer exists.

    A namespace belongs to a dead run when the pid in its name is gone or is now a different
    process (its start time differs). Processes still running inside such a namespace are
    that dead run's orphans (a responder whose parent was SIGKILLed) and are killed with it.
    Returns the names removed.
    """
    pattern = _ns_pattern(prefix)
    removed = []
    for netns in _list_namespaces():
        m = pattern.match(netns)
        if not m:
            continue
        pid, start = int(m.group(1)), int(m.group(2))
        if _process_start_ticks(pid) == start:
            continue  # a live lab (maybe ours, maybe a concurrent run): not ours to remove
        if not _kill_and_delete(netns):
            removed.append(netns)
    return removed


class _SignalGuard:
    """While any lab is open: SIGINT/SIGTERM raise LabInterrupted (so `finally` and context
    exits run), and an atexit hook closes labs still open. During a teardown the signal is
    held and raised once the teardown is done, so a second Ctrl-C cannot leave half a lab."""

    def __init__(self) -> None:
        self._labs: set[NamespaceLab] = set()
        self._saved: dict[int, Any] = {}
        self._held: int | None = None
        self._tearing_down = 0
        self._atexit_registered = False

    def opened(self, lab: NamespaceLab) -> None:
        if not self._atexit_registered:
            atexit.register(self.close_all)
            self._atexit_registered = True
        if not self._labs and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        self._labs.add(lab)

    def closed(self, lab: NamespaceLab) -> None:
        self._labs.discard(lab)
        if not self._labs and self._saved and threading.current_thread() is threading.main_thread():
            for sig, previous in self._saved.items():
                signal.signal(sig, previous)
            self._saved.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._tearing_down:
            self._held = signum
            return
        raise LabInterrupted(signum)

    def teardown_begins(self) -> None:
        self._tearing_down += 1

    def teardown_ends(self) -> None:
        self._tearing_down -= 1
        if self._tearing_down == 0 and self._held is not None:
            signum, self._held = self._held, None
            if not self._labs:  # our handlers are gone: hand the signal to whoever had it
                os.kill(os.getpid(), signum)
            else:
                raise LabInterrupted(signum)

    def close_all(self) -> None:
        for lab in list(self._labs):
            lab.close()


_GUARD = _SignalGuard()
_lab_counter = 0
_lab_counter_lock = threading.Lock()


def _next_lab_index() -> int:
    global _lab_counter
    with _lab_counter_lock:
        index = _lab_counter
        _lab_counter += 1
    return index % _LAB_SUBNETS


_CHECK_SCRIPT = textwrap.dedent(
    """
    import json, socket, sys, time
    me, port, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
    pending = set(sys.argv[4:])
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((me, port))
    srv.listen(64)
    srv.settimeout(0.05)
    accepted = set()
    want = len(pending)
    while time.monotonic() < deadline and (pending or len(accepted) < want):
        for peer in sorted(pending):
            try:
                socket.create_connection((peer, port), timeout=0.5).close()
                pending.discard(peer)
            except OSError:
                pass
        try:
            while True:
                conn, addr = srv.accept()
                accepted.add(addr[0])
                conn.close()
        except OSError:
            pass
    print(json.dumps({"unreached": sorted(pending), "heard_from": sorted(accepted)}))
    sys.exit(0 if not pending and len(accepted) >= want else 1)
    """
)


class NamespaceLab:
    """n network namespaces on one link, 198.18.<index>.<i+1>/24; see the module docstring.

    topology: "veth" joins exactly two hosts with one veth pair; "bridge" puts a Linux bridge
    in a namespace of its own and gives every host a veth port on it; "auto" is veth for two
    hosts and bridge otherwise. MTUs are left at the kernel's default.
    """

    def __init__(
        self, n_hosts: int = 2, prefix: str = DEFAULT_PREFIX, *,
        topology: Literal["auto", "veth", "bridge"] = "auto", check_timeout: float = 10.0,
    ) -> None:
        if n_hosts < 1:
            raise ValueError(f"n_hosts must be at least 1, got {n_hosts}")
        if n_hosts > 253:
            raise ValueError(f"n_hosts must be at most 253 (one /24), got {n_hosts}")
        if not _PREFIX_RE.match(prefix):
            raise ValueError(f"prefix must be 1-24 of [A-Za-z0-9_], got {prefix!r}")
        if topology == "veth" and n_hosts != 2:
            raise ValueError(f"a veth topology joins exactly 2 hosts, not {n_hosts}")
        self.n_hosts = n_hosts
        self.prefix = prefix
        self.topology: Literal["veth", "bridge"] = (
            topology if topology != "auto" else ("veth" if n_hosts == 2 else "bridge")
        )
        self.check_timeout = check_timeout
        self.index = _next_lab_index()
        self.subnet = ipaddress.ip_network(
            f"{LAB_NETWORK.network_address + self.index * 256}/24"
        )
        stem = f"{prefix}-p{os.getpid()}-t{_OWNER_START}-l{self.index}"
        self.bridge_netns: str | None = f"{stem}-br" if self.topology == "bridge" else None
        self._registry = _ProcessRegistry()
        self._hosts = [
            NamespaceHost(
                name=f"h{i}", address=str(self.subnet.network_address + i + 1),
                netns=f"{stem}-h{i}", _registry=self._registry,
            )
            for i in range(n_hosts)
        ]
        self._created: list[str] = []  # namespaces this lab made, in creation order
        self._open = False
        self.removed_stale: list[str] = []

    # -- the Lab protocol ------------------------------------------------------------------
    @property
    def hosts(self) -> list[NamespaceHost]:
        return list(self._hosts)

    @property
    def namespaces(self) -> list[str]:
        """Every namespace this lab owns (hosts, then the bridge's), created or not yet."""
        return [h.netns for h in self._hosts] + ([self.bridge_netns] if self.bridge_netns else [])

    def __enter__(self) -> NamespaceLab:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close(raise_errors=exc is None)

    def __getitem__(self, index: int) -> NamespaceHost:
        return self._hosts[index]

    def __iter__(self) -> Iterator[NamespaceHost]:
        return iter(self._hosts)

    def __repr__(self) -> str:
        hosts = ", ".join(f"{h.name}={h.address}" for h in self._hosts)
        return f"NamespaceLab({self.topology}, {self.subnet}: {hosts})"

    # -- building --------------------------------------------------------------------------
    def start(self) -> None:
        """Builds the namespaces and links, checks connectivity; tears down on any failure."""
        if self._open:
            raise LabError("lab already started")
        ok, why = namespaces_available()
        if not ok:
            raise LabError(why)
        self._open = True
        _GUARD.opened(self)
        try:
            self.removed_stale = remove_stale_namespaces(self.prefix)
            self._build()
            self.check_connectivity()
        except BaseException:
            self.close(raise_errors=False)
            raise

    def _add_netns(self, netns: str) -> None:
        _ip("netns", "add", netns)
        self._created.append(netns)
        _ip("-n", netns, "link", "set", "lo", "up")

    def _build(self) -> None:
        for host in self._hosts:
            self._add_netns(host.netns)
        if self.topology == "veth":
            a, b = self._hosts
            # Both ends are created inside our namespaces; nothing appears in the caller's.
            _ip("-n", a.netns, "link", "add", "eth0", "type", "veth",
                "peer", "name", "eth0", "netns", b.netns)
        else:
            assert self.bridge_netns is not None
            self._add_netns(self.bridge_netns)
            br = self.bridge_netns
            _ip("-n", br, "link", "add", "br0", "type", "bridge")
            _ip("-n", br, "link", "set", "br0", "up")
            for i, host in enumerate(self._hosts):
                port = f"p{i}"
                _ip("-n", br, "link", "add", port, "type", "veth",
                    "peer", "name", "eth0", "netns", host.netns)
                _ip("-n", br, "link", "set", port, "master", "br0")
                _ip("-n", br, "link", "set", port, "up")
        for host in self._hosts:
            _ip("-n", host.netns, "addr", "add", f"{host.address}/{self.subnet.prefixlen}",
                "dev", "eth0")
            _ip("-n", host.netns, "link", "set", "eth0", "up")

    def check_connectivity(self, port: int = _CHECK_PORT) -> None:
        """Every host opens a TCP connection to every other (no ping needed); LabError if not."""
        if self.n_hosts < 2:
            return
        procs = []
        for host in self._hosts:
            peers = [h.address for h in self._hosts if h is not host]
            procs.append((host, host.popen(
                [sys.executable, "-c", _CHECK_SCRIPT, host.address, str(port),
                 str(self.check_timeout), *peers]
            )))
        problems = []
        for host, proc in procs:
            try:
                out, err = proc.communicate(timeout=self.check_timeout + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            if proc.returncode != 0:
                problems.append(f"{host.name} ({host.address}): {out.strip() or err.strip()}")
        if problems:
            raise LabError("lab hosts cannot reach each other over TCP: " + "; ".join(problems))

    # -- teardown --------------------------------------------------------------------------
    def close(self, raise_errors: bool = True) -> None:
        """Stops processes started on the hosts, deletes every namespace this lab created.

        Idempotent. Problems are collected and raised as one LabError after every step was
        tried (or only written to stderr when `raise_errors` is false, e.g. while another
        exception is already on its way out)."""
        if not self._open:
            return
        _GUARD.teardown_begins()
        problems: list[str] = []
        try:
            self._registry.stop_all()
            for netns in reversed(self._created):
                problems += _kill_and_delete(netns)
            remaining = set(_list_namespaces())
            self._created = [n for n in self._created if n in remaining]
            self._open = False
            _GUARD.closed(self)
        finally:
            _GUARD.teardown_ends()
        if problems:
            message = "lab teardown incomplete: " + "; ".join(problems)
            if raise_errors:
                raise LabError(message)
            print(f"rdma_interop.lab: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Lab files (real hosts over SSH)
# ---------------------------------------------------------------------------------------------


class SshLab:
    """Hosts from a lab file. Closing stops the commands started on them (remote SIGTERM)."""

    def __init__(self, hosts: Sequence[SshHost], source: Path | None = None) -> None:
        self._hosts = list(hosts)
        self.source = source

    @property
    def hosts(self) -> list[SshHost]:
        return list(self._hosts)

    def __enter__(self) -> SshLab:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getitem__(self, index: int) -> SshHost:
        return self._hosts[index]

    def check_reachable(self, timeout: float = 30.0) -> None:
        """Runs `true` on every host over SSH; LabError naming the hosts that did not answer."""
        problems = []
        for host in self._hosts:
            try:
                result = host.run(["true"], timeout=timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"{host.name}: no answer in {timeout} s")
                continue
            if result.returncode != 0:
                problems.append(f"{host.name}: {result.stderr.strip() or result.returncode}")
        if problems:
            raise LabError("lab hosts unreachable over SSH: " + "; ".join(problems))

    def close(self) -> None:
        for host in self._hosts:
            host._registry.stop_all(grace=5.0)


_HOST_KEYS = {"name", "address", "ssh", "rdma_probe", "path", "environment", "devices"}
_SSH_KEYS = {"host", "user", "port", "key", "known_hosts"}


def load_lab_file(path: str | os.PathLike[str]) -> SshLab:
    """Reads a YAML lab file of real hosts. Schema (name and address required):

        hosts:
          - name: node1              # unique, [A-Za-z0-9_.-]+
            address: 198.18.0.1      # IP the *tests* use to reach it (the RDMA/iWARP link)
            rdma_probe: /opt/rdma-interop/bin/rdma-probe  # on that host; default: its PATH
            path: [/opt/rdma-interop/bin]   # put first on the remote PATH (default: none)
            environment: {RDMA_INTEROP_PERSONALITY_DIR: /srv/p}  # set for every command
            devices: all             # or [mlx5_0, irdma1]: the device tier's devices
            ssh:
              host: node1.lab        # where ssh connects (default: address)
              user: root             # default: ssh's own default
              port: 22               # default 22
              key: ~/.ssh/lab_ed25519  # default: ssh's own; relative to the lab file
              known_hosts: lab_known_hosts  # default: ssh's own; relative to the lab file

    Raises LabFileError naming the file and the offending field."""
    import yaml  # type: ignore[import]  # Debian python3-yaml; only lab files need it

    source = Path(path)
    try:
        doc = yaml.safe_load(source.read_text())
    except OSError as e:
        raise LabFileError(f"{source}: cannot read lab file: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise LabFileError(f"{source}: not valid YAML: {e}") from e

    def fail(where: str, why: str) -> LabFileError:
        return LabFileError(f"{source}: {where}: {why}")

    if not isinstance(doc, Mapping):
        raise fail("top level", "expected a mapping with a 'hosts' list")
    unknown = set(doc) - {"hosts"}
    if unknown:
        raise fail("top level", f"unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    entries = doc.get("hosts")
    if not isinstance(entries, list) or not entries:
        raise fail("hosts", "expected a non-empty list of hosts")

    hosts: list[SshHost] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        where = f"hosts[{i}]"
        if not isinstance(entry, Mapping):
            raise fail(where, "expected a mapping with name, address and ssh")
        unknown = set(entry) - _HOST_KEYS
        if unknown:
            raise fail(where, f"unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        name = entry.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise fail(f"{where}.name", f"expected a name of [A-Za-z0-9_.-], got {name!r}")
        where = f"hosts[{i}] ({name})"
        if name in seen:
            raise fail(f"{where}.name", "duplicate host name")
        seen.add(name)
        address = entry.get("address")
        try:
            ip = ipaddress.ip_address(str(address)) if address is not None else None
        except ValueError:
            ip = None
        if ip is None:
            raise fail(f"{where}.address", f"expected an IP address, got {address!r}")
        ssh = entry.get("ssh", {})
        if ssh is None:
            ssh = {}
        if not isinstance(ssh, Mapping):
            raise fail(f"{where}.ssh", "expected a mapping (host, user, port, key)")
        unknown = set(ssh) - _SSH_KEYS
        if unknown:
            raise fail(f"{where}.ssh", f"unknown key(s) {', '.join(sorted(map(str, unknown)))}")
        ssh_host = ssh.get("host", str(ip))
        if not isinstance(ssh_host, str) or not ssh_host or ssh_host.startswith("-"):
            raise fail(f"{where}.ssh.host", f"expected a host name or address, got {ssh_host!r}")
        user = ssh.get("user")
        if user is not None and (not isinstance(user, str) or not re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9_.-]*", user)):
            raise fail(f"{where}.ssh.user", f"expected a user name, got {user!r}")
        port = ssh.get("port", 22)
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise fail(f"{where}.ssh.port", f"expected an integer 1-65535, got {port!r}")
        key_path = _lab_file_path(ssh.get("key"), source, "a private key",
                                  lambda why: fail(f"{where}.ssh.key", why))
        known_hosts = _lab_file_path(ssh.get("known_hosts"), source, "a known_hosts file",
                                     lambda why: fail(f"{where}.ssh.known_hosts", why))
        rdma_probe = entry.get("rdma_probe", "rdma-probe")
        if not isinstance(rdma_probe, str) or not rdma_probe or rdma_probe.startswith("-"):
            raise fail(f"{where}.rdma_probe",
                       f"expected a path or a command name, got {rdma_probe!r}")
        remote_path: Any = entry.get("path", [])
        if not isinstance(remote_path, list) or not all(
                isinstance(d, str) and d.startswith("/") and ":" not in d for d in remote_path):
            raise fail(f"{where}.path",
                       f"expected a list of absolute directories, got {remote_path!r}")
        environment: Any = entry.get("environment", {})
        if not isinstance(environment, Mapping) or not all(
                isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)
                and isinstance(v, (str, int)) for k, v in environment.items()):
            raise fail(f"{where}.environment",
                       f"expected a mapping of variable names to values, got {environment!r}")
        devices: Any = entry.get("devices", "all")
        if devices == "all":
            chosen = None
        elif isinstance(devices, list) and devices and all(
                isinstance(d, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", d)
                for d in devices):
            chosen = tuple(devices)
        else:
            raise fail(f"{where}.devices", f"expected 'all' or a list of device names, "
                       f"got {devices!r}")
        hosts.append(SshHost(name=name, address=str(ip), ssh_host=ssh_host, user=user,
                             port=port, key=key_path, known_hosts=known_hosts,
                             rdma_probe=rdma_probe, path=tuple(remote_path),
                             environment=tuple((k, str(v)) for k, v in environment.items()),
                             devices=chosen))
    return SshLab(hosts, source=source)


def _lab_file_path(value: Any, source: Path, what: str,
                   fail: Callable[[str], LabFileError]) -> str | None:
    """An existing file named in a lab file: ~ expanded, relative to the lab file's folder."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise fail(f"expected a path to {what}, got {value!r}")
    resolved = Path(value).expanduser()
    if not resolved.is_absolute():
        resolved = source.parent / resolved
    if not resolved.is_file():
        raise fail(f"no such file: {resolved}")
    return str(resolved)
