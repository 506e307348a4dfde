"""tools/interop-run.sh: a results directory it cannot write is refused before anything runs,
and the exit status is what its help says (0 without FAIL cells, 1 with one).

The end-to-end runs use the build tree (--no-build, its rdma-probe first on PATH, its
package on PYTHONPATH) and a 1x1 personality matrix on the namespace lab (root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT, SHIPPED_PERSONALITIES

from .probe_support import PROBE

SCRIPT = REPO_ROOT / "tools" / "interop-run.sh"


def interop_run(*args: str, env: dict[str, str] | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env=env or dict(os.environ), cwd=REPO_ROOT)


@pytest.mark.parametrize("results", ["a-file", "a-file/below", "/proc", "/proc/interop"])
def test_an_unusable_results_directory_is_refused_before_anything_runs(
        tmp_path: Path, results: str) -> None:
    (tmp_path / "a-file").write_text("not a directory\n")
    target = results if results.startswith("/") else str(tmp_path / results)
    started = time.monotonic()
    done = interop_run("--results", target, timeout=60)
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        f"interop-run: --results: cannot write reports to {target}: "), done.stderr
    assert "==>" not in done.stdout, "a step began"  # no dependencies, build, lab or case
    assert time.monotonic() - started < 10


def test_relative_paths_are_the_callers(tmp_path: Path) -> None:
    """A relative --lab or --results names a path where the script was run from, not in the
    repository the script cds into."""
    (tmp_path / "a-file").write_text("not a directory\n")
    done = subprocess.run(["bash", str(SCRIPT), "--results", "a-file"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done
    assert f"cannot write reports to {tmp_path}/a-file: " in done.stderr, done.stderr
    done = subprocess.run(["bash", str(SCRIPT), "--lab", "no-lab.yaml"], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 2, done
    assert f"no such lab file: {tmp_path}/no-lab.yaml" in done.stderr, done.stderr


def test_pytest_refuses_an_unusable_results_directory_at_once(tmp_path: Path) -> None:
    """The interop suite itself, run by hand: a usage error before any case, not an
    INTERNALERROR after all of them."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(REPO_ROOT / "tests" / "interop"), "--results=/proc/interop"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
    assert "--results: /proc/interop cannot be created" in done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr


@pytest.fixture(scope="module")
def build_env() -> dict[str, str]:
    if PROBE is None:
        pytest.skip("rdma-probe is not built")
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("the namespace lab needs root and iproute2")
    build = PROBE.parents[1]
    return {**os.environ, "PATH": f"{PROBE.parent}:{os.environ['PATH']}",
            "PYTHONPATH": str(build / "python"), "RDMA_INTEROP_BUILD": str(build)}


@pytest.fixture
def one_personality(tmp_path: Path) -> Path:
    directory = tmp_path / "personalities"
    directory.mkdir()
    shutil.copy(SHIPPED_PERSONALITIES / "siw.json", directory)
    return directory


def test_a_passing_run_exits_0_with_its_reports(tmp_path: Path, build_env: dict[str, str],
                                               one_personality: Path) -> None:
    results = tmp_path / "results"
    done = interop_run("--no-build", "--no-kernel", "--no-devices", "--results", str(results),
                       "--", f"--personality-dir={one_personality}", "-k",
                       "initiator_meets_responder", env=build_env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert ("interop-run: interop matrix: 1 cells: 1 pass, 0 expected-fail, 0 finding, 0 fail, "
            "0 skip -> ok") in done.stdout
    assert "interop-run: OK" in done.stdout
    assert f"interop-run: report: {results}/matrix.html" in done.stdout
    for name in ("matrix.txt", "matrix.json", "matrix-junit.xml", "matrix.html"):
        assert (results / name).is_file(), name
    assert json.loads((results / "matrix.json").read_text())["summary"]["pass"] == 1


def test_a_fail_cell_makes_the_run_exit_1(tmp_path: Path, build_env: dict[str, str],
                                          one_personality: Path) -> None:
    """Today's bug: interop-run said its help promised 1 for a failed cell, and exited 0."""
    results = tmp_path / "results"
    done = interop_run("--no-build", "--no-kernel", "--no-devices", "--strict", "--results",
                       str(results), "--", f"--personality-dir={one_personality}", "-k",
                       "initiator_meets_responder", "--connect-timeout=0.001", env=build_env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "-> FAILED: pytest exited 1" in done.stdout and "1 FAIL cell(s)" in done.stdout
    assert "interop-run: FAILED (--strict)" in done.stdout
    doc = json.loads((results / "matrix.json").read_text())
    assert doc["summary"]["fail"] == 1
    assert (results / "matrix.html").is_file()
