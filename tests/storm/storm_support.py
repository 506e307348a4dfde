"""What the storm tests share: a storm server in the lab with its samplers, and
the storm clients.

    server = StormServer.start(host, probe, run_dir, backlog=64, overflow="reject", ...)
    reports = run_storms(clients, storm, server.uri, attempts=500, concurrency=24)
    final = server.stop()            # SIGTERM; the serve prints its counters at exit
    server.samples                   # backlog-stat --json and VmRSS, every ~150 ms
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.json_lines import JsonLines, PrintsJsonLines

PERSONALITY = Path(__file__).resolve().parent / "personalities" / "storm.json"
#: How often backlog-stat and VmRSS are sampled during a storm.
SAMPLE_INTERVAL_S = 0.15

OUTCOMES = ("connected", "overflow_rejected", "app_rejected", "expired", "tcp_timeout", "gave_up",
            "other")


def vm_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def counters_of(entry: dict[str, Any]) -> dict[str, Any]:
    """A listener entry's counters, whether nested under "counters" or flat."""
    inner = entry.get("counters")
    return inner if isinstance(inner, dict) else entry


@dataclass
class Sample:
    t: float                           # seconds since the server started listening
    rss_kib: int | None
    counters: dict[str, Any] | None    # our listener's, from backlog-stat --json


@dataclass
class StormServer(PrintsJsonLines):
    """`rdma-probe serve` with a backlog policy on a lab host, its JSON lines and samplers."""

    host: Any
    process: subprocess.Popen[str]
    address: str
    pid: int
    backlog_stat: str | None
    run_dir: Path
    output: JsonLines
    samples: list[Sample] = field(default_factory=list)
    sampler_errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _sampler: threading.Thread | None = None
    _start: float = field(default_factory=time.monotonic)

    @property
    def uri(self) -> str:
        return f"tcp://{self.address}"

    @classmethod
    def start(cls, host: Any, probe: str, backlog_stat: str | None, run_dir: Path, *,
              port: int, backlog: int, overflow: str, accept_delay_ms: int,
              extra: Sequence[str] = ()) -> StormServer:
        cmd = ["env", f"RDMA_INTEROP_RUN_DIR={run_dir}", probe, "serve", "--json",
               "--listen", f"tcp://{host.address}:{port}", "--personality", str(PERSONALITY),
               "--backlog", str(backlog), "--overflow", overflow,
               "--accept-delay", str(accept_delay_ms), "--exchange-timeout", "2",
               "--backlog-events", *extra]
        proc = host.popen(cmd)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        try:
            listening = json.loads(first)
        except json.JSONDecodeError:
            proc.kill()
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"rdma-probe serve did not start: {first!r} {err}") from None
        # `ip netns exec` and `env` exec: the serve has the pid Popen knows.
        server = cls(host, proc, listening["address"], proc.pid, backlog_stat, run_dir,
                     JsonLines(proc, first=[listening]))
        server._sampler = threading.Thread(target=server._sample, daemon=True)
        server._sampler.start()
        return server

    def _sample(self) -> None:
        """backlog-stat --json in the server's namespace, and the serve's VmRSS."""
        while not self._stop.is_set():
            counters = None
            if self.backlog_stat:
                try:
                    done = self.host.run(
                        ["env", f"RDMA_INTEROP_RUN_DIR={self.run_dir}", self.backlog_stat,
                         "--json", "--pid", str(self.pid)], timeout=5)
                    if done.returncode == 0:
                        doc = json.loads(done.stdout)
                        ours = [e for e in doc.get("listeners", [])
                                if str(e.get("local_address", e.get("address"))) == self.address]
                        counters = counters_of(ours[0]) if ours else None
                    elif done.returncode != 1:  # 1: nothing published yet
                        self.sampler_errors.append(f"backlog-stat exit {done.returncode}: "
                                                   f"{done.stderr.strip()}")
                except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
                    self.sampler_errors.append(f"backlog-stat: {e}")
            self.samples.append(Sample(time.monotonic() - self._start, vm_rss_kib(self.pid),
                                       counters))
            self._stop.wait(SAMPLE_INTERVAL_S)

    def wait_settled(self, timeout: float) -> dict[str, Any] | None:
        """Waits until backlog-stat shows nothing pending, waiting or half-open (every
        Request decided); returns those counters (None without backlog-stat)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = next((s.counters for s in reversed(self.samples) if s.counters), None)
            if last and not (last.get("pending") or last.get("overflow_waiting")
                             or last.get("half_open")):
                # One more sample, so a decision in flight when this one was taken is in.
                seen = len(self.samples)
                while len(self.samples) <= seen + 1 and time.monotonic() < deadline:
                    time.sleep(0.05)
                return next((s.counters for s in reversed(self.samples) if s.counters), last)
            time.sleep(0.1)
        return last

    def stop(self) -> dict[str, Any] | None:
        """SIGTERM; returns the counters the serve printed at exit (its "counters" line)."""
        self._stop.set()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.output.join(timeout=5)
        if self._sampler is not None:
            self._sampler.join(timeout=5)
        for line in reversed(self.lines):
            if line.get("event") == "counters":
                return {k: v for k, v in line.items() if k not in ("event", "overflow")}
        return None

    def backlog_events(self) -> list[dict[str, Any]]:
        """The serve's --backlog-events lines: {"event":"backlog","type":..,"pending":n}."""
        return [ln for ln in self.lines if ln.get("event") == "backlog" and "pending" in ln]

    def rss_kib(self) -> list[int]:
        return [s.rss_kib for s in self.samples if s.rss_kib is not None]


