"""The interop matrix: one result per cell, as a terminal table, JSON, JUnit XML and HTML.

Like the logs an interop event publishes. Two layouts:

- "pairs" (the personality matrix): responders as columns, initiators as rows, one table
  per provider;
- "checks" (the kernel matrix): checks as rows, grouped, the peers they meet as columns.

    matrix = InteropMatrix(title="MPA connection setup (RFC 5044, RFC 6581)")
    matrix.add(CaseResult(initiator="siw", responder="cxgb4", outcome=Outcome.PASS,
                          negotiated={"revision": 2, "rtr": "read", ...}))
    print(matrix.render_table(colour=use_colour(sys.stdout)))
    matrix.write_json("interop-results/matrix.json")
    matrix.write_junit("interop-results/matrix-junit.xml")
    matrix.write_html("interop-results/matrix.html")

Every cell has one of the project's verdicts (rdma_interop.verdict): `PASS read`
(connected, data verified, the RTR type; `-` when there was no RTR), `XFAIL
no_matching_rtr` (failed exactly as the standard requires for this pair), `FINDING crashed`
or `FINDING deviation` (the peer deviates from the standard or crashed: evidence attached),
`FAIL rtr_timeout` (we or the harness did something wrong or unexplained: the failure seen,
or `mismatch` when the connection worked but differed from what the RFCs require) or
`SKIP`. A case whose evidence holds a crash is a FINDING whatever it would otherwise read
(add() makes it so, and says what it would have read). A `[n]` after a cell points at note
n below the table; cells with the same notes share it. A table wider than 100 columns
shows only the verdict (and a PASS's RTR) and the note number, the note names the failure,
and its columns fold. Notes are short; the evidence (frames, traces, logs) is in the JSON
and the HTML.

JSON schema "rdma-interop/matrix/2" (write_json; every key always present; from_json also
reads /1, which had no findings, evidence, layout or checks):

    {
      "schema": "rdma-interop/matrix/2",
      "title": str,
      "generated_at": "2024-05-01T12:00:00Z",          # UTC, ISO 8601
      "environment": {str: str},                         # free-form: lab, hosts, versions
      "layout": "pairs" | "checks",
      "initiators": [str], "responders": [str], "providers": [str],   # display order
      "checks": [str], "peers": [str], "groups": [str],  # the checks layout's order
      "legend": [str],                                   # the matrix's own legend lines
      "summary": {"total": int, "pass": int, "expected-fail": int, "finding": int,
                  "fail": int, "skip": int},
      "cases": [{
        "id": "siw->cxgb4@tcp",                          # "...#check|peer" in the checks layout
        "initiator": str, "responder": str, "provider": str,
        "group": str | null, "check": str | null, "peer": str | null,
        "outcome": "pass" | "expected-fail" | "finding" | "fail" | "skip",
        "cell": "PASS read",                             # the table's text, without note marks
        "negotiated": {...} | null,                      # initiator's view (rdma-probe JSON)
        "responder_negotiated": {...} | null,            # responder's view
        "rtr": "send" | "write" | "read" | null,
        "failure": str | null,                           # the failure the cell names
        "expected": str | null,                          # what the oracle required, one line
        "errors": {"initiator": Error | null, "responder": Error | null},
        "mismatches": [str],                             # oracle checks that failed
        "notes": [str],
        "evidence": [{"kind": "crash" | "frame" | "terminate" | "log" | "text",
                      "label": str, "text": str}],       # frames and Terminates in hex
        "elapsed_ms": float | null
      }]
    }
    Error = {"failure": str | null, "kind": str | null, "detail": str | null,
             "terminate": {"layer": int, "etype": int, "code": int} | null}

JUnit XML: one <testsuite> per provider, one <testcase> per cell, named
"<initiator> -> <responder>" (": <check>" added in the checks layout) with classname
"interop.<provider>.<initiator>". FAIL is a <failure>; SKIP is <skipped>; PASS, XFAIL and
FINDING pass with an "outcome" property and the cell's text and evidence in <system-out>
(a FINDING also has a "finding" property naming it), unless strict: then a FINDING is a
<failure type="finding">.
"""

