"""Fixtures for the devices tier: a lab of two qemu guests (kernel siw and rxe), reached over
real SSH, for the device tier (rdma_interop.device_tier) to run across.

Set RDMA_INTEROP_SKIP_DEVICES=1 to skip the tier in quick local loops; CI runs it.
Results go to $RDMA_INTEROP_RESULTS/devices (default interop-results/devices).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from rdma_interop.lab import SshHost, load_lab_file

from tests.support.paths import items_in, results_dir

from .guest_lab import GuestLab


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("RDMA_INTEROP_SKIP_DEVICES") == "1":
        skip = pytest.mark.skip(reason="RDMA_INTEROP_SKIP_DEVICES=1")
        for item in items_in(Path(__file__).parent, items):
            item.add_marker(skip)


@pytest.fixture(scope="module")
def guest_lab() -> Iterator[GuestLab]:
    with GuestLab(results_dir("devices") / "lab") as lab:
        yield lab


@pytest.fixture()
def lab_hosts(guest_lab: GuestLab) -> list[SshHost]:
    return load_lab_file(guest_lab.lab_file).hosts
