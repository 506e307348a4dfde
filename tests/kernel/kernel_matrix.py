"""The kernel tier's matrix: its columns (the kernel peers), its groups of rows, how a
test records a cell (with a crash's trace as evidence), and how the matrix prints.

The checks are rows (grouped: rping, rdma-probe, faults, verbs-check, xrc) and the kernel
peers columns (PEERS). A kernel deviation is a FINDING with its evidence (frames in hex,
Terminates decoded in the HTML); a kernel crash is a FINDING "crashed" with its trace,
wherever it happens; the tests themselves fail only when our side or the harness misbehaves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix
from rdma_interop.text_grid import WIDTH, wrap_note

from tests.support.guest import Guest, KernelCrash

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


def peer_crashes(guest: Guest, mark: int, grace_s: float = 0.5) -> list[KernelCrash]:
    """Guest.crashes() since `mark`; reboots the guest when there was a crash, for the
    next case."""
    crashes = guest.crashes(mark, grace_s)
    if crashes:
        guest.restart()
    return crashes
