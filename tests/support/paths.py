"""Where things are: the repository, the build tree under test, the shipped personalities,
the results directory and the interpreter the Python module is built for."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED_PERSONALITIES = REPO_ROOT / "tools" / "personalities"
#: The interpreter the _core module is built for (Debian's): child processes that import
#: rdma_interop run under it, whatever python3 ran pytest.
DEBIAN_PYTHON = "/usr/bin/python3"


def build_dir() -> Path:
    """The build tree under test: $RDMA_INTEROP_BUILD (absolute, or relative to the
    repository), else build/ in the repository."""
    build = Path(os.environ.get("RDMA_INTEROP_BUILD", "build"))
    return (build if build.is_absolute() else REPO_ROOT / build).resolve()


def build_dir_named() -> bool:
    """Whether the caller named the build tree ($RDMA_INTEROP_BUILD): then what is missing
    from it is an error, never something found elsewhere."""
    return bool(os.environ.get("RDMA_INTEROP_BUILD"))


def results_dir(tier: str) -> Path:
    """Where a tier writes its matrices and logs: $RDMA_INTEROP_RESULTS/<tier> (default
    interop-results/<tier> in the repository)."""
    base = Path(os.environ.get("RDMA_INTEROP_RESULTS", REPO_ROOT / "interop-results"))
    return base / tier


def items_in(folder: Path, items: Iterable[pytest.Item]) -> list[pytest.Item]:
    """The collected tests under `folder`: what a tier's collection hook may touch (in a
    `pytest tests` session every tier's items pass through every tier's hooks)."""
    return [item for item in items if folder in item.path.parents]
