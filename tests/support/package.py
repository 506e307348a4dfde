"""Which rdma_interop package the tests import.

A build tree named by $RDMA_INTEROP_BUILD: its python/ directory, which holds the package next
to the _core module built from the same sources. Otherwise whatever `import rdma_interop`
finds (an installed package, or PYTHONPATH: what interop-run.sh and the lab playbooks test),
then build/python in the repository, then the source tree's pure-Python modules
(bindings/python: lab, matrices, reports; whatever needs _core then fails to import).
The root conftest.py calls use_rdma_interop_package() once, before any tier imports it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from tests.support.paths import REPO_ROOT, build_dir, build_dir_named

SOURCE_PACKAGE_DIR = REPO_ROOT / "bindings" / "python"


def built_package_dir() -> Path | None:
    """build_dir()/python when it holds the package, else None."""
    python_dir = build_dir() / "python"
    return python_dir if (python_dir / "rdma_interop").is_dir() else None


def _first_on_path(directory: Path) -> None:
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))


def use_rdma_interop_package() -> Path:
    """Puts the package under test first on sys.path (see the module's docstring); returns
    the directory `import rdma_interop` now finds it in."""
    built = built_package_dir()
    if build_dir_named():
        if built is not None:
            _first_on_path(built)
    elif importlib.util.find_spec("rdma_interop") is None:
        _first_on_path(built or SOURCE_PACKAGE_DIR)
    spec = importlib.util.find_spec("rdma_interop")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def package_dir_in_use() -> Path | None:
    """The build tree's python/ directory when the tests import the package from it, else
    None (an installed package: a child process finds it without PYTHONPATH)."""
    built = built_package_dir()
    spec = importlib.util.find_spec("rdma_interop")
    if built is None or spec is None or spec.origin is None:
        return None
    return built if Path(spec.origin).parent.parent == built else None
