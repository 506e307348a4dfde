"""Fixtures for the rdma-probe CLI tests: the binary, personalities with short timeouts, and
a `serve` process read line by line.

The binary comes from the build tree named by $RDMA_INTEROP_BUILD (relative to the
repository root or absolute), else build/ at the repository root, else `rdma-probe` on PATH:

    RDMA_INTEROP_BUILD=build-cli /usr/bin/python3 -m pytest tests/cli
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from probe_support import PROBE, QUICK_TIMEOUTS, SHIPPED_PERSONALITIES, Run, ServeProcess, run_probe


def pytest_report_header(config: pytest.Config) -> str:
    return f"rdma-probe: {PROBE or 'not found'}"


@pytest.fixture(scope="session")
def probe() -> Path:
    if PROBE is None:
        pytest.skip("rdma-probe is not built (set RDMA_INTEROP_BUILD or build into build/)")
    return PROBE


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
