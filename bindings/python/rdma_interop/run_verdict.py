"""A run's verdict from its matrices: what interop-run exits with.

    python3 -m rdma_interop.run_verdict [--strict] \\
        --stage "interop matrix" interop-results/matrix.json 0 --no-skips "interop matrix" \\
        --stage "kernel peers" interop-results/kernel/matrix.json 0 \\
        --stage "device tier" interop-results/devices/device-matrix.json 0

Each stage is a matrix file (rdma-interop/matrix/1 or /2, or rdma-interop/device-matrix/1:
anything with a "summary" of the project's verdicts) and the exit status of the pytest run
that wrote it. A stage fails the run when its matrix is missing or unreadable or has no
cells, when its pytest failed (a test asserts what our side or the harness must do), when a
cell FAILed, with --strict when a cell is a FINDING, and, for a stage named by --no-skips
(the personality matrix, where every cell should run), when a cell was skipped. FINDINGs
(the peer deviates from the standard or crashed) and SKIPs with a reason otherwise do not.

Prints one line per stage and the verdict; exits 0 (ok), 1 (the run failed) or 2 (usage).
Pure Python: interop-run calls it from the checkout.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Stage", "judge", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_COUNTS = ("pass", "expected-fail", "finding", "fail", "skip")


@dataclass
class Stage:
    name: str
    path: Path
    pytest_status: int
    skips_fail: bool = False
    summary: dict[str, int] | None = None
    problem: str | None = None  # why there is no summary

    def load(self) -> None:
        try:
            doc = json.loads(self.path.read_text())
            summary = doc["summary"]
            self.summary = {k: int(summary.get(k, 0)) for k in ("total", *_COUNTS)}
        except FileNotFoundError:
            self.problem = f"no matrix ({self.path} was not written)"
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            self.problem = f"{self.path} is not a matrix ({e})"

    def reasons(self, *, strict: bool) -> list[str]:
        """Why this stage fails the run; empty when it does not."""
        out = []
        if self.problem:
            out.append(self.problem)
        if self.pytest_status != 0:
            out.append(f"pytest exited {self.pytest_status} (a test of our side or the harness "
                       "failed)")
        s = self.summary
        if s is not None:
            if s["total"] == 0:
                out.append("no cells")
            if s["fail"]:
                out.append(f"{s['fail']} FAIL cell(s)")
            if strict and s["finding"]:
                out.append(f"{s['finding']} FINDING cell(s) (--strict)")
            if self.skips_fail and s["skip"]:
                out.append(f"{s['skip']} SKIP cell(s) (every cell of this stage must run)")
        return out

    def line(self, *, strict: bool) -> str:
        s = self.summary
        counts = ("-" if s is None else
                  f"{s['total']} cells: {s['pass']} pass, {s['expected-fail']} expected-fail, "
                  f"{s['finding']} finding, {s['fail']} fail, {s['skip']} skip")
        why = self.reasons(strict=strict)
        if why:
            verdict = "FAILED: " + "; ".join(why)
        elif s is not None and s["finding"]:
            verdict = "ok (FINDINGs fail the run only with --strict)"
        else:
            verdict = "ok"
        return f"{self.name}: {counts} -> {verdict}"


def judge(stages: Sequence[Stage], *, strict: bool = False) -> int:
    """EXIT_OK when no stage fails the run, else EXIT_FAILED; loads the stages first."""
    for stage in stages:
        if stage.summary is None and stage.problem is None:
            stage.load()
    failed = [s for s in stages if s.reasons(strict=strict)]
    return EXIT_FAILED if failed or not stages else EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m rdma_interop.run_verdict",
        description="The verdict of an interop run from its matrices and pytest statuses.",
        epilog="Exit status: 0 ok; 1 a stage failed the run (FAIL cells, a failed pytest, a "
               "missing matrix; with --strict also FINDING cells); 2 usage.")
    parser.add_argument("--stage", nargs=3, action="append", default=[],
                        metavar=("NAME", "MATRIX_JSON", "PYTEST_STATUS"),
                        help="a stage of the run; repeatable")
    parser.add_argument("--no-skips", action="append", default=[], metavar="NAME",
                        help="a stage in which a SKIP cell fails the run")
    parser.add_argument("--strict", action="store_true",
                        help="FINDING cells fail the run too")
    args = parser.parse_args(argv)
    stages = []
    for name, path, status in args.stage:
        try:
            code = int(status)
        except ValueError:
            parser.error(f"--stage {name}: pytest status {status!r} is not a number")
        stages.append(Stage(name, Path(path), code, skips_fail=name in args.no_skips))
    unknown = [n for n in args.no_skips if n not in {s.name for s in stages}]
    if unknown:
        parser.error(f"--no-skips names no stage: {', '.join(unknown)}")
    if not stages:
        parser.error("no --stage given")
    code = judge(stages, strict=args.strict)
    for stage in stages:
        print(f"interop-run: {stage.line(strict=args.strict)}")
    print(f"interop-run: {'OK' if code == EXIT_OK else 'FAILED'}"
          + (" (--strict)" if args.strict else ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
