"""Fixtures for the kernel tier: one qemu guest with kernel siw and rxe for the session, and
the tier's one matrix.

The matrix has the checks as rows (grouped: rping, rdma-probe, faults, verbs-check, xrc)
and the kernel peers as columns (PEERS). A kernel deviation is a FINDING with its evidence
(frames in hex, Terminates decoded in the HTML); a kernel crash is a FINDING "crashed"
with its trace, wherever it happens; the tests themselves fail only when our side or the
harness misbehaves. Written at the end to $RDMA_INTEROP_RESULTS/kernel/ (default
./interop-results/kernel): matrix.txt, matrix.json, matrix-junit.xml (FINDINGs are failures
there only with RDMA_INTEROP_STRICT=1) and matrix.html.

Set RDMA_INTEROP_SKIP_KERNEL=1 to skip the tier in quick local loops; CI runs it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The package of the build tree under test ($RDMA_INTEROP_BUILD), before an installed one.
if os.environ.get("RDMA_INTEROP_BUILD"):
    _build = Path(os.environ["RDMA_INTEROP_BUILD"])
    _build = _build if _build.is_absolute() else Path(__file__).resolve().parents[2] / _build
    if (_build / "python" / "rdma_interop").is_dir():
        sys.path.insert(0, str(_build / "python"))

from guest import Guest, KernelCrash, default_log_dir  # noqa: E402

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix  # noqa: E402
from rdma_interop.results import results_dir_problem  # noqa: E402
from rdma_interop.text_grid import WIDTH, wrap_note  # noqa: E402
from rdma_interop.verdict import use_colour  # noqa: E402

MATRIX_KEY = pytest.StashKey[InteropMatrix]()
#: The columns: which kernel stack a check meets, and how.
OURS_TO_SIW, SIW_TO_OURS, VERBS_SIW, VERBS_RXE = "ours->siw", "siw->ours", "verbs@siw", "verbs@rxe"
PEERS = [OURS_TO_SIW, SIW_TO_OURS, VERBS_SIW, VERBS_RXE]
#: The rows' groups, in display order.
GROUPS = ["rping", "rdma-probe", "faults", "verbs-check", "xrc"]
LEGEND = [
    "Peers: ours->siw = our tcp initiator against the kernel's siw as responder (rping -s, "
    "rdma-probe serve on verbs://, the injected faults); siw->ours = the kernel's siw "
    "initiating (rping -c, rdma-probe connect on verbs://) to our tcp responder; verbs@siw, "
    "verbs@rxe = our verbs provider on the guest's siw0 or rxe0 (rdma_cm, both ends in the "
    "guest).",
]


def results_dir() -> Path:
    base = Path(os.environ.get("RDMA_INTEROP_RESULTS", Path(__file__).resolve().parents[2]
                               / "interop-results"))
    return base / "kernel"


def strict() -> bool:
    return os.environ.get("RDMA_INTEROP_STRICT") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kernel: needs the qemu guest with kernel siw/rxe")
    if not config.getoption("help") and not config.getoption("collectonly"):
        problem = results_dir_problem(results_dir())
        if problem:
            raise pytest.UsageError(f"RDMA_INTEROP_RESULTS: {problem}")
    config.stash[MATRIX_KEY] = InteropMatrix(
        "Our stack against the Linux kernel's siw and rxe (qemu guest)", layout="checks",
        peers=PEERS, groups=GROUPS, legend=LEGEND)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.kernel)
    if os.environ.get("RDMA_INTEROP_SKIP_KERNEL") == "1":
        skip = pytest.mark.skip(reason="RDMA_INTEROP_SKIP_KERNEL=1")
        for item in items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def guest() -> Iterator[Guest]:
    g = Guest(log_dir=default_log_dir())
    g.start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture()
def live_guest(guest: Guest) -> Guest:
    """The session's guest, rebooted first if an earlier test crashed or hung it."""
    if not guest.alive():
        guest.restart()
    return guest