from __future__ import annotations

import copy
import json
import os
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rdma_interop.html_page import Block, HtmlCell, HtmlGrid, HtmlPage, render_page
from rdma_interop.safe_text import printable, xml_safe
from rdma_interop.text_grid import WIDTH, GridCell, render_grid, wrap_note
from rdma_interop.verdict import LEGEND as VERDICT_LEGEND
from rdma_interop.verdict import Outcome, fails_run
from rdma_interop.wire_text import cause_text

__all__ = [
    "LEGEND",
    "SCHEMA",
    "CaseResult",
    "Evidence",
    "InteropMatrix",
    "Outcome",
    "SideError",
    "printable",
]

SCHEMA = "rdma-interop/matrix/2"
_SCHEMAS_READ = ("rdma-interop/matrix/1", SCHEMA)

#: How the cells read, after the verdicts' own legend.
CELL_LEGEND = (
    "A cell: PASS <rtr> (the peer-to-peer RTR type; - when none), XFAIL/FINDING/FAIL <why>\n"
    "(the failure seen; 'mismatch': wrong parameters; 'crashed': the peer crashed), [n] the\n"
    "notes below. A table wider than 100 columns shows a cell's verdict and note number only\n"
    "(the note names the failure) and folds its columns."
)
LEGEND = VERDICT_LEGEND + "\n" + CELL_LEGEND
#: How the cells read in the HTML page.
HTML_CELL_LEGEND = (
    "A cell: PASS <rtr> (the peer-to-peer RTR type; - when none), XFAIL/FINDING/FAIL <why>\n"
    "(the failure seen; 'mismatch': wrong parameters; 'crashed': the peer crashed). Click a\n"
    "cell for its evidence; the filters above hide the verdicts and peers unticked."
)


@dataclass(frozen=True)
class Evidence:
    """What backs a cell: kind "crash" (label: the crash's first line; text: the whole
    trace), "frame" (label: what it is; text: its octets in hex), "terminate" (a Terminate
    FPDU or ULPDU in hex, decoded in the HTML), "log" (a tool's output) or "text"."""

    kind: str
    label: str
    text: str

    KINDS = ("crash", "frame", "terminate", "log", "text")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"evidence kind {self.kind!r} is not one of {', '.join(self.KINDS)}")

    @classmethod
    def crash(cls, title: str, trace: str) -> Evidence:
        return cls("crash", title, trace)

    @classmethod
    def frame(cls, label: str, octets: bytes) -> Evidence:
        return cls("frame", label, octets.hex())

    @classmethod
    def terminate(cls, label: str, octets: bytes) -> Evidence:
        return cls("terminate", label, octets.hex())

    def octets(self) -> bytes:
        """A frame's or Terminate's octets (empty when the text is not hex)."""
        try:
            return bytes.fromhex(self.text)
        except ValueError:
            return b""

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "label": self.label, "text": self.text}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Evidence:
        return cls(str(doc["kind"]), str(doc.get("label", "")), str(doc.get("text", "")))


@dataclass(frozen=True)
class SideError:
    """One side's error as rdma-probe reports it (its "error" object)."""

    failure: str | None = None
    kind: str | None = None
    detail: str | None = None
    terminate: Mapping[str, int] | None = None

    @classmethod
    def from_json(cls, error: Mapping[str, Any] | None) -> SideError | None:
        if not error:
            return None
        terminate = error.get("terminate")
        return cls(
            failure=error.get("failure"), kind=error.get("kind"), detail=error.get("detail"),
            terminate=dict(terminate) if terminate else None,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "failure": self.failure, "kind": self.kind, "detail": self.detail,
            "terminate": dict(self.terminate) if self.terminate else None,
        }

    def terminate_text(self) -> str | None:
        """The Terminate's cause with the RFCs' names, e.g. 'MPA/MPA/no matching RTR model
        (2/0/0x07)'."""
        if not self.terminate:
            return None
        t = self.terminate
        return cause_text(int(t.get("layer", -1)), int(t.get("etype", -1)), int(t.get("code", -1)))

    def __str__(self) -> str:
        text = self.failure or self.kind or "error"
        if self.terminate:
            t = self.terminate
            text += f" (terminate layer {t.get('layer')} type {t.get('etype')} code {t.get('code')})"
        return text


