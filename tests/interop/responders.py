"""Responders for the interop suite: `rdma-probe serve` running on a lab host, one per
personality, each on its own port, with every JSON line it prints kept for the checks."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rdma_interop.lab import Host

BASE_PORT = 7174
LISTEN_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0


class ResponderError(RuntimeError):
    pass


@dataclass
class Responder:
    """One `rdma-probe serve --personality NAME` process and what it has said so far."""

    personality: str
    host: Host
    port: int
    process: subprocess.Popen[str]
    lines: list[dict[str, Any]] = field(default_factory=list)
    noise: list[str] = field(default_factory=list)  # stdout lines that were not JSON
    stderr_tail: list[str] = field(default_factory=list)
    returncode: int | None = None
    _events: queue.Queue[dict[str, Any]] = field(default_factory=queue.Queue)

    @property
    def uri(self) -> str:
        return f"tcp://{self.host.address}:{self.port}"

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            raw = raw.strip()
            if not raw:
                continue
            try:
                line = json.loads(raw)
            except json.JSONDecodeError:
                self.noise.append(raw)
                continue
            self.lines.append(line)
            self._events.put(line)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.stderr_tail = (self.stderr_tail + [raw.rstrip()])[-50:]

    def start_readers(self) -> None:
        for target in (self._read_stdout, self._read_stderr):
            threading.Thread(target=target, name=f"serve-{self.personality}", daemon=True).start()

    def wait_listening(self, timeout: float = LISTEN_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._events.get(timeout=0.1)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if line.get("event") == "listening":
                return line
        raise ResponderError(
            f"rdma-probe serve --personality {self.personality} on {self.uri} did not print "
            f"its 'listening' line within {timeout} s (exit {self.process.poll()}): "
            + " | ".join(self.stderr_tail[-5:] + self.noise[-3:])
        )

    def drain(self) -> list[dict[str, Any]]:
        """Connection events that arrived since the last take (late ones from earlier cases)."""
        out: list[dict[str, Any]] = []
        while True:
            try:
                line = self._events.get_nowait()
            except queue.Empty:
                return out
            if line.get("event") == "connection":
                out.append(line)

    def take_connections(self, count: int, timeout: float) -> list[dict[str, Any]]:
        """Waits for `count` connection events (fewer if `timeout` passes or serve exits)."""
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                line = self._events.get(timeout=min(remaining, 0.1))
            except queue.Empty:
                if self.process.poll() is not None and self._events.empty():
                    break
                continue
            if line.get("event") == "connection":
                got.append(line)
        return got

    def stop(self) -> None:
        """SIGTERM, as an operator would stop it; SIGKILL if it does not go."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.returncode = self.process.returncode


class ResponderPool:
    """Starts a responder per personality on first use; stops them all at the end."""

    def __init__(self, host: Host, probe: Sequence[str], personality_args: Sequence[str],
                 personalities: Sequence[str]) -> None:
        self.host = host
        self.probe = list(probe)
        self.personality_args = list(personality_args)
        self.ports = {name: BASE_PORT + i for i, name in enumerate(personalities)}
        self.started: dict[str, Responder] = {}

    def port_for(self, personality: str) -> int:
        if personality not in self.ports:
            self.ports[personality] = BASE_PORT + len(self.ports)
        return self.ports[personality]

    def get(self, personality: str) -> Responder:
        if personality in self.started:
            responder = self.started[personality]
            if responder.process.poll() is not None:
                raise ResponderError(
                    f"the {personality} responder exited (code {responder.process.returncode}): "
                    + " | ".join(responder.stderr_tail[-5:]))
            return responder
        port = self.port_for(personality)
        cmd = [*self.probe, "serve", "--json", "--listen", f"tcp://{self.host.address}:{port}",
               "--personality", personality, *self.personality_args]
        responder = Responder(personality, self.host, port, self.host.popen(cmd))
        responder.start_readers()
        self.started[personality] = responder
        responder.wait_listening()
        return responder

    def stop_all(self) -> None:
        for responder in self.started.values():
            responder.stop()