def storm_command(storm: str, uri: str, *, attempts: int, concurrency: int, retries: int = 0,
                  backoff_ms: int = 20, hold_ms: int = 0, duration_limit_s: float = 90,
                  timeout_s: float = 30, seed: int = 1, retry_mode: str = "storm") -> list[str]:
    """rdma-storm's command line. retry_mode "storm" (one provider connect per try) by
    default: the provider's own retries hide the tries behind a success, and reconciling
    against the server's per-Request counters needs every try."""
    return [storm, uri, "--attempts", str(attempts), "--concurrency", str(concurrency),
            "--retries", str(retries), "--retry-mode", retry_mode,
            "--retry-backoff", str(backoff_ms),
            "--hold", str(hold_ms), "--duration-limit", f"{duration_limit_s:g}",
            "--timeout", f"{timeout_s:g}", "--personality", str(PERSONALITY),
            "--seed", str(seed), "--progress", "5", "--json"]


def run_storms(clients: Sequence[Any], commands: Sequence[list[str]],
               timeout: float) -> list[dict[str, Any]]:
    """Starts one rdma-storm per client host at once; returns their reports in order."""
    procs = [host.popen(cmd) for host, cmd in zip(clients, commands)]
    reports = []
    for host, proc in zip(clients, procs):
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"rdma-storm on {host.name} ran over {timeout} s: {err[-2000:]}")
        assert proc.returncode == 0, f"rdma-storm on {host.name} exited {proc.returncode}: {err}"
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return reports


def total(reports: Sequence[dict[str, Any]], key: str) -> int:
    return sum(int(r["outcomes"][key]) for r in reports)


def total_tries(reports: Sequence[dict[str, Any]], key: str) -> int:
    return sum(int(r["tries_by_outcome"][key]) for r in reports)


def reconcile(reports: Sequence[dict[str, Any]], server: dict[str, Any], *,
              per_try: str = "half_open_opened") -> None:
    """Client tallies against the server's final counters: nothing lost, nothing counted
    twice. `per_try` is the server counter that counts each try once: over tcp every TCP
    connection (half_open_opened); over verbs every connect request (requests), since
    rdma_cm shows the listener no half-open stage."""
    for r in reports:
        assert r["tries_exact"], "the provider hid retries: tries cannot be reconciled"
        assert sum(r["outcomes"].values()) == r["attempts"] == r["planned"], r["outcomes"]
        assert r["outcomes"]["other"] == 0, r["other"]
    # Each attempt connects on at most one try.
    assert server["accepted"] == total(reports, "connected")
    assert server["overflow_rejected"] == total_tries(reports, "overflow_rejected")
    # A Request the application never decided is rejected without the marker.
    assert server["rejected_by_app"] + server["pending_expired"] == total_tries(
        reports, "app_rejected")
    # Every way the listener can close a connection unanswered.
    unanswered = (server["overflow_dropped"] + server["pending_aborted"]
                  + server["half_open_expired"] + server["half_open_aborted"]
                  + server["half_open_evicted"])
    assert unanswered == total_tries(reports, "expired")
    tries = sum(int(r["tries"]) for r in reports)
    assert server[per_try] == tries, f"every try is counted once ({per_try})"
    # backlog_counters.h's invariants, with nothing left in flight.
    assert server["pending"] == server["overflow_waiting"] == server["half_open"] == 0
    assert server["requests"] == (
        server["accepted"] + server["rejected_by_app"] + server["pending_expired"]
        + server["pending_aborted"] + server["overflow_rejected"] + server["overflow_dropped"])


def jain(values: Sequence[float]) -> float:
    s, sq = sum(values), sum(v * v for v in values)
    return 1.0 if not values or sq == 0 else s * s / (len(values) * sq)


#: Opens COUNT TCP connections to HOST:PORT that never send a byte, holds them HOLD seconds,
#: prints how many connected and how many the server closed first.
HALF_OPEN_FLOOD = r"""
import json, socket, sys, time
host, port, count, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
socks, failed = [], 0
for _ in range(count):
    s = socket.socket()
    s.settimeout(2.0)
    try:
        s.connect((host, port))
        s.setblocking(False)
        socks.append(s)
    except OSError:
        failed += 1
        s.close()
print(json.dumps({"event": "opened", "connected": len(socks), "failed": failed}), flush=True)
deadline = time.monotonic() + hold
closed_by_server = set()
while time.monotonic() < deadline:
    for i, s in enumerate(socks):
        if i in closed_by_server:
            continue
        try:
            if s.recv(1) == b"":
                closed_by_server.add(i)
        except BlockingIOError:
            pass
        except OSError:
            closed_by_server.add(i)
    time.sleep(0.1)
for s in socks:
    s.close()
print(json.dumps({"event": "done", "connected": len(socks), "failed": failed,
                  "closed_by_server": len(closed_by_server)}), flush=True)
"""
