"""Fixtures for the storm tier: a lab of one server host and four client hosts, the tools.

    /usr/bin/python3 -m pytest tests/storm -v -s       (root: network namespaces)

The lab is one NamespaceLab (bridge) for the whole tier; each test starts its own
`rdma-probe serve` on host 0 with a fresh telemetry run directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from storm_support import REPO, build_dir, find_tool


def _use_rdma_interop_package() -> None:
    """rdma_interop.lab from $RDMA_INTEROP_BUILD/python, an installed package, or the tree
    (lab is pure Python; this tier does not need the _core module)."""
    sys.path.insert(0, str(build_dir() / "python"))
    try:
        import rdma_interop.lab  # noqa: F401
    except ImportError:
        for name in [m for m in sys.modules if m == "rdma_interop" or m.startswith("rdma_interop.")]:
            del sys.modules[name]
        sys.path.insert(0, str(REPO / "bindings" / "python"))
        import rdma_interop.lab  # noqa: F401


_use_rdma_interop_package()
from rdma_interop.lab import LabError, NamespaceLab, namespaces_available  # noqa: E402

#: Server host and client hosts.
N_CLIENTS = 4


@pytest.fixture(scope="session")
def tools() -> dict[str, str]:
    found = {"rdma-probe": find_tool("rdma-probe", "rdma-probe"),
             "rdma-storm": find_tool("rdma-storm", "rdma-storm"),
             "backlog-stat": find_tool("backlog-stat", "backlog-stat")}
    missing = [k for k, v in found.items() if v is None]
    if missing:
        pytest.fail(f"not built: {', '.join(missing)} (looked in {build_dir()}, PATH, build*/)")
    return {k: str(v) for k, v in found.items()}


@pytest.fixture(scope="session")
def lab() -> Iterator[NamespaceLab]:
    ok, why = namespaces_available()
    if not ok:
        pytest.skip(why)
    ns_lab = NamespaceLab(1 + N_CLIENTS, prefix="rdmast")
    try:
        ns_lab.start()
    except LabError as e:
        pytest.skip(f"cannot build the namespace lab: {e}")
    try:
        yield ns_lab
    finally:
        ns_lab.close()


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    os.chmod(d, 0o755)
    return d
