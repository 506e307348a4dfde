"""A lab's interop report: every node pair's matrix and every responder service's probe, merged.

The Ansible playbooks (playbooks/, role "run") bring these home from the controller:

    DIR/run.json                            rdma-interop/lab-run/1: controller, pairs, services
    DIR/pairs/<initiator>--<responder>/matrix.json   each node pair's interop matrix
    DIR/probe/<node>--<personality>.json    `rdma-probe --json` of each responder service
    DIR/devices/device-matrix.json          the device tier's matrix (rdma_interop.device_matrix)

and `python3 -m rdma_interop.lab_report DIR` (role "report") writes

    DIR/lab-matrix.txt   node pairs at a glance, the responder services, each pair's matrix
    DIR/lab-matrix.json  schema rdma-interop/lab-matrix/1 (below)
    DIR/lab-junit.xml    every cell; one testsuite per node pair and provider
    DIR/lab-matrix.html  all of it in one self-contained page: each pair's matrix and the
                         device matrix as coloured grids, every cell opening its evidence

prints the text and exits 0 (every pair and service reported, no FAIL cell), 1 (FAIL cells;
with --strict also FINDING cells), 3 (a pair or service without results; this wins over 1)
or 2 (DIR has no readable run.json). FINDINGs (a peer that deviates from the standard or
crashed) are reported, and fail the run only with --strict. Pure Python (no _core): the
control machine needs only this package's source.

    {
      "schema": "rdma-interop/lab-matrix/1",
      "generated_at": "2026-11-23T12:00:00Z",
      "controller": str,
      "summary": {"pairs": int, "missing": int, "services": int, "services_missing": int,
                  "total": int, "pass": int, "expected-fail": int, "finding": int,
                  "fail": int, "skip": int},
      "pairs": [{"initiator": node, "responder": node,
                 "status": "ok" | "fail" | "missing",
                 "problem": str | null,                  # why a pair is missing
                 "summary": {...} | null,                # the matrix's summary
                 "matrix": {rdma-interop/matrix/2} | null}],
      "services": [{"node": str, "personality": str, "uri": str,
                    "outcome": "probed" | "unreachable" | "not_iwarp" | "rejected" | "missing",
                    "detail": str,
                    "responder_policy": {...} | null,   # the personality file's "mpa" keys
                    "behaves_like": [str] | null,       # rdma-probe's fingerprint (probe/2)
                    "stack": str | null}],              # its one-sentence summary
      "devices": {rdma-interop/device-matrix/1} | null  # when the device tier ran
    }
A FAIL cell of the device matrix counts as a FAIL cell (exit 1), a FINDING as a FINDING.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rdma_interop.device_matrix import DeviceMatrix
from rdma_interop.html_page import HtmlPage, HtmlTable, Section, render_page
from rdma_interop.matrix import HTML_CELL_LEGEND, LEGEND, InteropMatrix
from rdma_interop.safe_text import printable
from rdma_interop.text_grid import WIDTH, GridCell, render_grid
from rdma_interop.verdict import Outcome, use_colour

__all__ = ["LAB_MATRIX_SCHEMA", "RUN_SCHEMA", "LabReport", "LabReportError", "PairResult",
           "ServiceResult", "load_lab_report", "main"]

RUN_SCHEMA = "rdma-interop/lab-run/1"
LAB_MATRIX_SCHEMA = "rdma-interop/lab-matrix/1"
EXIT_OK, EXIT_FAILED_CELLS, EXIT_BAD_INPUT, EXIT_MISSING = 0, 1, 2, 3


class LabReportError(ValueError):
    """The report directory cannot be read (no or a malformed run.json)."""


@dataclass
class PairResult:
    initiator: str
    responder: str
    matrix: InteropMatrix | None
    problem: str | None = None  # why there is no matrix

    @property
    def name(self) -> str:
        return f"{self.initiator} -> {self.responder}"

    @property
    def status(self) -> str:
        if self.matrix is None:
            return "missing"
        return "ok" if self.matrix.ok() else "fail"

    def cell(self) -> str:
        """The overview's text: "OK 25/25", "OK 20/25 5 skip", "OK 23/25 2 finding",
        "FAIL 2/25", "MISSING"."""
        if self.matrix is None:
            return "MISSING"
        s = self.matrix.summary()
        if s["fail"]:
            return f"FAIL {s['fail']}/{s['total']}"
        text = f"OK {s['pass'] + s['expected-fail']}/{s['total']}"
        text += f" {s['finding']} finding" if s["finding"] else ""
        return text + (f" {s['skip']} skip" if s["skip"] else "")

    def to_json(self) -> dict[str, Any]:
        return {"initiator": self.initiator, "responder": self.responder, "status": self.status,
                "problem": self.problem,
                "summary": self.matrix.summary() if self.matrix else None,
                "matrix": self.matrix.to_json() if self.matrix else None}


@dataclass
class ServiceResult:
    node: str
    personality: str
    uri: str
    probe: Mapping[str, Any] | None  # rdma-probe's JSON report
    problem: str | None = None

    @property
    def outcome(self) -> str:
        return str(self.probe.get("outcome", "?")) if self.probe else "missing"

    @property
    def detail(self) -> str:
        return str(self.probe.get("detail", "")) if self.probe else (self.problem or "")

    def policy(self) -> Mapping[str, Any] | None:
        """The responder's settings in a personality file's "mpa" terms: rdma-probe/2 reports
        a whole personality file, rdma-probe/1 (an older node's) the flat keys."""
        policy = self.probe.get("responder_policy") if self.probe else None
        if isinstance(policy, Mapping) and isinstance(policy.get("mpa"), Mapping):
            policy = policy["mpa"]
        return policy if isinstance(policy, Mapping) else None

    def fingerprint(self) -> Mapping[str, Any] | None:
        fp = self.probe.get("fingerprint") if self.probe else None
        return fp if isinstance(fp, Mapping) else None

    def stack(self) -> str:
        """What the responder behaves like, in a table cell: "siw", "cxgb4-rev1 or
        freebsd-cxgbe", "unknown (closest siw)"; "?" without a fingerprint."""
        fp = self.fingerprint()
        if fp is None:
            return "?"
        behaves = [str(n) for n in fp.get("behaves_like") or []]
        if behaves:
            return " or ".join(behaves)
        closest = fp.get("closest")
        return f"unknown (closest {closest})" if closest else "unknown"

    def to_json(self) -> dict[str, Any]:
        policy = self.policy()
        fp = self.fingerprint()
        return {"node": self.node, "personality": self.personality, "uri": self.uri,
                "outcome": self.outcome, "detail": self.detail,
                "responder_policy": dict(policy) if policy is not None else None,
                "behaves_like": list(fp.get("behaves_like") or []) if fp is not None else None,
                "stack": str(fp.get("summary")) if fp is not None else None}


@dataclass
class LabReport:
    controller: str
    pairs: list[PairResult]
    services: list[ServiceResult]
    devices: DeviceMatrix | None = None
    devices_problem: str | None = None  # the device tier's matrix came back unreadable

    def summary(self) -> dict[str, int]:
        counts = {"pairs": len(self.pairs),
                  "missing": sum(p.matrix is None for p in self.pairs),
                  "services": len(self.services),
                  "services_missing": sum(s.probe is None for s in self.services),
                  "total": 0, "pass": 0, "expected-fail": 0, "finding": 0, "fail": 0, "skip": 0}
        for pair in self.pairs:
            if pair.matrix is not None:
                for key, value in pair.matrix.summary().items():
                    counts[key] += value
        return counts

    def exit_code(self, *, strict: bool = False) -> int:
        """0, 1 (FAIL cells; with `strict` also FINDING cells), 3 (results missing)."""
        s = self.summary()
        if s["missing"] or s["services_missing"] or self.devices_problem:
            return EXIT_MISSING
        d = self.devices.summary() if self.devices is not None else {"fail": 0, "finding": 0}
        failed = s["fail"] + d["fail"] + (s["finding"] + d["finding"] if strict else 0)
        return EXIT_FAILED_CELLS if failed else EXIT_OK

    # -- text ------------------------------------------------------------------------------
    def render_text(self, *, colour: bool = False, width: int = WIDTH) -> str:
        """The whole report; no line wider than `width`, verdicts coloured with `colour`."""
        s = self.summary()
        lines = [f"rdma-interop lab report: {s['pairs']} node pairs, {s['services']} responder "
                 f"services (controller {self.controller})", ""]
        lines += self._overview(colour, width)
        lines.append("")
        lines.append(f"{s['total']} cases over {s['pairs'] - s['missing']} pairs: {s['pass']} pass, "
                     f"{s['expected-fail']} expected-fail, {s['finding']} finding, {s['fail']} "
                     f"fail, {s['skip']} skip"
                     + (f"; {s['missing']} pair(s) MISSING" if s["missing"] else ""))
        for pair in self.pairs:
            if pair.problem:
                lines.append(f"  {pair.name}: {pair.problem}")
        if self.services:
            lines += ["", "Responder services, as rdma-probe sees them:"]
            header = ["uri", "outcome", "revision", "peer-to-peer", "RTR accepted", "CRC",
                      "IRD/ORD", "behaves like"]
            rows, cells = [], {}
            for svc in self.services:
                row = printable(f"{svc.node} {svc.personality}")
                rows.append(row)
                for name, value in zip(header, self._service_row(svc)[2:]):
                    cells[(row, name)] = GridCell(printable(value))
            lines += render_grid("node personality", rows, header, cells, width=width,
                                 fold_what="columns")
        for pair in self.pairs:
            if pair.matrix is None:
                continue
            lines += ["", f"== {printable(pair.name)} ==", ""]
            lines.append(pair.matrix.render_table(legend=False, colour=colour,
                                                  width=width).rstrip("\n"))
        lines += ["", LEGEND]
        if self.devices is not None:
            lines += ["", "== The nodes' RDMA devices against each other (device tier) ==", "",
                      self.devices.render_text(colour=colour, width=width).rstrip("\n")]
        elif self.devices_problem:
            lines += ["", f"Device tier: MISSING ({self.devices_problem})"]
        return "\n".join(lines) + "\n"

    def _overview(self, colour: bool = False, width: int = WIDTH) -> list[str]:
        initiators = _unique(p.initiator for p in self.pairs)
        responders = _unique(p.responder for p in self.pairs)
        by_nodes = {(p.initiator, p.responder): p for p in self.pairs}
        cells: dict[tuple[str, str], GridCell] = {}
        for ini in initiators:
            for res in responders:
                pair = by_nodes.get((ini, res))
                cells[(printable(ini), printable(res))] = (
                    GridCell(pair.cell(), _overview_colour(pair)) if pair
                    else GridCell("-" if ini == res else ""))
        return render_grid("initiator \\ responder", [printable(n) for n in initiators],
                           [printable(n) for n in responders], cells, width=width,
                           colour=colour, fold_what="responders")

    @staticmethod
    def _service_row(svc: ServiceResult) -> list[str]:
        policy = svc.policy() or {}

        def shown(key: str) -> str:
            value = policy.get(key)
            if value is None:
                return "?"
            return ", ".join(map(str, value)) if isinstance(value, list) else str(value)

        ird_ord = f"{shown('ird')}/{shown('ord')}"
        if svc.probe is None:
            return [svc.node, svc.personality, svc.uri, "MISSING", "", "", "", "", "", ""]
        return [svc.node, svc.personality, svc.uri, svc.outcome, shown("revision"),
                shown("peer_to_peer"), shown("rtr_accepted"), shown("crc"), ird_ord, svc.stack()]

    # -- JSON and JUnit --------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"schema": LAB_MATRIX_SCHEMA,
                "generated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "controller": self.controller, "summary": self.summary(),
                "pairs": [p.to_json() for p in self.pairs],
                "services": [s.to_json() for s in self.services],
                "devices": self.devices.to_json() if self.devices is not None else None}

    def to_junit(self, *, strict: bool = False) -> ET.ElementTree:
        root = ET.Element("testsuites", name="rdma-interop lab")
        totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for pair in self.pairs:
            prefix = f"{pair.initiator}--{pair.responder}"
            if pair.matrix is None:
                suite = ET.SubElement(root, "testsuite", name=f"{prefix}.interop", tests="1",
                                      failures="0", errors="1", skipped="0", time="0.000")
                case = ET.SubElement(suite, "testcase", classname=f"{prefix}.interop",
                                     name="results")
                ET.SubElement(case, "error", message=pair.problem or "no results").text = (
                    pair.problem)
                totals["tests"] += 1
                totals["errors"] += 1
                continue
            for suite in pair.matrix.to_junit(strict=strict).getroot().findall("testsuite"):
                suite.set("name", f"{prefix}.{suite.get('name')}")
                for case in suite.iter("testcase"):
                    case.set("classname", f"{prefix}.{case.get('classname')}")
                root.append(suite)
                for key in totals:
                    totals[key] += int(suite.get(key, "0"))
        if self.devices is not None:
            for suite in self.devices.to_junit(strict=strict).getroot().findall("testsuite"):
                root.append(suite)
                totals["tests"] += int(suite.get("tests", "0"))
                totals["failures"] += int(suite.get("failures", "0"))
                totals["skipped"] += int(suite.get("skipped", "0"))
        for key, value in totals.items():
            root.set(key, str(value))
        ET.indent(root)
        return ET.ElementTree(root)

    def to_html(self, *, strict: bool = False) -> str:
        """One page: the overview, the responder services, each pair's matrix and the
        device matrix as grids, every cell opening its evidence."""
        s = self.summary()
        d = self.devices.summary() if self.devices is not None else None
        counts = {o: s[o.value] + (d[o.value] if d else 0) for o in Outcome}
        initiators = _unique(p.initiator for p in self.pairs)
        responders = _unique(p.responder for p in self.pairs)
        by_nodes = {(p.initiator, p.responder): p for p in self.pairs}
        overview = HtmlTable("Node pairs at a glance", ["initiator \\ responder", *responders],
                             [[ini, *((by_nodes[(ini, res)].cell() if (ini, res) in by_nodes
                                       else "-") for res in responders)] for ini in initiators],
                             note="; ".join(f"{p.name}: {p.problem}" for p in self.pairs
                                            if p.problem))
        sections: list[Section] = [overview]
        if self.services:
            sections.append(HtmlTable(
                "Responder services, as rdma-probe sees them",
                ["node", "personality", "uri", "outcome", "revision", "peer-to-peer",
                 "RTR accepted", "CRC", "IRD/ORD", "behaves like"],
                [self._service_row(svc) for svc in self.services]))
        for pair in self.pairs:
            if pair.matrix is not None:
                sections += pair.matrix.html_grids(heading_prefix=pair.name)
        if self.devices is not None:
            sections += [*self.devices.html_tables(), self.devices.html_grid()]
        code = self.exit_code(strict=strict)
        verdict = {EXIT_OK: "verdict: ok", EXIT_FAILED_CELLS: "verdict: FAILED (FAIL cells"
                   + (" or FINDINGs, --strict)" if strict else ")"),
                   EXIT_MISSING: "verdict: results MISSING"}[code]
        return render_page(HtmlPage(
            f"rdma-interop lab report (controller {self.controller})",
            datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), counts, sections,
            verdict=verdict, legend=[HTML_CELL_LEGEND]))

    def write(self, directory: Path, *, strict: bool = False) -> list[Path]:
        """Writes lab-matrix.txt, lab-matrix.json, lab-junit.xml and lab-matrix.html into
        `directory`."""
        text = directory / "lab-matrix.txt"
        text.write_text(self.render_text())
        doc = directory / "lab-matrix.json"
        doc.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        junit = directory / "lab-junit.xml"
        self.to_junit(strict=strict).write(junit, encoding="utf-8", xml_declaration=True)
        page = directory / "lab-matrix.html"
        page.write_text(self.to_html(strict=strict))
        return [text, doc, junit, page]


