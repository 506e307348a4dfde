"""Fixtures for the fault tests: our rdma-probe on one side, a scripted peer on the other."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.tools import require_tools

from .fault_support import (REPLY_TIMEOUT_MS, REQUEST_TIMEOUT_MS, RTR_TIMEOUT_MS, ScriptedPeer,
                            Serve)


@pytest.fixture(scope="session")
def rdma_probe() -> str:
    return require_tools("rdma-probe")["rdma-probe"]


@pytest.fixture(scope="session")
def peer_env(package_dir: Path | None) -> dict[str, str]:
    """Environment for the scripted peer (Debian's Python): the package the tests import."""
    env = dict(os.environ)
    if package_dir is not None:
        env["PYTHONPATH"] = str(package_dir)
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


@pytest.fixture()
def serve(rdma_probe: str, personality: Path) -> Iterator[Serve]:
    proc = subprocess.Popen(
        [rdma_probe, "serve", "--json", "--listen", "tcp://127.0.0.1:0", "--personality",
         str(personality)],
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
