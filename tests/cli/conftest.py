"""Fixtures for the CLI tests: the binaries, personalities with short timeouts, a `serve`
process read line by line, and a run directory for backlog-stat.

The binaries come from the build tree named by $RDMA_INTEROP_BUILD (relative to the
repository root or absolute), else build/ at the repository root, else PATH
(tests/support/tools.py):

    RDMA_INTEROP_BUILD=build-cli /usr/bin/python3 -m pytest tests/cli
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES, build_dir, build_dir_named

from .probe_support import BACKLOG_STAT, PROBE, QUICK_TIMEOUTS, Run, ServeProcess, run_probe


def pytest_report_header(config: pytest.Config) -> str:
    return f"rdma-probe: {PROBE or 'not found'}"


@pytest.fixture(scope="session")
def probe() -> Path:
    if PROBE is None:
        if build_dir_named():  # the named tree must hold what it is tested for
            pytest.fail(f"RDMA_INTEROP_BUILD={build_dir()}: no rdma-probe; build it first")
        pytest.skip("rdma-probe is not built (set RDMA_INTEROP_BUILD or build into build/)")
    return PROBE


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private run directory, for the servers (through the environment) and for us. Not
    created (backlog-stat's tests start from a run directory that does not exist yet), unlike
    the shared run_dir fixture this one overrides (tests/support/fixtures.py)."""
    d = tmp_path / "run"
    monkeypatch.setenv("RDMA_INTEROP_RUN_DIR", str(d))
    return d


@pytest.fixture
def backlog_stat(run_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """backlog_stat(*args, timeout=10.0): backlog-stat run to completion, over run_dir."""
    if BACKLOG_STAT is None:
        pytest.skip("backlog-stat is not built (set RDMA_INTEROP_BUILD)")
    tool = BACKLOG_STAT

    def run(*args: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=timeout)

    return run


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