@dataclass
class CaseResult:
    """One cell: what happened when `initiator` connected to `responder` over `provider`.
    In the checks layout `check` names the row, `peer` the column and `group` the row's
    group."""

    initiator: str
    responder: str
    outcome: Outcome
    provider: str = "tcp"
    negotiated: Mapping[str, Any] | None = None
    responder_negotiated: Mapping[str, Any] | None = None
    initiator_error: SideError | None = None
    responder_error: SideError | None = None
    expected: str | None = None
    expected_failure: str | None = None  # the failure the cell names for XFAIL
    # The word a FAIL or FINDING cell shows (the unexpected failure seen, "mismatch",
    # "deviation", "crashed"); by default the first side's failure name.
    reason: str | None = None
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_ms: float | None = None
    evidence: list[Evidence] = field(default_factory=list)
    group: str | None = None
    check: str | None = None
    peer: str | None = None

    @property
    def case_id(self) -> str:
        base = f"{self.initiator}->{self.responder}@{self.provider}"
        if self.check:
            base += f"#{self.check}"
        return f"{base}|{self.peer}" if self.peer else base

    @property
    def rtr(self) -> str | None:
        for view in (self.negotiated, self.responder_negotiated):
            if view and view.get("rtr"):
                return str(view["rtr"])
        return None

    @property
    def crashed(self) -> bool:
        return any(e.kind == "crash" for e in self.evidence)

    def cell(self) -> str:
        """The table text: "PASS read", "PASS -" ("PASS" for a check without an RTR),
        "XFAIL no_matching_rtr", "FINDING crashed", "FAIL rtr_timeout"."""
        if self.outcome is Outcome.PASS:
            if self.check and not self.rtr:
                return "PASS"  # a check (the kernel matrix's rows): no RTR to name
            return f"PASS {self.rtr or '-'}"
        if self.outcome is Outcome.SKIP:
            return "SKIP"
        if self.outcome is Outcome.XFAIL:
            return f"XFAIL {self._failure_name() or '-'}"
        if self.outcome is Outcome.FINDING:
            return f"FINDING {self._failure_name() or 'deviation'}"
        return f"FAIL {self._failure_name() or 'mismatch'}"

    def short_cell(self) -> str:
        """The cell in a table too wide for its full text: the verdict, and a PASS's RTR."""
        return self.cell() if self.outcome is Outcome.PASS else self.outcome.label

    def _failure_name(self) -> str | None:
        if self.outcome is Outcome.XFAIL and self.expected_failure:
            return self.expected_failure
        if self.outcome in (Outcome.FAIL, Outcome.FINDING) and self.reason:
            return self.reason
        for err in (self.initiator_error, self.responder_error):
            if err and (err.failure or err.kind):
                return err.failure or err.kind
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.case_id,
            "initiator": self.initiator,
            "responder": self.responder,
            "provider": self.provider,
            "group": self.group,
            "check": self.check,
            "peer": self.peer,
            "outcome": self.outcome.value,
            "cell": self.cell(),
            "negotiated": dict(self.negotiated) if self.negotiated is not None else None,
            "responder_negotiated": (
                dict(self.responder_negotiated) if self.responder_negotiated is not None else None
            ),
            "rtr": self.rtr,
            "failure": (self._failure_name() if self.outcome in
                        (Outcome.FAIL, Outcome.XFAIL, Outcome.FINDING) else None),
            "expected": self.expected,
            "errors": {
                "initiator": self.initiator_error.to_json() if self.initiator_error else None,
                "responder": self.responder_error.to_json() if self.responder_error else None,
            },
            "mismatches": list(self.mismatches),
            "notes": list(self.notes),
            "evidence": [e.to_json() for e in self.evidence],
            "elapsed_ms": self.elapsed_ms,
        }

    @classmethod
    def from_json(cls, case: Mapping[str, Any]) -> CaseResult:
        errors = case.get("errors") or {}
        outcome = Outcome(case["outcome"])
        return cls(
            initiator=case["initiator"], responder=case["responder"],
            outcome=outcome, provider=case.get("provider", "tcp"),
            negotiated=case.get("negotiated"), responder_negotiated=case.get("responder_negotiated"),
            initiator_error=SideError.from_json(errors.get("initiator")),
            responder_error=SideError.from_json(errors.get("responder")),
            expected=case.get("expected"),
            expected_failure=case.get("failure") if outcome is Outcome.XFAIL else None,
            reason=case.get("failure") if outcome in (Outcome.FAIL, Outcome.FINDING) else None,
            mismatches=list(case.get("mismatches", [])), notes=list(case.get("notes", [])),
            elapsed_ms=case.get("elapsed_ms"),
            evidence=[Evidence.from_json(e) for e in case.get("evidence") or []],
            group=case.get("group"), check=case.get("check"), peer=case.get("peer"),
        )


