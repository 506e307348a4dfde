"""Fixtures for the mesh tier: a lab of five namespace hosts, the tools.

    /usr/bin/python3 -m pytest tests/mesh -v -s       (root: network namespaces)

The lab is one NamespaceLab (bridge) for the whole tier; each test starts its own
`rdma-mesh node` per host with a fresh telemetry run directory (run_dir, tests/support).
"""

from __future__ import annotations

import pytest

from tests.support.namespace_lab import namespace_lab_fixture
from tests.support.tools import find_tool, require_tools

#: The stalled-peer test's mesh: four healthy nodes and one that stops.
N_HOSTS = 5

lab = namespace_lab_fixture(N_HOSTS, prefix="rdmams")


@pytest.fixture(scope="session")
def tools() -> dict[str, str | None]:
    found: dict[str, str | None] = dict(require_tools("rdma-mesh"))
    # backlog-stat is optional here: only the telemetry test needs it, and skips without it.
    backlog_stat = find_tool("backlog-stat")
    found["backlog-stat"] = str(backlog_stat) if backlog_stat else None
    return found
