"""rdma_interop.run_verdict: what interop-run exits with, from its matrices.

FINDINGs are reported and do not fail a run unless it is strict; a FAIL cell, a failed
pytest, a missing matrix or (in the personality matrix) a skipped cell do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rdma_interop.device_matrix import DeviceCell, DeviceMatrix
from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome
from rdma_interop.run_verdict import main


def personality_matrix(tmp: Path, *outcomes: Outcome) -> Path:
    m = InteropMatrix()
    for i, o in enumerate(outcomes or (Outcome.PASS, Outcome.XFAIL)):
        m.add(CaseResult("siw", f"r{i}", o, expected_failure="rtr_timeout"))
    return m.write_json(tmp / "matrix.json")


def kernel_matrix(tmp: Path, findings: int = 10, fails: int = 0) -> Path:
    """Like the kernel tier's: findings (deviations, a crash), skips with a reason."""
    m = InteropMatrix("kernel", layout="checks")
    for i in range(findings):
        m.add(CaseResult("fault", "kernel-siw", Outcome.FINDING, reason="deviation",
                         check=f"fault {i}", peer="ours->siw"))
    m.add(CaseResult("ours-tcp", "kernel-siw", Outcome.XFAIL, check="rev2 rtr=send crc",
                     peer="ours->siw", expected_failure="no_matching_rtr",
                     evidence=[Evidence.crash("kernel BUG at iwcm.c:969!", "trace")]))
    m.add(CaseResult("ours-verbs@siw", "kernel-siw", Outcome.SKIP, check="xrc", peer="verbs@siw",
                     notes=["EOPNOTSUPP"]))
    for i in range(fails):
        m.add(CaseResult("fault", "kernel-siw", Outcome.FAIL, reason="no-answer",
                         check=f"broken {i}", peer="ours->siw"))
    (tmp / "kernel").mkdir(exist_ok=True)
    return m.write_json(tmp / "kernel" / "matrix.json")


def run(tmp: Path, *extra: str, interop: Path, kernel: Path | None = None,
        kernel_status: int = 0, interop_status: int = 0) -> int:
    args = ["--stage", "interop matrix", str(interop), str(interop_status),
            "--no-skips", "interop matrix"]
    if kernel is not None:
        args += ["--stage", "kernel peers", str(kernel), str(kernel_status)]
    return main([*args, *extra])


def test_findings_do_not_fail_a_run_and_fail_a_strict_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 22: the kernel stage had 10 findings and a crash; they are the peer's.
    interop, kernel = personality_matrix(tmp_path), kernel_matrix(tmp_path)
    assert run(tmp_path, interop=interop, kernel=kernel) == 0
    out = capsys.readouterr().out
    assert ("interop-run: kernel peers: 12 cells: 0 pass, 0 expected-fail, 11 finding, 0 fail, "
            "1 skip -> ok (FINDINGs fail the run only with --strict)") in out
    assert out.rstrip().endswith("interop-run: OK")
    assert run(tmp_path, "--strict", interop=interop, kernel=kernel) == 1
    out = capsys.readouterr().out
    assert "FAILED: 11 FINDING cell(s) (--strict)" in out
    assert out.rstrip().endswith("interop-run: FAILED (--strict)")


def test_a_fail_cell_fails_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, interop=personality_matrix(tmp_path),
               kernel=kernel_matrix(tmp_path, findings=0, fails=1)) == 1
    assert "kernel peers: " in capsys.readouterr().out
    assert run(tmp_path, interop=personality_matrix(tmp_path, Outcome.PASS, Outcome.FAIL)) == 1


def test_a_skip_fails_the_personality_matrix_only(tmp_path: Path) -> None:
    interop = personality_matrix(tmp_path, Outcome.PASS, Outcome.SKIP)
    assert run(tmp_path, interop=interop) == 1
    assert run(tmp_path, interop=personality_matrix(tmp_path), kernel=kernel_matrix(tmp_path)) == 0


def test_a_failed_pytest_or_a_missing_matrix_fails_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    interop = personality_matrix(tmp_path)
    assert run(tmp_path, interop=interop, kernel=kernel_matrix(tmp_path), kernel_status=1) == 1
    assert "pytest exited 1" in capsys.readouterr().out
    assert run(tmp_path, interop=interop, kernel=tmp_path / "nowhere.json") == 1
    assert "no matrix" in capsys.readouterr().out
    (tmp_path / "broken.json").write_text("{")
    assert run(tmp_path, interop=tmp_path / "broken.json") == 1
    empty = InteropMatrix().write_json(tmp_path / "empty.json")
    assert run(tmp_path, interop=empty) == 1
    assert "no cells" in capsys.readouterr().out


def test_a_device_matrix_is_a_stage_like_the_others(tmp_path: Path) -> None:
    d = DeviceMatrix()
    d.add(DeviceCell("verbs-check", "n1/siw0", "n2/siw0", "iwarp", "finding", "flushed"))
    path = tmp_path / "device-matrix.json"
    path.write_text(json.dumps(d.to_json()))
    args = ["--stage", "device tier", str(path), "0"]
    assert main(args) == 0 and main([*args, "--strict"]) == 1


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main(["--stage", "x", str(tmp_path), "zero"])
    assert e.value.code == 2
