"""Fixtures for the fault tests: our rdma-probe on one side, a scripted peer on the other."""

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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTED_PEER = Path(__file__).with_name("scripted_peer.py")
#: The scripted peer imports rdma_interop, built for Debian's interpreter.
DEBIAN_PYTHON = "/usr/bin/python3"

#: Timeouts of the personality under test: short, so faults end fast, and distinct, so the
#: test can tell which timer fired.
REQUEST_TIMEOUT_MS = 1000
REPLY_TIMEOUT_MS = 1500
RTR_TIMEOUT_MS = 1200
#: Scheduling slack on a loaded 2-core machine.
SLACK_S = 2.0


def build_dir() -> Path:
    return Path(os.environ.get("RDMA_INTEROP_BUILD", REPO / "build")).resolve()


@pytest.fixture(scope="session")
def rdma_probe() -> str:
    candidate = build_dir() / "tools" / "rdma-probe"
    if candidate.exists():
        return str(candidate)
    on_path = shutil.which("rdma-probe")
    if on_path:
        return on_path
    pytest.fail(f"rdma-probe not found under {build_dir()} or on PATH: build the project first")


@pytest.fixture(scope="session")
def peer_env() -> dict[str, str]:
    """Environment for the scripted peer: the built rdma_interop package, Debian's Python."""
    env = dict(os.environ)
    python_dir = build_dir() / "python"
    if python_dir.exists():
        env["PYTHONPATH"] = str(python_dir)
    return env


@pytest.fixture()
def personality(tmp_path: Path) -> Path:
    """A siw-like responder / cxgb4-like initiator with short, distinct timeouts."""
    path = tmp_path / "faulty-lab.json"
    path.write_text(json.dumps({
        "name": "faulty-lab",
        "description": "peer-to-peer with Write/Read RTR and short timeouts, for fault tests",
        "mpa": {
            "revision": 2, "crc": "want", "peer_to_peer": "on",
            "rtr_offer": ["write", "read"], "rtr_preference": ["write", "read"],
            "request_timeout_ms": REQUEST_TIMEOUT_MS, "reply_timeout_ms": REPLY_TIMEOUT_MS,
            "rtr_timeout_ms": RTR_TIMEOUT_MS,
        },
    }))
    return path


@dataclass
class Serve:
    """A running `rdma-probe serve` and the JSON events it printed."""

    process: subprocess.Popen[str]
    address: str
    events: queue.Queue[dict] = field(default_factory=queue.Queue)

    @property
    def host(self) -> str:
        return self.address.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])

    def next_connection(self, timeout: float) -> tuple[dict, float]:
        """The next connection outcome and how long we waited for it."""
        start = time.monotonic()
        deadline = start + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"rdma-probe serve reported no connection within {timeout} s")
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                continue
            if event.get("event") == "connection":
                return event, time.monotonic() - start

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))


@pytest.fixture()
def serve(rdma_probe: str, personality: Path) -> Iterator[Serve]:
    proc = subprocess.Popen(
        [rdma_probe, "serve", "--listen", "tcp://127.0.0.1:0", "--personality", str(personality)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline() if proc.stdout else ""
    try:
        listening = json.loads(first)
    except json.JSONDecodeError:
        proc.kill()
        pytest.fail(f"rdma-probe serve did not start: {first!r} {proc.stderr.read() if proc.stderr else ''}")
    server = Serve(proc, listening["address"])

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip():
                server.events.put(json.loads(line))

    threading.Thread(target=pump, daemon=True).start()
    try:
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("rdma-probe serve did not stop within 5 s of SIGTERM")
        assert proc.returncode == 0, f"serve exited with {proc.returncode}"


class ScriptedPeer:
    """The misbehaving side: started, waited on until it reaches its step, then killed."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen([DEBIAN_PYTHON, str(SCRIPTED_PEER), *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)

    def wait_for(self, word: str, timeout: float = 10.0) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                err = self.process.stderr.read() if self.process.stderr else ""
                pytest.fail(f"scripted peer ended before '{word}': {err}")
            if line.startswith(word):
                return line.strip()
        pytest.fail(f"scripted peer did not reach '{word}' in {timeout} s")

    def kill(self) -> None:
        self.process.kill()  # SIGKILL: the kernel closes the socket as for a crash
        self.process.wait(timeout=5)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.kill()


@pytest.fixture()
def scripted(peer_env: dict[str, str]) -> Iterator[callable]:
    peers: list[ScriptedPeer] = []

    def start(*args: str) -> ScriptedPeer:
        peer = ScriptedPeer(list(args), peer_env)
        peers.append(peer)
        return peer

    yield start
    for peer in peers:
        peer.stop()
