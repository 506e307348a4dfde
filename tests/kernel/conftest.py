"""Fixtures for the kernel tier: one qemu guest with kernel siw and rxe for the session.

Set RDMA_INTEROP_SKIP_KERNEL=1 to skip the tier in quick local loops; CI runs it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from guest import Guest, default_log_dir  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kernel: needs the qemu guest with kernel siw/rxe")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.kernel)
    if os.environ.get("RDMA_INTEROP_SKIP_KERNEL") == "1":
        skip = pytest.mark.skip(reason="RDMA_INTEROP_SKIP_KERNEL=1")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def guest() -> Iterator[Guest]:
    g = Guest(log_dir=default_log_dir())
    g.start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture()
def live_guest(guest: Guest) -> Guest:
    """The session's guest, rebooted first if an earlier test crashed or hung it."""
    if not guest.alive():
        guest.restart()
    return guest
