"""The root of every tier: the rdma_interop package under test on sys.path before any tier
imports it, and the fixtures tests/support/fixtures.py shares.

    /usr/bin/python3 -m pytest tests            every tier in one session
    /usr/bin/python3 -m pytest tests/<tier>     one tier, as tools/test-all.sh runs it

$RDMA_INTEROP_BUILD names the build tree under test (absolute, or relative to the
repository; default build/): its tools and its python/ package (tests/support/package.py).
"""

from __future__ import annotations

import pytest

from tests.support.package import use_rdma_interop_package

PACKAGE_FROM = use_rdma_interop_package()

pytest_plugins = ["tests.support.fixtures"]


def pytest_report_header(config: pytest.Config) -> str:
    return f"rdma_interop from: {PACKAGE_FROM}"
