"""What the stream tier's tests share: Python processes in namespace hosts, with the stream
preload (rdma_interop.stream_run) or without it, their JSON lines and the preload's logs."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdma_interop.lab import NamespaceHost

PYTHON = "/usr/bin/python3"
PEER = Path(__file__).with_name("stream_peer.py")
#: Every process of a test is bounded by this (seconds).
PROCESS_TIMEOUT = 90.0


@dataclass
class PythonRunner:
    package_parent: Path
    work: Path

    def argv(self, args: list[str], *, preload: bool, log: Path | None = None,
             env: dict[str, str] | None = None) -> list[str]:
        """`python3 ARGS` (through rdma_interop.stream_run when preloaded) under `env`."""
        variables = {"PYTHONPATH": str(self.package_parent), "PYTHONUNBUFFERED": "1",
                     **(env or {})}
        if log is not None:
            variables["RDMA_STREAM_LOG"] = str(log)
        prefix = [PYTHON, "-m", "rdma_interop.stream_run"] if preload else []
        return ["env", *(f"{k}={v}" for k, v in variables.items()), *prefix, PYTHON, *args]

    def start(self, host: NamespaceHost, args: list[str], *, preload: bool,
              log: Path | None = None, env: dict[str, str] | None = None
              ) -> subprocess.Popen[str]:
        return host.popen(self.argv(args, preload=preload, log=log, env=env))

    def run(self, host: NamespaceHost, args: list[str], *, preload: bool,
            log: Path | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
        result = host.run(self.argv(args, preload=preload, log=log, env=env),
                          timeout=PROCESS_TIMEOUT)
        assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def peer(self, host: NamespaceHost, role: str, *args: object) -> subprocess.Popen[str]:
        """stream_peer.py ROLE HOST-ADDRESS ARGS (the API, so no preload)."""
        return self.start(host, [str(PEER), role, *(str(a) for a in args)], preload=False)


def wait_for_line(proc: subprocess.Popen[str], contains: str, timeout: float = 30.0) -> str:
    """The first stdout line of `proc` that contains `contains`; AssertionError (with its
    stderr) if it exits or the time passes first."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            line = proc.stdout.readline()
            if contains in line:
                return line
            if line:
                continue
        if proc.poll() is not None:
            break
    proc.kill()
    _, err = proc.communicate(timeout=10)
    raise AssertionError(f"no line with {contains!r} (exit {proc.returncode}):\n{err}")


def result_of(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The last JSON line a peer printed, once it exited 0."""
    try:
        out, err = proc.communicate(timeout=PROCESS_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"timed out:\n{out}\n{err}") from None
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out}\n{err}"
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"no result line:\n{out}\n{err}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def stop(proc: subprocess.Popen[str]) -> str:
    """Stops a server; its stderr."""
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=10)
    return err


def log_lines(path: Path) -> list[dict[str, Any]]:
    """The preload's JSON lines, oldest first ([] when it wrote none)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def random_file(path: Path, size: int) -> Path:
    path.write_bytes(os.urandom(size))
    return path
