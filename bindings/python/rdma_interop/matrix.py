"""The interop matrix: one result per (initiator personality, responder personality, provider).

Like the logs an interop event publishes: a terminal table with responders as columns and
initiators as rows, plus JSON and JUnit XML files for CI.

    matrix = InteropMatrix(title="MPA connection setup (RFC 5044, RFC 6581)")
    matrix.add(CaseResult(initiator="siw", responder="cxgb4", outcome=Outcome.PASS,
                          negotiated={"revision": 2, "rtr": "read", ...}))
    print(matrix.render_table())
    matrix.write_json("interop-results/matrix.json")
    matrix.write_junit("interop-results/matrix-junit.xml")

A cell reads `PASS read` (connected, data verified, the RTR type; `-` when there was no RTR),
`XFAIL no_matching_rtr` (failed exactly as the standard requires for this pair), `FAIL
rtr_timeout` (anything else; the failure seen, or `mismatch` when the connection worked but
differed from what the RFCs require) or `SKIP`. A `[n]` after a cell points at a note below
the table; cells with the same note share its number.

JSON schema "rdma-interop/matrix/1" (write_json; every key always present):

    {
      "schema": "rdma-interop/matrix/1",
      "title": str,
      "generated_at": "2024-05-01T12:00:00Z",          # UTC, ISO 8601
      "environment": {str: str},                         # free-form: lab, hosts, versions
      "initiators": [str], "responders": [str], "providers": [str],   # display order
      "summary": {"total": int, "pass": int, "fail": int, "skip": int, "expected-fail": int},
      "cases": [{
        "id": "siw->cxgb4@tcp",
        "initiator": str, "responder": str, "provider": str,
        "outcome": "pass" | "fail" | "skip" | "expected-fail",
        "cell": "PASS read",                             # the table's text, without note marks
        "negotiated": {...} | null,                      # initiator's view (rdma-probe JSON)
        "responder_negotiated": {...} | null,            # responder's view
        "rtr": "send" | "write" | "read" | null,
        "failure": str | null,                           # the failure the cell names
        "expected": str | null,                          # what the oracle required, one line
        "errors": {"initiator": Error | null, "responder": Error | null},
        "mismatches": [str],                             # oracle checks that failed
        "notes": [str],
        "elapsed_ms": float | null
      }]
    }
    Error = {"failure": str | null, "kind": str | null, "detail": str | null,
             "terminate": {"layer": int, "etype": int, "code": int} | null}

JUnit XML: one <testsuite> per provider, one <testcase> per cell, named
"<initiator> -> <responder>" with classname "interop.<provider>.<initiator>"; FAIL is a
<failure>, SKIP is <skipped>, expected failures pass and carry the reason in <system-out>
and an "outcome" property.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA",
    "printable",
    "CaseResult",
    "InteropMatrix",
    "Outcome",
    "SideError",
]

SCHEMA = "rdma-interop/matrix/1"


class Outcome(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    XFAIL = "expected-fail"

    @property
    def label(self) -> str:
        return {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "expected-fail": "XFAIL"}[self.value]



# Text in a report may hold what a peer sent (a reject's private data, a Terminate detail, a
# process name). C0 controls (but tab), DEL, C1 controls, bidirectional controls and line
# separators, and lone surrogates (what surrogateescape makes of bytes that are not UTF-8)
# would forge or reorder lines on a terminal and make XML 1.0 that no JUnit reader accepts;
# they are written as escapes instead, and a backslash as two.
_UNPRINTABLE = re.compile("[\\\\\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e"
                          "\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def printable(text: str) -> str:
    """``text`` with every control character (but tab), bidirectional control, line separator,
    lone surrogate and XML non-character escaped as ``\\xNN`` / ``\\uNNNN`` and each backslash
    doubled: one line, safe on a terminal and in XML."""
    def escape(m: re.Match[str]) -> str:
        c = ord(m.group())
        if c == 0x5C:
            return "\\\\"  # a backslash: so an escape in the text cannot pass for ours
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    return _UNPRINTABLE.sub(escape, text)


# What XML 1.0 cannot carry at all (s2.2 Char): text that printable() has not already seen.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_safe(root: ET.Element) -> None:
    """Escapes what XML 1.0 cannot carry in every text and attribute under ``root``."""
    def escape(m: re.Match[str]) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for el in root.iter():
        if el.text:
            el.text = _NOT_XML.sub(escape, el.text)
        if el.tail:
            el.tail = _NOT_XML.sub(escape, el.tail)
        for k, v in el.attrib.items():
            el.attrib[k] = _NOT_XML.sub(escape, v)

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

    def __str__(self) -> str:
        text = self.failure or self.kind or "error"
        if self.terminate:
            t = self.terminate
            text += f" (terminate layer {t.get('layer')} type {t.get('etype')} code {t.get('code')})"
        return text


@dataclass
class CaseResult:
    """One cell: what happened when `initiator` connected to `responder` over `provider`."""

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
    # The word a FAIL cell shows (the unexpected failure seen, or "mismatch"); by default the
    # first side's failure name.
    reason: str | None = None
    mismatches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_ms: float | None = None

    @property
    def case_id(self) -> str:
        return f"{self.initiator}->{self.responder}@{self.provider}"

    @property
    def rtr(self) -> str | None:
        for view in (self.negotiated, self.responder_negotiated):
            if view and view.get("rtr"):
                return str(view["rtr"])
        return None

    def cell(self) -> str:
        """The table text: "PASS read", "PASS -", "XFAIL no_matching_rtr", "FAIL rtr_timeout"."""
        if self.outcome is Outcome.PASS:
            return f"PASS {self.rtr or '-'}"
        if self.outcome is Outcome.SKIP:
            return "SKIP"
        if self.outcome is Outcome.XFAIL:
            return f"XFAIL {self._failure_name() or '-'}"
        return f"FAIL {self._failure_name() or 'mismatch'}"

    def _failure_name(self) -> str | None:
        if self.outcome is Outcome.XFAIL and self.expected_failure:
            return self.expected_failure
        if self.outcome is Outcome.FAIL and self.reason:
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
            "outcome": self.outcome.value,
            "cell": self.cell(),
            "negotiated": dict(self.negotiated) if self.negotiated is not None else None,
            "responder_negotiated": (
                dict(self.responder_negotiated) if self.responder_negotiated is not None else None
            ),
            "rtr": self.rtr,
            "failure": self._failure_name() if self.outcome in (Outcome.FAIL, Outcome.XFAIL) else None,
            "expected": self.expected,
            "errors": {
                "initiator": self.initiator_error.to_json() if self.initiator_error else None,
                "responder": self.responder_error.to_json() if self.responder_error else None,
            },
            "mismatches": list(self.mismatches),
            "notes": list(self.notes),
            "elapsed_ms": self.elapsed_ms,
        }

    @classmethod
    def from_json(cls, case: Mapping[str, Any]) -> CaseResult:
        errors = case.get("errors") or {}
        return cls(
            initiator=case["initiator"], responder=case["responder"],
            outcome=Outcome(case["outcome"]), provider=case.get("provider", "tcp"),
            negotiated=case.get("negotiated"), responder_negotiated=case.get("responder_negotiated"),
            initiator_error=SideError.from_json(errors.get("initiator")),
            responder_error=SideError.from_json(errors.get("responder")),
            expected=case.get("expected"),
            expected_failure=case.get("failure") if case["outcome"] == Outcome.XFAIL.value else None,
            reason=case.get("failure") if case["outcome"] == Outcome.FAIL.value else None,
            mismatches=list(case.get("mismatches", [])), notes=list(case.get("notes", [])),
            elapsed_ms=case.get("elapsed_ms"),
        )


LEGEND = (
    "PASS <rtr>   connected, negotiated what the RFCs require, Send/Write/Read data verified;\n"
    "             <rtr> is the peer-to-peer RTR type (- = not peer-to-peer, no RTR)\n"
    "XFAIL <why>  failed, and both sides reported the failure the standard requires for this pair\n"
    "FAIL <why>   anything else (<why> = the failure seen, or 'mismatch' for wrong parameters)\n"
    "SKIP         not run (reason in the notes)"
)


class InteropMatrix:
    """Case results, rendered as a table, JSON (rdma-interop/matrix/1) and JUnit XML."""

    def __init__(
        self, title: str = "interop matrix", *, initiators: Sequence[str] = (),
        responders: Sequence[str] = (), environment: Mapping[str, str] | None = None,
    ) -> None:
        """`initiators` and `responders` give the display order; names without cases are
        left out of the table."""
        self.title = title
        self._initiator_order = list(initiators)
        self._responder_order = list(responders)
        self.environment: dict[str, str] = dict(environment or {})
        self.cases: list[CaseResult] = []

    # -- collecting ------------------------------------------------------------------------
    def add(self, case: CaseResult) -> None:
        """Adds a case; a later result for the same cell replaces the earlier one."""
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

    def summary(self) -> dict[str, int]:
        counts = {o.value: 0 for o in Outcome}
        for case in self.cases:
            counts[case.outcome.value] += 1
        return {"total": len(self.cases), **counts}

    def ok(self) -> bool:
        """True when every case passed or failed as expected (skips are not failures)."""
        return all(c.outcome is not Outcome.FAIL for c in self.cases)

    def get(self, initiator: str, responder: str, provider: str = "tcp") -> CaseResult | None:
        for case in self.cases:
            if (case.initiator, case.responder, case.provider) == (initiator, responder, provider):
                return case
        return None

    # -- terminal --------------------------------------------------------------------------
    def render_table(self, *, legend: bool = True) -> str:
        """Responders across, initiators down, one table per provider; legend and notes below."""
        lines = [self.title, "=" * len(self.title)]
        notes: list[str] = []

        def note_mark(case: CaseResult) -> str:
            marks = []
            # Numbered by text, so one reason shared by many cells is printed once.
            for label in case.notes + [f"mismatch: {m}" for m in case.mismatches]:
                if label not in notes:
                    notes.append(label)
                marks.append(str(notes.index(label) + 1))
            return f" [{','.join(marks)}]" if marks else ""

        corner = "initiator \\ responder"
        for provider in self.providers or ["tcp"]:
            # Only the initiators and responders this provider has cases for: a matrix that
            # mixes variants (the kernel tier's) would otherwise print mostly empty rows.
            mine = [c for c in self.cases if c.provider == provider]
            rows = [r for r in self.initiators if any(c.initiator == r for c in mine)]
            cols = [r for r in self.responders if any(c.responder == r for c in mine)]
            grid = []
            for ini in rows:
                row = []
                for res in cols:
                    case = self.get(ini, res, provider)
                    row.append("" if case is None else printable(case.cell()) + note_mark(case))
                grid.append(row)
            first = max([len(corner)] + [len(r) for r in rows])
            widths = [max([len(c)] + [len(grid[i][j]) for i in range(len(rows))])
                      for j, c in enumerate(cols)]
            lines.append("")
            lines.append(f"provider: {provider}")
            header = corner.ljust(first) + " | " + " | ".join(
                c.ljust(w) for c, w in zip(cols, widths))
            lines.append(header.rstrip())
            lines.append("-" * first + "-+-" + "-+-".join("-" * w for w in widths))
            for ini, row in zip(rows, grid):
                lines.append((ini.ljust(first) + " | " + " | ".join(
                    cell.ljust(w) for cell, w in zip(row, widths))).rstrip())
        s = self.summary()
        lines.append("")
        lines.append(
            f"{s['total']} cases: {s['pass']} pass, {s['expected-fail']} expected-fail, "
            f"{s['fail']} fail, {s['skip']} skip"
        )
        if legend:
            lines.append("")
            lines.append(LEGEND)
        if notes:
            lines.append("")
            lines.append("Notes:")
            width = len(str(len(notes)))
            for i, text in enumerate(notes, 1):
                lines.append(f"[{str(i).rjust(width)}] {printable(text)}")
        return "\n".join(lines) + "\n"

    # -- JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "title": self.title,
            "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "environment": dict(self.environment),
            "initiators": self.initiators,
            "responders": self.responders,
            "providers": self.providers,
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
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"not an interop matrix: schema {doc.get('schema')!r}, want {SCHEMA!r}")
        matrix = cls(doc.get("title", "interop matrix"), initiators=doc.get("initiators", ()),
                     responders=doc.get("responders", ()), environment=doc.get("environment"))
        for case in doc.get("cases", []):
            matrix.add(CaseResult.from_json(case))
        return matrix

    # -- JUnit XML -------------------------------------------------------------------------
    def to_junit(self) -> ET.ElementTree:
        root = ET.Element("testsuites", name=self.title)
        totals = {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0}
        for provider in self.providers:
            cases = [c for c in self.cases if c.provider == provider]
            suite = ET.SubElement(root, "testsuite", name=f"interop.{provider}")
            failures = skipped = 0
            seconds = 0.0
            for case in cases:
                elapsed = (case.elapsed_ms or 0.0) / 1000.0
                seconds += elapsed
                tc = ET.SubElement(
                    suite, "testcase", classname=f"interop.{provider}.{case.initiator}",
                    name=f"{case.initiator} -> {case.responder}", time=f"{elapsed:.3f}",
                )
                props = ET.SubElement(tc, "properties")
                ET.SubElement(props, "property", name="outcome", value=case.outcome.value)
                ET.SubElement(props, "property", name="cell", value=case.cell())
                if case.rtr:
                    ET.SubElement(props, "property", name="rtr", value=case.rtr)
                body = self._case_text(case)
                if case.outcome is Outcome.FAIL:
                    failures += 1
                    failure = ET.SubElement(tc, "failure", type=case.cell().split(" ", 1)[-1],
                                            message=case.cell())
                    failure.text = body
                elif case.outcome is Outcome.SKIP:
                    skipped += 1
                    ET.SubElement(tc, "skipped", message="; ".join(case.notes) or "skipped")
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
        _xml_safe(root)
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
        if case.initiator_error:
            parts.append(f"initiator error: {case.initiator_error}"
                         + (f": {case.initiator_error.detail}" if case.initiator_error.detail else ""))
        if case.responder_error:
            parts.append(f"responder error: {case.responder_error}"
                         + (f": {case.responder_error.detail}" if case.responder_error.detail else ""))
        parts += [f"mismatch: {m}" for m in case.mismatches]
        parts += [f"note: {n}" for n in case.notes]
        # One line per part, whatever a peer put in a detail or note.
        return "\n".join(printable(p) for p in parts)

    def write_junit(self, path: str | os.PathLike[str]) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        self.to_junit().write(out, encoding="utf-8", xml_declaration=True)
        return out