def apply_crash_rule(case: CaseResult) -> None:
    """A case whose evidence holds a crash is a FINDING "crashed", whatever it would
    otherwise read; a note says what that was."""
    if not case.crashed or (case.outcome is Outcome.FINDING and case.reason == "crashed"):
        return
    was = case.cell()
    case.outcome = Outcome.FINDING
    case.reason = "crashed"
    note = f"the peer crashed; without the crash the cell reads {was}"
    if note not in case.notes:
        case.notes.append(note)


class _Notes:
    """Numbers for the notes below the tables: one per distinct (head, notes), in order of
    first use, so cells with the same notes share a number."""

    def __init__(self) -> None:
        self.keys: list[tuple[str | None, tuple[str, ...]]] = []

    def mark(self, case: CaseResult, compact: bool) -> str:
        lines = tuple(case.notes + [f"mismatch: {m}" for m in case.mismatches])
        head = case.cell() if compact and case.short_cell() != case.cell() else None
        if head is None and not lines:
            return ""
        key = (head, lines)
        if key not in self.keys:
            self.keys.append(key)
        return f" [{self.keys.index(key) + 1}]"

    def render(self, width: int) -> list[str]:
        out = []
        digits = len(str(len(self.keys)))
        for i, (head, lines) in enumerate(self.keys, 1):
            mark = f"[{str(i).rjust(digits)}] "
            indent = " " * len(mark)
            if head and len(lines) <= 1:
                paragraphs = [f"{head}: {lines[0]}" if lines else head]
            elif head:
                paragraphs = [head, *(f"- {n}" for n in lines)]
            elif len(lines) == 1:
                paragraphs = [lines[0]]
            else:
                paragraphs = [f"- {n}" for n in lines]
            for j, text in enumerate(paragraphs):
                lead = mark if j == 0 else indent
                if text.startswith("- "):
                    out += wrap_note(lead + "- ", printable(text[2:]), width)
                else:
                    out += wrap_note(lead, printable(text), width)
        return out


