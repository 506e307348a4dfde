"""Fixtures for the stream tier: two namespace hosts, and how to run Python on them with and
without the stream preload.

    /usr/bin/python3 -m pytest tests/stream -v      (root: network namespaces)

One NamespaceLab (a veth pair) for the whole tier; each test starts its own processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import rdma_interop
from tests.stream.stream_support import PythonRunner
from tests.support.namespace_lab import namespace_lab_fixture

lab = namespace_lab_fixture(2, prefix="rdmast")


@pytest.fixture()
def python(tmp_path: Path) -> PythonRunner:
    """Runs /usr/bin/python3 in the lab's hosts with the package under test importable."""
    return PythonRunner(package_parent=Path(rdma_interop.__file__).resolve().parent.parent,
                        work=tmp_path)