def _unique(items: Any) -> list[str]:
    return list(dict.fromkeys(items))


def _overview_colour(pair: PairResult) -> Outcome | None:
    """The overview's text starts "OK"/"FAIL": colour only a FAIL's word."""
    return Outcome.FAIL if pair.cell().startswith("FAIL") else None


def _read_json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text()), None
    except FileNotFoundError:
        return None, f"no {path.name} came back"
    except (OSError, ValueError) as e:
        return None, f"{path.name} unreadable: {e}"


def load_lab_report(directory: str | Path) -> LabReport:
    """Reads what the playbook brought home into `directory`. LabReportError without a
    usable run.json; a pair or service without results is kept, with the reason."""
    base = Path(directory)
    run, problem = _read_json(base / "run.json")
    if problem or not isinstance(run, Mapping) or run.get("schema") != RUN_SCHEMA:
        raise LabReportError(f"{base}: {problem or f'run.json is not {RUN_SCHEMA}'}")
    try:
        wanted_pairs = [(str(i), str(r)) for i, r in run["pairs"]]
        wanted_services = [(str(s["node"]), str(s["personality"]), str(s["uri"]))
                           for s in run.get("services", [])]
    except (KeyError, TypeError, ValueError) as e:
        raise LabReportError(f"{base}/run.json: malformed pairs or services ({e!r})") from e

    pairs = []
    for ini, res in wanted_pairs:
        path = base / "pairs" / f"{ini}--{res}" / "matrix.json"
        doc, problem = _read_json(path)
        matrix = None
        if doc is not None:
            try:
                matrix = InteropMatrix.from_json(doc)
            except (KeyError, TypeError, ValueError) as e:
                problem = f"matrix.json is not an interop matrix: {e}"
        if matrix is not None and len(matrix) == 0:
            matrix, problem = None, "the matrix has no cases"
        if problem:
            log = base / "pairs" / f"{ini}--{res}" / "pytest.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.is_file() else []
            problem += f" (pytest: {tail[0]})" if tail else ""
        pairs.append(PairResult(ini, res, matrix, problem))

    services = []
    for node, personality, uri in wanted_services:
        doc, problem = _read_json(base / "probe" / f"{node}--{personality}.json")
        probe = doc if isinstance(doc, Mapping) else None
        if probe is None and not problem:
            problem = "the probe report is not a JSON object"
        services.append(ServiceResult(node, personality, uri, probe, problem))
    # The device tier's matrix, when it ran. One that came back unreadable is a result
    # missing (exit 3), not a lab without devices.
    devices, devices_problem = None, None
    doc, problem = _read_json(base / "devices" / "device-matrix.json")
    if doc is not None:
        try:
            devices = DeviceMatrix.from_json(doc)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            devices_problem = f"devices/device-matrix.json is not a device matrix: {e!r}"
    elif (base / "devices" / "device-matrix.json").exists():
        devices_problem = problem
    return LabReport(str(run.get("controller", "?")), pairs, services, devices, devices_problem)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m rdma_interop.lab_report",
        description="Merges the node pairs' interop matrices and the responder probes that "
                    "playbooks/site.yml brought home into DIR/lab-matrix.{txt,json,html} and "
                    "DIR/lab-junit.xml, and prints the text.",
        epilog="Exit status: 0 all reported, no FAIL; 1 FAIL cells (with --strict also "
               "FINDING cells); 2 DIR unreadable; 3 a pair or service without results.")
    parser.add_argument("directory", metavar="DIR", help="the playbook's report directory")
    parser.add_argument("--json", action="store_true",
                        help="print lab-matrix.json instead of the text")
    parser.add_argument("--strict", action="store_true",
                        help="FINDING cells (a peer that deviates from the standard or "
                             "crashed) fail the run too, and are failures in lab-junit.xml")
    args = parser.parse_args(argv)
    try:
        report = load_lab_report(args.directory)
    except LabReportError as e:
        print(f"lab_report: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report.write(Path(args.directory), strict=args.strict)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.render_text(colour=use_colour(sys.stdout)), end="")
    return report.exit_code(strict=args.strict)


if __name__ == "__main__":
    sys.exit(main())
