"""Fixtures for the kernel tier: one qemu guest with kernel siw and rxe for the session.

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

from guest import Guest, default_log_dir  # noqa: E402

from rdma_interop.matrix import CaseResult, InteropMatrix  # noqa: E402

MATRIX_KEY = pytest.StashKey[InteropMatrix]()
#: Row and column names the kernel tests use, in display order.
INITIATORS = ["ours-tcp", "ours-verbs@siw", "ours-verbs@rxe", "kernel-siw"]
RESPONDERS = ["kernel-siw", "kernel-rxe", "ours-tcp", "ours-verbs@siw"]


def results_dir() -> Path:
    base = Path(os.environ.get("RDMA_INTEROP_RESULTS", Path(__file__).resolve().parents[2]
                               / "interop-results"))
    return base / "kernel"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kernel: needs the qemu guest with kernel siw/rxe")
    config.stash[MATRIX_KEY] = InteropMatrix(
        "Our stack against the Linux kernel's siw and rxe (qemu guest)",
        initiators=INITIATORS, responders=RESPONDERS)


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
    """The kernel tier's matrix: tests add() a CaseResult per pair they ran (with notes for
    findings: kernel deviations, crashes). Written to interop-results/kernel/ at the end."""
    m = request.config.stash[MATRIX_KEY]
    m.environment["guest kernel"] = guest.kernel_version
    return m


def add_case(matrix: InteropMatrix, case: CaseResult) -> None:
    """Adds a case, keeping notes of an earlier case for the same cell (several tests may
    each contribute a finding to one pair)."""
    for old in matrix.cases:
        if old.case_id == case.case_id:
            case.notes = list(dict.fromkeys([*old.notes, *case.notes]))
    matrix.add(case)


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


def render(m: InteropMatrix) -> str:
    """The matrix, then what each connection negotiated (fault cases all use one setup)."""
    lines = [m.render_table(), "", "Negotiated (initiator's view | responder's view):"]
    for case in m.cases:
        if case.initiator.startswith("fault:") or not (case.negotiated or
                                                        case.responder_negotiated):
            continue
        lines.append(f"  {case.case_id}: {_params(case.negotiated)} | "
                     f"{_params(case.responder_negotiated)}")
    return "\n".join(lines) + "\n"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    m = session.config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    out = results_dir()
    m.write_json(out / "matrix.json")
    m.write_junit(out / "matrix-junit.xml")
    (out / "matrix.txt").write_text(render(m))


def pytest_terminal_summary(terminalreporter: object, exitstatus: int,
                            config: pytest.Config) -> None:
    m = config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    terminalreporter.write_sep("=", "kernel interop matrix")  # type: ignore[attr-defined]
    terminalreporter.write(render(m))  # type: ignore[attr-defined]
    terminalreporter.write_line(f"written to {results_dir()}/matrix.json")  # type: ignore[attr-defined]


# ---- shared by test_siw_rping, test_siw_verbs, test_rxe_semantics ----------------------


def peer_crash_notes(guest: Guest, mark: int, grace_s: float = 0.5) -> list[str]:
    """Guest.crash_notes() since `mark`; reboots the guest when there was a crash, for the
    next case."""
    notes = guest.crash_notes(mark, grace_s)
    if notes:
        guest.restart()
    return notes
