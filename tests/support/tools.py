"""The operator tools the tiers run, found one way.

The build tree lays rdma-probe out as tools/rdma-probe and every other tool as
tools/<name>/<name>; an installation puts them all on PATH.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT, build_dir, build_dir_named

#: Every operator tool.
TOOLS = ("rdma-probe", "rdma-storm", "rdma-mesh", "backlog-stat", "verbs-check", "rdma-stream")


def _in_tree(build: Path, name: str) -> list[Path]:
    return [build / "tools" / name, build / "tools" / name / name]


def _runnable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_tool(name: str) -> Path | None:
    """`name` to run on this machine, or None. A build tree named by $RDMA_INTEROP_BUILD is
    the only place looked (the tests must not run another build's binary in its place);
    otherwise build/ in the repository, then PATH, then the newest build*/ tree."""
    candidates = _in_tree(build_dir(), name)
    if not build_dir_named():
        on_path = shutil.which(name)
        if on_path:
            candidates.append(Path(on_path))
        candidates += sorted((p for tree in REPO_ROOT.glob("build*")
                              for p in _in_tree(tree, name) if _runnable(p)),
                             key=lambda p: p.stat().st_mtime, reverse=True)
    return next((c.resolve() for c in candidates if _runnable(c)), None)


def built_tool(name: str) -> Path:
    """The build tree's own `name` (what a guest runs through its /host share); the test
    fails when it is not built."""
    found = next((p for p in _in_tree(build_dir(), name) if _runnable(p)), None)
    if found is None:
        pytest.fail(f"{name} is not built in {build_dir()} "
                    f"(cmake --build {build_dir()} --target {name})")
    return found


def require_tools(*names: str) -> dict[str, str]:
    """Each of `names` as find_tool() finds it; the test fails naming what is not built."""
    found = {name: find_tool(name) for name in names}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        where = (str(build_dir()) if build_dir_named()
                 else f"{build_dir()}, PATH, {REPO_ROOT}/build*/")
        pytest.fail(f"not built: {', '.join(missing)} (looked in {where})")
    return {name: str(path) for name, path in found.items()}


def tool_or_skip(name: str) -> Path:
    """find_tool(name); the test skips when it is not built (a build without an optional
    dependency, e.g. rdma-core for verbs-check)."""
    found = find_tool(name)
    if found is None:
        pytest.skip(f"{name} is not built (set RDMA_INTEROP_BUILD or build into build/)")
    return found
