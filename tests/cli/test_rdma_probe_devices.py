"""rdma-probe devices on a node without RDMA: the empty answer is a fact, not an error.

This machine's kernel has no RDMA at all (no /sys/class/infiniband), so ibv_get_device_list
finds nothing; the kernel tier (tests/kernel/test_rdma_probe_devices.py) lists siw and rxe.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Callable

import pytest

from .probe_support import Run

RunProbe = Callable[..., Run]


@pytest.fixture(autouse=True)
def _no_rdma_here() -> None:
    if Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir()):
        pytest.skip("this node has RDMA devices; these tests are for a node without any")


def test_devices_without_rdma_says_so_and_succeeds(rdma_probe: RunProbe) -> None:
    r = rdma_probe("devices")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "no RDMA device on this node (ibv_get_device_list found none)\n"
    assert r.stderr == ""


def test_devices_json_without_rdma_is_an_empty_list(rdma_probe: RunProbe) -> None:
    r = rdma_probe("devices", "--json")
    assert r.returncode == 0, r.stderr
    assert r.json() == {"schema": "rdma-interop/devices/1", "node": socket.gethostname(),
                        "devices": [], "note": "no RDMA device"}


@pytest.mark.parametrize("extra", [(), ("--json",)], ids=["text", "json"])
def test_devices_unknown_device_is_a_usage_error_naming_those_present(
        rdma_probe: RunProbe, extra: tuple[str, ...]) -> None:
    r = rdma_probe("devices", "--device", "nosuch", *extra)
    assert r.returncode == 2
    assert r.stdout == ""
    assert r.stderr.strip() == (
        "rdma-probe devices: error: no RDMA device 'nosuch' on this node "
        "(present: none, ibv_get_device_list found no device)")


def test_devices_is_a_command_the_first_argument_knows(rdma_probe: RunProbe) -> None:
    r = rdma_probe("nosuch")
    assert r.returncode == 2
    assert "(serve, connect, personalities, probe, devices, xrc)" in r.stderr
    assert "devices" in rdma_probe("--help").stdout
    help_text = rdma_probe("devices", "--help")
    assert help_text.returncode == 0
    assert "--device NAME" in help_text.stdout and "EXIT STATUS" in help_text.stdout
