"""The python tier tests the rdma_interop package of the build tree under test: its python/
directory holds the package next to the built _core module (tests/support/package.py puts it
first on sys.path). Run with Debian's interpreter, the one the module is built for:

    RDMA_INTEROP_BUILD=build-py /usr/bin/python3 -m pytest tests/python

Without $RDMA_INTEROP_BUILD: an installed package, else build/ at the repository root.
"""

from __future__ import annotations

import pytest

from tests.support.package import built_package_dir
from tests.support.paths import build_dir, build_dir_named


def pytest_configure(config: pytest.Config) -> None:
    if build_dir_named() and built_package_dir() is None:
        raise pytest.UsageError(f"RDMA_INTEROP_BUILD={build_dir()}: no python/rdma_interop "
                                "there; build the bindings first")