class InteropMatrix:
    """Case results, rendered as a table, JSON (rdma-interop/matrix/2), JUnit XML and HTML."""

    def __init__(
        self, title: str = "interop matrix", *, initiators: Sequence[str] = (),
        responders: Sequence[str] = (), environment: Mapping[str, str] | None = None,
        layout: str = "pairs", peers: Sequence[str] = (), groups: Sequence[str] = (),
        legend: Sequence[str] = (),
    ) -> None:
        """`initiators` and `responders` (pairs layout), `peers` and `groups` (checks
        layout) give the display order; names without cases are left out of the table.
        `legend`: lines of this matrix's own, printed after the verdicts' legend."""
        if layout not in ("pairs", "checks"):
            raise ValueError(f"layout {layout!r}: want 'pairs' or 'checks'")
        self.title = title
        self.layout = layout
        self._initiator_order = list(initiators)
        self._responder_order = list(responders)
        self._peer_order = list(peers)
        self._group_order = list(groups)
        self.legend = list(legend)
        self.environment: dict[str, str] = dict(environment or {})
        self.cases: list[CaseResult] = []

    # -- collecting ------------------------------------------------------------------------
    def add(self, case: CaseResult) -> None:
        """Adds a case; a later result for the same cell replaces the earlier one. A case
        with a crash in its evidence becomes a FINDING (apply_crash_rule)."""
        apply_crash_rule(case)
        self.cases = [c for c in self.cases if c.case_id != case.case_id]
        self.cases.append(case)

    def __len__(self) -> int:
        return len(self.cases)

    @staticmethod
    def _ordered(preferred: Sequence[str], seen: Iterable[str]) -> list[str]:
        """Names that have cases: those in `preferred` in its order, then the rest as met."""
        present = list(dict.fromkeys(seen))
        return [n for n in preferred if n in present] + [n for n in present if n not in preferred]

    @property
    def initiators(self) -> list[str]:
        return self._ordered(self._initiator_order, (c.initiator for c in self.cases))

    @property
    def responders(self) -> list[str]:
        return self._ordered(self._responder_order, (c.responder for c in self.cases))

    @property
    def providers(self) -> list[str]:
        return self._ordered((), (c.provider for c in self.cases))

    @staticmethod
    def _row(case: CaseResult) -> str:
        return case.check or f"{case.initiator} -> {case.responder} ({case.provider})"

    @staticmethod
    def _col(case: CaseResult) -> str:
        return case.peer or case.responder

    @property
    def groups(self) -> list[str]:
        return self._ordered(self._group_order, (c.group or "" for c in self.cases))

    @property
    def checks(self) -> list[str]:
        """The checks layout's rows: by group (in `groups` order), then as first met."""
        order = {g: i for i, g in enumerate(self.groups)}
        rows = list(dict.fromkeys(self._row(c) for c in self.cases))
        group_of = {self._row(c): c.group or "" for c in self.cases}
        return sorted(rows, key=lambda r: order[group_of[r]])

    @property
    def peers(self) -> list[str]:
        return self._ordered(self._peer_order, (self._col(c) for c in self.cases))

    def summary(self) -> dict[str, int]:
        counts = {o.value: 0 for o in Outcome}
        for case in self.cases:
            counts[case.outcome.value] += 1
        return {"total": len(self.cases), **counts}

    def ok(self, *, strict: bool = False) -> bool:
        """True when no cell fails the run: no FAIL (and, strict, no FINDING). PASS, XFAIL
        and SKIP never do."""
        return not any(fails_run(c.outcome, strict=strict) for c in self.cases)

    def verdict_line(self, *, strict: bool = False) -> str:
        s = self.summary()
        if s["fail"]:
            return f"verdict: FAILED ({s['fail']} FAIL cell(s))"
        if s["finding"]:
            if strict:
                return f"verdict: FAILED ({s['finding']} FINDING cell(s), --strict)"
            return (f"verdict: ok, with {s['finding']} FINDING(s) about the peers (they fail "
                    "the run only with --strict)")
        return "verdict: ok"

    def get(self, initiator: str, responder: str, provider: str = "tcp") -> CaseResult | None:
        for case in self.cases:
            if (case.initiator, case.responder, case.provider) == (initiator, responder, provider):
                return case
        return None

    def get_check(self, check: str, peer: str) -> CaseResult | None:
        """The checks layout's cell at row `check`, column `peer`."""
        found = None
        for case in self.cases:
            if (self._row(case), self._col(case)) == (check, peer):
                found = case
        return found

    # -- the tables, in either layout ------------------------------------------------------
    def _tables(self) -> list[tuple[str, str, list[str], list[str],
                                    dict[tuple[str, str], CaseResult], dict[str, str] | None]]:
        """(heading, corner, rows, columns, cells, groups) of each table."""
        if self.layout == "checks":
            at = {(self._row(c), self._col(c)): c for c in self.cases}
            groups = {self._row(c): c.group or "" for c in self.cases}
            return [("", "check \\ peer", self.checks, self.peers, at, groups)]
        tables: list[tuple[str, str, list[str], list[str], dict[tuple[str, str], CaseResult],
                           dict[str, str] | None]] = []
        for provider in self.providers or ["tcp"]:
            # Only the initiators and responders this provider has cases for.
            mine = [c for c in self.cases if c.provider == provider]
            rows = [r for r in self.initiators if any(c.initiator == r for c in mine)]
            cols = [r for r in self.responders if any(c.responder == r for c in mine)]
            at = {(c.initiator, c.responder): c for c in mine}
            tables.append((f"provider: {provider}", "initiator \\ responder", rows, cols, at,
                           None))
        return tables

    # -- terminal --------------------------------------------------------------------------
    def render_table(self, *, legend: bool = True, colour: bool = False,
                     width: int = WIDTH) -> str:
        """Every table (responders across and initiators down per provider; or checks down,
        peers across), the summary, the legend and the notes; no line wider than `width`.
        `colour`: the verdicts in colour, for a terminal (never for a file)."""
        lines = [printable(self.title), "=" * len(printable(self.title))]
        notes = _Notes()
        fold_what = "peers" if self.layout == "checks" else "responders"
        for heading, corner, rows, cols, at, groups in self._tables():
            # Full cells when the table fits; else the verdicts and note numbers, folded.
            # In reading order (row by row), so the notes are numbered top to bottom.
            order = [(r, col) for r in rows for col in cols if (r, col) in at]
            trial = copy.deepcopy(notes)
            full = {k: printable(at[k].cell()) + trial.mark(at[k], False) for k in order}
            first = min(max([len(corner), *map(len, rows)]), 40)
            need = first + sum(3 + max([len(col), *(len(full[(r, col)]) for r in rows
                                                    if (r, col) in full)]) for col in cols)
            compact = need > width
            cells = {k: GridCell((printable(at[k].short_cell()) if compact
                                  else printable(at[k].cell())) + notes.mark(at[k], compact),
                                 at[k].outcome) for k in order}
            lines.append("")
            if heading:
                lines.append(heading)
            lines += render_grid(corner, [printable(r) for r in rows],
                                 [printable(c) for c in cols],
                                 {(printable(r), printable(c)): v for (r, c), v in cells.items()},
                                 width=width, colour=colour, fold_what=fold_what,
                                 groups=None if groups is None else {
                                     printable(r): printable(g) for r, g in groups.items()})
        s = self.summary()
        lines.append("")
        lines.append(
            f"{s['total']} cases: {s['pass']} pass, {s['expected-fail']} expected-fail, "
            f"{s['finding']} finding, {s['fail']} fail, {s['skip']} skip"
        )
        lines.append(self.verdict_line())
        if legend:
            lines.append("")
            lines += LEGEND.splitlines()
            for extra in self.legend:
                lines += wrap_note("", printable(extra), width)
        if notes.keys:
            lines.append("")
            lines.append("Notes (the evidence for each cell is in the JSON and the HTML):")
            lines += notes.render(width)
        return "\n".join(lines) + "\n"

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        checks_layout = self.layout == "checks"
        return {
            "schema": SCHEMA,
            "title": self.title,
            "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "environment": dict(self.environment),
            "layout": self.layout,
            "initiators": self.initiators,
            "responders": self.responders,
            "providers": self.providers,
            "checks": self.checks if checks_layout else [],
            "peers": self.peers if checks_layout else [],
            "groups": [g for g in self.groups if g] if checks_layout else [],
            "legend": list(self.legend),
            "summary": self.summary(),
            "cases": [c.to_json() for c in self.cases],
        }

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> InteropMatrix:
        if doc.get("schema") not in _SCHEMAS_READ:
            raise ValueError(f"not an interop matrix: schema {doc.get('schema')!r}, want "
                             f"{' or '.join(map(repr, _SCHEMAS_READ))}")
        matrix = cls(doc.get("title", "interop matrix"), initiators=doc.get("initiators", ()),
                     responders=doc.get("responders", ()), environment=doc.get("environment"),
                     layout=doc.get("layout", "pairs"), peers=doc.get("peers", ()),
                     groups=doc.get("groups", ()), legend=doc.get("legend", ()))
        for case in doc.get("cases", []):
            matrix.add(CaseResult.from_json(case))
        return matrix

    # -- JUnit XML -------------------------------------------------------------------------
    def to_junit(self, *, strict: bool = False) -> ET.ElementTree:
        """FAIL is a failure; FINDING too when `strict`, else it passes with its evidence."""
        root = ET.Element("testsuites", name=printable(self.title))
        totals = {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0}
        for provider in self.providers:
            cases = [c for c in self.cases if c.provider == provider]
            suite = ET.SubElement(root, "testsuite", name=printable(f"interop.{provider}"))
            failures = skipped = 0
            seconds = 0.0
            for case in cases:
                elapsed = (case.elapsed_ms or 0.0) / 1000.0
                seconds += elapsed
                name = f"{case.initiator} -> {case.responder}"
                if case.check:
                    name += f": {case.check}"
                tc = ET.SubElement(
                    suite, "testcase", classname=printable(f"interop.{provider}.{case.initiator}"),
                    name=printable(name), time=f"{elapsed:.3f}",
                )
                props = ET.SubElement(tc, "properties")
                ET.SubElement(props, "property", name="outcome", value=case.outcome.value)
                ET.SubElement(props, "property", name="cell", value=printable(case.cell()))
                if case.rtr:
                    ET.SubElement(props, "property", name="rtr", value=printable(case.rtr))
                if case.peer:
                    ET.SubElement(props, "property", name="peer", value=printable(case.peer))
                if case.outcome is Outcome.FINDING:
                    ET.SubElement(props, "property", name="finding",
                                  value=printable(case.cell().split(" ", 1)[-1]))
                body = self._case_text(case)
                if fails_run(case.outcome, strict=strict):
                    failures += 1
                    failure = ET.SubElement(
                        tc, "failure", message=printable(case.cell()),
                        type="finding" if case.outcome is Outcome.FINDING
                        else printable(case.cell().split(" ", 1)[-1]))
                    failure.text = body
                elif case.outcome is Outcome.SKIP:
                    skipped += 1
                    ET.SubElement(tc, "skipped",
                                  message=printable("; ".join(case.notes) or "skipped"))
                else:
                    out = ET.SubElement(tc, "system-out")
                    out.text = body
            suite.set("tests", str(len(cases)))
            suite.set("failures", str(failures))
            suite.set("errors", "0")
            suite.set("skipped", str(skipped))
            suite.set("time", f"{seconds:.3f}")
            totals["tests"] += len(cases)
            totals["failures"] += failures
            totals["skipped"] += skipped
            totals["time"] += seconds
        root.set("tests", str(totals["tests"]))
        root.set("failures", str(totals["failures"]))
        root.set("errors", "0")
        root.set("skipped", str(totals["skipped"]))
        root.set("time", f"{totals['time']:.3f}")
        ET.indent(root)
        xml_safe(root)
        return ET.ElementTree(root)

    @staticmethod
    def _case_text(case: CaseResult) -> str:
        parts = [f"{case.case_id}: {case.cell()}"]
        if case.expected:
            parts.append(f"expected: {case.expected}")
        if case.negotiated:
            parts.append("negotiated (initiator): " + json.dumps(dict(case.negotiated), sort_keys=True))
        if case.responder_negotiated:
            parts.append("negotiated (responder): "
                         + json.dumps(dict(case.responder_negotiated), sort_keys=True))
        for side, err in (("initiator", case.initiator_error), ("responder", case.responder_error)):
            if err:
                parts.append(f"{side} error: {err}" + (f": {err.detail}" if err.detail else ""))
        parts += [f"mismatch: {m}" for m in case.mismatches]
        parts += [f"note: {n}" for n in case.notes]
        # One line per part, whatever a peer put in a detail or note; a trace or a log keeps
        # its lines, each made printable.
        out = [printable(p) for p in parts]
        for e in case.evidence:
            out.append(printable(f"evidence ({e.kind}) {e.label}:"))
            out += ["  " + printable(line) for line in e.text.splitlines()]
        return "\n".join(out)

    def write_junit(self, path: str | os.PathLike[str], *, strict: bool = False) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        self.to_junit(strict=strict).write(out, encoding="utf-8", xml_declaration=True)
        return out

    # -- HTML ------------------------------------------------------------------------------
    def html_grids(self, heading_prefix: str = "") -> list[HtmlGrid]:
        """The tables as HTML grids, each cell with its evidence (for this page and the
        lab report's)."""
        grids = []
        for heading, corner, rows, cols, at, groups in self._tables():
            cells = {k: HtmlCell(c.outcome, c.cell(), _heading(c), _peers(c, self.layout),
                                 case_blocks(c)) for k, c in at.items()}
            heading = heading or f"{len(rows)} checks against {len(cols)} peers"
            title = " ".join(p for p in (heading_prefix, heading) if p)
            grids.append(HtmlGrid(title, corner, rows, cols, cells, groups))
        return grids

    def to_html(self, *, strict: bool = False) -> str:
        page = HtmlPage(
            title=self.title,
            generated_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            summary={o: self.summary()[o.value] for o in Outcome},
            sections=list(self.html_grids()), environment=self.environment,
            verdict=self.verdict_line(strict=strict), legend=[HTML_CELL_LEGEND, *self.legend])
        return render_page(page)

    def write_html(self, path: str | os.PathLike[str], *, strict: bool = False) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.to_html(strict=strict))
        return out