@pytest.fixture(scope="session")
def kernel_matrix(request: pytest.FixtureRequest, guest: Guest) -> InteropMatrix:
    """The kernel tier's matrix: tests add() a CaseResult per check they ran, with `group`,
    `check` and `peer` (one of PEERS) set, short notes, and the evidence (crash traces,
    frames). Written to interop-results/kernel/ at the end."""
    m = request.config.stash[MATRIX_KEY]
    m.environment["guest kernel"] = guest.kernel_version
    return m


def add_case(matrix: InteropMatrix, case: CaseResult) -> None:
    """Adds a case, keeping notes and evidence of an earlier case for the same cell (several
    tests may each contribute a finding to one cell)."""
    for old in matrix.cases:
        if old.case_id == case.case_id:
            case.notes = list(dict.fromkeys([*old.notes, *case.notes]))
            case.evidence = list(dict.fromkeys([*old.evidence, *case.evidence]))
    matrix.add(case)


def attach_crashes(cell: CaseResult, crashes: list[KernelCrash]) -> None:
    """Each crash as a short note and its whole trace as evidence: the matrix makes the
    cell a FINDING "crashed" (rdma_interop.matrix.apply_crash_rule)."""
    for crash in crashes:
        cell.notes.append(crash.note())
        cell.evidence.append(Evidence.crash(
            crash.title, f"{crash.gist()}\n\n{crash.trace}\n\n(the whole console: "
                         f"{crash.console_log})"))


def _params(view: Mapping[str, Any] | None) -> str:
    if not view:
        return "-"
    words = []
    if view.get("revision"):  # verbs cannot see MPA (revision 0): no revision, no CRC
        words.append(f"rev{view['revision']}")
        if "crc" in view:
            words.append("crc" if view["crc"] else "no-crc")
    if view.get("peer_to_peer"):
        words.append(f"p2p rtr={view.get('rtr')}")
    if view.get("ird") is not None:
        words.append(f"ird/ord {view['ird']}/{view.get('ord')}")
    return " ".join(words) or "-"


def render(m: InteropMatrix, *, colour: bool = False) -> str:
    """The matrix, then what each MPA connection negotiated, in the matrix's order (fault
    cases all use one setup; verbs connections have no MPA to show: both in the HTML)."""
    lines = [m.render_table(colour=colour).rstrip("\n"), "",
             "MPA negotiated (initiator's view | responder's view):"]
    rows, cols = m.checks, m.peers
    for case in sorted(m.cases, key=lambda c: (rows.index(c.check or ""),
                                               cols.index(c.peer or ""))):
        views = [v for v in (case.negotiated, case.responder_negotiated) if v]
        if case.group == "faults" or not any(v.get("revision") for v in views):
            continue
        mine, theirs = _params(case.negotiated), _params(case.responder_negotiated)
        views = f"both {mine}" if mine == theirs else f"{mine} | {theirs}"
        lines += wrap_note(f"  {case.check} [{case.peer}]: ", views, WIDTH, indent=6)
    return "\n".join(lines) + "\n"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    m = session.config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    out = results_dir()
    m.write_json(out / "matrix.json")
    m.write_junit(out / "matrix-junit.xml", strict=strict())
    (out / "matrix.txt").write_text(render(m))
    m.write_html(out / "matrix.html", strict=strict())


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    m = config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    terminalreporter.write_sep("=", "kernel interop matrix")
    colour = use_colour(markup=config.get_terminal_writer().hasmarkup)
    terminalreporter.write(render(m, colour=colour))
    out = results_dir()
    terminalreporter.write_line(f"written to {out}/matrix.json, matrix.txt, matrix-junit.xml "
                                "and matrix.html")


# ---- shared by the tests that meet the kernel ------------------------------------------


def peer_crashes(guest: Guest, mark: int, grace_s: float = 0.5) -> list[KernelCrash]:
    """Guest.crashes() since `mark`; reboots the guest when there was a crash, for the
    next case."""
    crashes = guest.crashes(mark, grace_s)
    if crashes:
        guest.restart()
    return crashes
