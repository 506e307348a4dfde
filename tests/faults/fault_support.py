"""What the fault tests share: the timeouts under test, and handles on our rdma-probe
serve and on the scripted peer."""

from __future__ import annotations

import os
import queue
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.paths import DEBIAN_PYTHON

SCRIPTED_PEER = Path(__file__).with_name("scripted_peer.py")

#: Timeouts of the personality under test: short, so faults end fast, and distinct, so the
#: test can tell which timer fired.
REQUEST_TIMEOUT_MS = 1000
REPLY_TIMEOUT_MS = 1500
RTR_TIMEOUT_MS = 1200
#: Scheduling slack on a loaded 2-core machine.
SLACK_S = 2.0


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