def _heading(case: CaseResult) -> str:
    if case.check:
        return f"{case.check} [{case.peer or case.responder}]: {case.initiator} -> {case.responder}"
    return f"{case.initiator} -> {case.responder} ({case.provider})"


def _peers(case: CaseResult, layout: str) -> tuple[str, ...]:
    if layout == "checks":
        return (case.peer or case.responder,)
    return (case.initiator, case.responder)


def case_blocks(case: CaseResult) -> list[Block]:
    """A cell's evidence for the HTML page: verdict and requirement, notes, mismatches, what
    each side negotiated, each side's error (Terminates decoded), then the evidence."""
    rows = [("verdict", case.cell())]
    if case.expected:
        rows.append(("required", case.expected))
    if case.elapsed_ms is not None:
        rows.append(("elapsed", f"{case.elapsed_ms:.0f} ms"))
    blocks = [Block("fields", "", rows=tuple(rows))]
    if case.notes:
        blocks.append(Block("text", "notes", lines=tuple(case.notes)))
    if case.mismatches:
        blocks.append(Block("text", "what differs from the requirement",
                            lines=tuple(case.mismatches)))
    views = (case.negotiated or {}, case.responder_negotiated or {})
    if any(views):
        keys = list(dict.fromkeys([*views[0], *views[1]]))
        blocks.append(Block(
            "compare", "negotiated",
            columns=(f"{case.initiator} (initiator)", f"{case.responder} (responder)"),
            rows=tuple((k, *(_value(v.get(k)) if k in v else "" for v in views)) for k in keys)))
    for side, err in (("initiator", case.initiator_error), ("responder", case.responder_error)):
        if err:
            err_rows = [(k, str(v)) for k, v in (("failure", err.failure), ("kind", err.kind),
                                                 ("detail", err.detail)) if v]
            if err.terminate:
                err_rows.append(("Terminate", err.terminate_text() or ""))
            blocks.append(Block("fields", f"{side}'s error", rows=tuple(err_rows)))
    for e in case.evidence:
        if e.kind in ("frame", "terminate"):
            blocks.append(Block(e.kind, e.label, data=e.octets()))
        elif e.kind == "crash":
            blocks.append(Block("crash", f"crash: {e.label}", text=e.text))
        elif e.kind == "log":
            blocks.append(Block("pre", e.label, text=e.text))
        else:
            blocks.append(Block("text", e.label, lines=tuple(e.text.splitlines()) or ("",)))
    return blocks


def _value(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return "-" if v is None else str(v)
