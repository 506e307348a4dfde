"""Fixtures for the rdma-probe CLI tests: the binary, personalities with short timeouts, and
a `serve` process read line by line.

The binary comes from the build tree named by $RDMA_INTEROP_BUILD (relative to the
repository root or absolute), else build/ at the repository root, else `rdma-probe` on PATH:

    RDMA_INTEROP_BUILD=build-cli /usr/bin/python3 -m pytest tests/cli
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from probe_support import QUICK_TIMEOUTS, REPO_ROOT, SHIPPED_PERSONALITIES


def _find_probe() -> Path | None:
    configured = os.environ.get("RDMA_INTEROP_BUILD")
    if configured:
        build = Path(configured)
        if not build.is_absolute():
            build = REPO_ROOT / build
        candidate = build / "tools" / "rdma-probe"
        if not candidate.is_file():
            raise pytest.UsageError(f"RDMA_INTEROP_BUILD={configured}: no {candidate}; build it first")
        return candidate
    default = REPO_ROOT / "build" / "tools" / "rdma-probe"
    if default.is_file():
        return default
    found = shutil.which("rdma-probe")
    return Path(found) if found else None


PROBE = _find_probe()


def pytest_report_header(config: pytest.Config) -> str:
    return f"rdma-probe: {PROBE or 'not found'}"


@pytest.fixture(scope="session")
def probe() -> Path:
    if PROBE is None:
        pytest.skip("rdma-probe is not built (set RDMA_INTEROP_BUILD or build into build/)")
    return PROBE


@dataclass
class Run:
    """A finished rdma-probe run."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)


def run_probe(probe: Path, *args: str, timeout: float = 20.0) -> Run:
    start = time.monotonic()
    proc = subprocess.run([str(probe), *args], capture_output=True, text=True, timeout=timeout)
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)


@pytest.fixture
def rdma_probe(probe: Path):
    """rdma_probe(*args, timeout=20.0) -> Run: runs the binary to completion."""

    def run(*args: str, timeout: float = 20.0) -> Run:
        return run_probe(probe, *args, timeout=timeout)

    return run


@pytest.fixture
def personality(tmp_path: Path):
    """Writes a personality file based on a shipped one, with short timeouts and overrides;
    returns its path. personality("siw", rtr_offer=["write"], name="write-only")."""

    def make(base: str, name: str | None = None, **mpa: Any) -> Path:
        data = json.loads((SHIPPED_PERSONALITIES / f"{base}.json").read_text())
        data["name"] = name or f"quick-{base}"
        data["mpa"].update(QUICK_TIMEOUTS)
        data["mpa"].update(mpa)
        path = tmp_path / f"{data['name']}.json"
        path.write_text(json.dumps(data, indent=2))
        return path

    return make


class ServeProcess:
    """`rdma-probe serve` on 127.0.0.1, an ephemeral port; its stdout read as JSON events."""

    def __init__(self, probe: Path, personality: Path | str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [str(probe), "serve", "--listen", "tcp://127.0.0.1:0", "--personality", str(personality), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()
        listening = self.next_event(timeout=10)
        assert listening["event"] == "listening", listening
        self.listening = listening
        self.address: str = listening["address"]
        self.uri = f"tcp://{self.address}"

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def next_event(self, timeout: float = 10.0) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no event from serve within {timeout} s; stderr: {self.stderr}") from None
        if line is None:
            raise AssertionError(f"serve exited ({self.proc.poll()}); stderr: {self.stderr}")
        return json.loads(line)

    def stop(self, timeout: float = 5.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("serve did not stop on SIGTERM") from None


@pytest.fixture
def serve(probe: Path) -> Iterator[Any]:
    """serve(personality_path, *extra_args) -> a running ServeProcess, stopped afterwards."""
    started: list[ServeProcess] = []

    def start(personality: Path | str, *extra: str) -> ServeProcess:
        s = ServeProcess(probe, personality, *extra)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
