"""Finds the rdma_interop package these tests exercise.

In order: the build tree named by $RDMA_INTEROP_BUILD (its python/ directory holds the
package next to the built _core module), then build/ at the repository root, then whatever
`import rdma_interop` finds (an installed package). Run with Debian's interpreter, the one
the module is built for:

    RDMA_INTEROP_BUILD=build-py /usr/bin/python3 -m pytest tests/python
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def _package_dir() -> Path | None:
    """The directory to put first on sys.path, or None to rely on an installed package."""
    configured = os.environ.get("RDMA_INTEROP_BUILD")
    if configured:
        build = Path(configured)
        if not build.is_absolute():
            build = REPO_ROOT / build
        python_dir = build / "python"
        if not (python_dir / "rdma_interop").is_dir():
            raise pytest.UsageError(
                f"RDMA_INTEROP_BUILD={configured}: no {python_dir}/rdma_interop; build the bindings first"
            )
        return python_dir
    default = REPO_ROOT / "build" / "python"
    if (default / "rdma_interop").is_dir():
        return default
    return None


PACKAGE_DIR = _package_dir()
if PACKAGE_DIR is not None:
    sys.path.insert(0, str(PACKAGE_DIR))


def pytest_report_header(config: pytest.Config) -> str:
    where = str(PACKAGE_DIR) if PACKAGE_DIR else "the installed package (sys.path)"
    return f"rdma_interop from: {where}"


@pytest.fixture(scope="session")
def package_dir() -> Path | None:
    """The build tree's python/ directory in use, or None for an installed package."""
    return PACKAGE_DIR
