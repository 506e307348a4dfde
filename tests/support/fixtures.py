"""Fixtures every tier may use; the root conftest.py loads this module as a plugin."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.package import package_dir_in_use


@pytest.fixture(scope="session")
def package_dir() -> Path | None:
    """The build tree's python/ directory the tests import rdma_interop from, or None when
    they use an installed package (a child process given it as PYTHONPATH imports the same)."""
    return package_dir_in_use()


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    """A fresh telemetry run directory for the processes a test starts (they are told it
    through RDMA_INTEROP_RUN_DIR), readable by every namespace host's backlog-stat."""
    d = tmp_path / "run"
    d.mkdir()
    os.chmod(d, 0o755)
    return d
