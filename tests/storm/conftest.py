"""Fixtures for the storm tier: a lab of one server host and four client hosts, the tools.

    /usr/bin/python3 -m pytest tests/storm -v -s       (root: network namespaces)

The lab is one NamespaceLab (bridge) for the whole tier; each test starts its own
`rdma-probe serve` on host 0 with a fresh telemetry run directory (run_dir, tests/support).
"""

from __future__ import annotations

import pytest

from tests.support.namespace_lab import namespace_lab_fixture
from tests.support.tools import require_tools

#: Server host and client hosts.
N_CLIENTS = 4

lab = namespace_lab_fixture(1 + N_CLIENTS, prefix="rdmast")


@pytest.fixture(scope="session")
def tools() -> dict[str, str]:
    return require_tools("rdma-probe", "rdma-storm", "backlog-stat")
