"""Fixtures for the mesh tier: a lab of five namespace hosts, the tools.

    /usr/bin/python3 -m pytest tests/mesh -v -s       (root: network namespaces)

The lab is one NamespaceLab (bridge) for the whole tier; each test starts its own
`rdma-mesh node` per host with a fresh telemetry run directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh_support import REPO, build_dir, find_tool


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

#: The stalled-peer test's mesh: four healthy nodes and one that stops.
N_HOSTS = 5


@pytest.fixture(scope="session")
def tools() -> dict[str, str | None]:
    mesh = find_tool("rdma-mesh", "rdma-mesh")
    if mesh is None:
        pytest.fail(f"rdma-mesh not built (looked in {build_dir()}, PATH, build*/)")
    # backlog-stat is optional here: only the telemetry test needs it, and skips without it.
    return {"rdma-mesh": mesh, "backlog-stat": find_tool("backlog-stat", "backlog-stat")}


@pytest.fixture(scope="session")
def lab() -> Iterator[NamespaceLab]:
    ok, why = namespaces_available()
    if not ok:
        pytest.skip(why)
    ns_lab = NamespaceLab(N_HOSTS, prefix="rdmams")
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
