"""What the CLI tests share: the tools under test, short MPA timeouts, a finished run, and
`rdma-probe serve` read event by event."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.tools import find_tool

# Short MPA waits so failure cases end in well under a second.
QUICK_TIMEOUTS = {"request_timeout_ms": 1500, "reply_timeout_ms": 1500, "rtr_timeout_ms": 400}

#: The rdma-probe under test (tests/support/tools.py), None when it is not built.
PROBE = find_tool("rdma-probe")
#: backlog-stat beside it, None when it is not built.
BACKLOG_STAT = find_tool("backlog-stat")


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


class ServeProcess:
    """`rdma-probe serve` on 127.0.0.1, an ephemeral port; its stdout read as JSON events."""

    def __init__(self, probe: Path, personality: Path | str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [str(probe), "serve", "--json", "--listen", "tcp://127.0.0.1:0", "--personality", str(personality),
             *extra],
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
