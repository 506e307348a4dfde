"""The device matrix: each test group's results between the lab's real RDMA devices.

One table per test group: rows are the initiator's node/device, columns the responder's,
each cell a verdict with its figure (Gbit/s, µs) or its reason:

    == ib_send_bw ==
    initiator \\ responder   node1/siw0     node2/siw0
    node1/siw0               -              PASS 1.52 Gbit/s
    node2/siw0               PASS 1.49 ...  -

Verdicts mean what they mean everywhere in this project (rdma_interop.verdict): PASS; XFAIL
(the standard requires the failure and both sides reported it); FINDING (the peer deviates
from the standard or crashed, with evidence: it fails the run only when strict); FAIL (we
or the harness did wrong, or the pair could not talk); SKIP (with the reason the device or
the lab gave, e.g. EOPNOTSUPP for XRC on siw). Tables wider than 100 columns fold.

Written as device-matrix.txt, device-matrix.json (schema rdma-interop/device-matrix/1),
device-junit.xml (a FINDING is a failure there only when strict) and device-matrix.html
(one grid: test groups down, device pairs across, each cell opening its detail); the lab
report (rdma_interop.lab_report) merges it beside the personality matrix. Pure Python: the
control machine needs only this package's source.

    {"schema": "rdma-interop/device-matrix/1", "generated_at": str,
     "nodes": [{"name": str, "status": "ok" | "no-device" | "unreachable", "detail": str,
                "devices": [rdma-probe devices --json entries]}],
     "schedule": [[[initiator, responder], ...], ...],          # the rounds, in order
     "timing": {"wall_s": float, "pairs": {"a--b": seconds}},
     "summary": {"total": int, "pass": int, "fail": int, "skip": int, "finding": int,
                 "expected-fail": int},
     "cells": [{"group": str, "initiator": "node/dev", "responder": "node/dev",
                "kind": "iwarp" | "roce-v2" | ..., "verdict": "pass" | ...,
                "figure": str | null, "detail": str, "seconds": float}]}
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rdma_interop.html_page import Block, HtmlCell, HtmlGrid, HtmlPage, HtmlTable, render_page
from rdma_interop.safe_text import printable
from rdma_interop.text_grid import WIDTH, GridCell, render_grid, wrap_note
from rdma_interop.verdict import LEGEND as VERDICT_LEGEND
from rdma_interop.verdict import Outcome, fails_run

__all__ = ["DEVICE_MATRIX_SCHEMA", "VERDICTS", "DeviceCell", "DeviceMatrix", "NodeInventory"]

DEVICE_MATRIX_SCHEMA = "rdma-interop/device-matrix/1"
VERDICTS = tuple(o.value for o in Outcome)
_LABEL = {o.value: o.label for o in Outcome}
LEGEND = VERDICT_LEGEND + "\n- same device, or a pair that cannot talk (kinds differ)"
#: A cell's text in the tables is cut to this; the "Why" list below has it whole.
CELL_TEXT = 32


@dataclass
class DeviceCell:
    group: str
    initiator: str  # node/device
    responder: str
    kind: str
    verdict: str
    detail: str = ""
    figure: str | None = None
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")

    @property
    def outcome(self) -> Outcome:
        return Outcome(self.verdict)

    def text(self, width: int = CELL_TEXT) -> str:
        words = _LABEL[self.verdict]
        more = self.figure if self.verdict == "pass" and self.figure else self.detail
        if more:
            words += " " + printable(more)
        return words if len(words) <= width else words[: width - 3] + "..."

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "initiator": self.initiator, "responder": self.responder,
                "kind": self.kind, "verdict": self.verdict, "figure": self.figure,
                "detail": self.detail, "seconds": round(self.seconds, 3)}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DeviceCell:
        return cls(group=str(doc["group"]), initiator=str(doc["initiator"]),
                   responder=str(doc["responder"]), kind=str(doc.get("kind", "")),
                   verdict=str(doc["verdict"]), detail=str(doc.get("detail", "")),
                   figure=doc.get("figure"), seconds=float(doc.get("seconds", 0.0)))


@dataclass
class NodeInventory:
    """What one node said about its devices (`rdma-probe devices --json`)."""

    name: str
    status: str  # "ok", "no-device", "unreachable"
    detail: str = ""
    devices: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "devices": self.devices}

    def summary(self) -> str:
        if self.status == "no-device":
            return "no RDMA device"
        if self.status != "ok":
            return f"{self.status}: {self.detail}"
        return ", ".join(f"{d.get('name')} ({d.get('kind')})" for d in self.devices)


class DeviceMatrix:
    def __init__(self) -> None:
        self.cells: list[DeviceCell] = []
        self.nodes: list[NodeInventory] = []
        self.schedule: list[list[tuple[str, str]]] = []
        self.wall_s = 0.0
        self.pair_seconds: dict[str, float] = {}

    def add(self, cell: DeviceCell) -> None:
        self.cells.append(cell)

    def groups(self) -> list[str]:
        return list(dict.fromkeys(c.group for c in self.cells))

    def summary(self) -> dict[str, int]:
        counts = {"total": len(self.cells)} | {v: 0 for v in VERDICTS}
        for c in self.cells:
            counts[c.verdict] += 1
        return counts

    def ok(self, *, strict: bool = False) -> bool:
        """Every cell PASS, XFAIL, FINDING or SKIP: FINDINGs are the peer's, SKIPs have a
        reason; only FAIL (ours or the pair's) makes the run fail, and FINDING when strict."""
        return bool(self.cells) and not any(fails_run(c.outcome, strict=strict)
                                            for c in self.cells)

    # -- text ----------------------------------------------------------------------------
    def render_text(self, *, colour: bool = False, width: int = WIDTH) -> str:
        """One table per test group (initiators down, responders across), folded when wider
        than `width`; then the summary, the legend and why each cell that is not a plain
        PASS reads as it does. `colour`: verdicts in colour, for a terminal only."""
        s = self.summary()
        lines = ["Devices per node:"]
        for node in self.nodes:
            lines += wrap_note(f"  {printable(node.name)}: ", printable(node.summary()), width)
        if self.schedule:
            lines += ["", f"Schedule: {len(self.schedule)} round(s)"]
            for i, rnd in enumerate(self.schedule, 1):
                lines += wrap_note(f"  round {i}: ", ", ".join(
                    printable(f"{a} -> {b}") for a, b in rnd), width)
        for group in self.groups():
            cells = [c for c in self.cells if c.group == group]
            rows = list(dict.fromkeys(printable(c.initiator) for c in cells))
            cols = list(dict.fromkeys(printable(c.responder) for c in cells))
            grid = {(printable(c.initiator), printable(c.responder)): GridCell(c.text(),
                                                                              c.outcome)
                    for c in cells}
            for r in rows:
                for col in cols:
                    grid.setdefault((r, col), GridCell("-"))
            lines += ["", f"== {printable(group)} ==",
                      *render_grid("initiator \\ responder", rows, cols, grid, width=width,
                                   colour=colour, fold_what="responders")]
        lines += ["", f"{s['total']} cells: {s['pass']} pass, {s['expected-fail']} expected-fail, "
                  f"{s['finding']} finding, {s['fail']} fail, {s['skip']} skip; "
                  f"wall time {self.wall_s:.1f} s", *LEGEND.splitlines()]
        notes = [c for c in self.cells if c.verdict in ("fail", "finding", "skip")
                 or (c.verdict == "pass" and c.detail)]
        if notes:
            lines += ["", "Why (FAIL, FINDING and SKIP cells; notes on PASS cells):"]
            seen: set[tuple[str, str, str]] = set()
            for c in notes:
                key = (c.group, c.verdict, c.detail)
                if key in seen:
                    continue
                seen.add(key)
                lines += wrap_note(f"  {printable(f'{c.group} {c.initiator} -> {c.responder}')}: ",
                                   f"{_LABEL[c.verdict]} {printable(c.detail)}", width, indent=4)
        return "\n".join(lines) + "\n"

    # -- JSON and JUnit --------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"schema": DEVICE_MATRIX_SCHEMA,
                "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "nodes": [n.to_json() for n in self.nodes],
                "schedule": [[list(p) for p in rnd] for rnd in self.schedule],
                "timing": {"wall_s": round(self.wall_s, 1),
                           "pairs": {k: round(v, 1) for k, v in self.pair_seconds.items()}},
                "summary": self.summary(),
                "cells": [c.to_json() for c in self.cells]}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> DeviceMatrix:
        if doc.get("schema") != DEVICE_MATRIX_SCHEMA:
            raise ValueError(f"not a device matrix (schema {doc.get('schema')!r})")
        m = cls()
        m.nodes = [NodeInventory(name=n["name"], status=n["status"], detail=n.get("detail", ""),
                                 devices=list(n.get("devices", []))) for n in doc["nodes"]]
        m.schedule = [[(a, b) for a, b in rnd] for rnd in doc.get("schedule", [])]
        m.wall_s = float(doc.get("timing", {}).get("wall_s", 0.0))
        m.pair_seconds = dict(doc.get("timing", {}).get("pairs", {}))
        m.cells = [DeviceCell.from_json(c) for c in doc["cells"]]
        return m

    def to_junit(self, *, strict: bool = False) -> ET.ElementTree:
        """FAIL is a failure, and FINDING when `strict`; else a FINDING passes with a
        "finding" property and its detail in <system-out>."""
        root = ET.Element("testsuites", name="rdma-interop devices")
        for group in self.groups():
            cells = [c for c in self.cells if c.group == group]
            suite = ET.SubElement(root, "testsuite", name=printable(f"devices.{group}"),
                                  tests=str(len(cells)),
                                  failures=str(sum(fails_run(c.outcome, strict=strict)
                                                   for c in cells)),
                                  errors="0", skipped=str(sum(c.verdict == "skip" for c in cells)),
                                  time=f"{sum(c.seconds for c in cells):.3f}")
            for c in cells:
                case = ET.SubElement(suite, "testcase", classname=printable(f"devices.{group}"),
                                     name=printable(f"{c.initiator} -> {c.responder}"),
                                     time=f"{c.seconds:.3f}")
                text = printable(c.detail or c.figure or "")
                props = ET.SubElement(case, "properties")
                ET.SubElement(props, "property", name="outcome", value=c.verdict)
                if c.verdict == "finding":
                    ET.SubElement(props, "property", name="finding", value=text)
                if c.verdict == "skip":
                    ET.SubElement(case, "skipped", message=text)
                elif fails_run(c.outcome, strict=strict):
                    ET.SubElement(case, "failure", message=f"{_LABEL[c.verdict]}: {text}",
                                  type=c.verdict)
                elif text:
                    ET.SubElement(case, "system-out").text = text
        ET.indent(root)
        return ET.ElementTree(root)

    # -- HTML ------------------------------------------------------------------------------
    def html_grid(self) -> HtmlGrid:
        """One grid: test groups down, device pairs across, each cell opening its detail."""
        cols = list(dict.fromkeys(f"{c.initiator} -> {c.responder}" for c in self.cells))
        cells: dict[tuple[str, str], HtmlCell] = {}
        for c in self.cells:
            rows = [("verdict", f"{_LABEL[c.verdict]}"), ("kind", c.kind),
                    ("time", f"{c.seconds:.1f} s")]
            if c.figure:
                rows.append(("figure", c.figure))
            blocks = [Block("fields", "", rows=tuple(rows))]
            if c.detail:
                blocks.append(Block("pre", "detail", text=c.detail))
            cells[(c.group, f"{c.initiator} -> {c.responder}")] = HtmlCell(
                c.outcome, c.text(), f"{c.group}: {c.initiator} -> {c.responder}",
                (c.initiator, c.responder), blocks)
        return HtmlGrid("The nodes' RDMA devices against each other", "test \\ pair",
                        self.groups(), cols, cells)

    def html_tables(self) -> list[HtmlTable]:
        return [HtmlTable("Devices per node", ["node", "devices"],
                          [[n.name, n.summary()] for n in self.nodes])]

    def to_html(self, *, strict: bool = False) -> str:
        s = self.summary()
        verdict = ("verdict: FAILED" if not self.ok(strict=strict) else "verdict: ok") + (
            f" ({s['fail']} FAIL, {s['finding']} FINDING; FINDINGs fail the run only with "
            "--strict)")
        return render_page(HtmlPage(
            "Device matrix", datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            {o: s[o.value] for o in Outcome}, [*self.html_tables(), self.html_grid()],
            verdict=verdict, legend=["- same device, or a pair that cannot talk"]))

    def write(self, directory: str | Path, *, strict: bool = False) -> list[Path]:
        """Writes device-matrix.txt, device-matrix.json, device-junit.xml and
        device-matrix.html."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        paths = [d / "device-matrix.txt", d / "device-matrix.json", d / "device-junit.xml",
                 d / "device-matrix.html"]
        paths[0].write_text(self.render_text())
        paths[1].write_text(json.dumps(self.to_json(), indent=2) + "\n")
        self.to_junit(strict=strict).write(paths[2], encoding="utf-8", xml_declaration=True)
        paths[3].write_text(self.to_html(strict=strict))
        return paths
