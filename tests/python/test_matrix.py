"""rdma_interop.matrix: the table reads right, JSON and JUnit XML parse back with what went in.

Pure formatting, so the case records here are synthetic.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rdma_interop.matrix import SCHEMA, CaseResult, InteropMatrix, Outcome, SideError

NEGOTIATED_READ = {"revision": 2, "crc": True, "markers_to_peer": False, "markers_from_peer": False,
                   "enhanced": True, "peer_to_peer": True, "rtr": "read", "ird": 16, "ord": 16,
                   "peer_ird": 32, "peer_ord": 16}
NEGOTIATED_PLAIN = {**NEGOTIATED_READ, "peer_to_peer": False, "rtr": None}
NO_RTR = SideError(failure="no_matching_rtr", kind="setup", detail="initiator offers send only",
                   terminate={"layer": 2, "etype": 0, "code": 7})


def sample() -> InteropMatrix:
    m = InteropMatrix("MPA connection setup", initiators=["siw", "cxgb4", "never-rtr"],
                      responders=["siw", "cxgb4"], environment={"lab": "namespaces"})
    m.add(CaseResult("siw", "siw", Outcome.PASS, negotiated=NEGOTIATED_PLAIN, elapsed_ms=12.5))
    m.add(CaseResult("siw", "cxgb4", Outcome.PASS, negotiated=NEGOTIATED_READ,
                     responder_negotiated=NEGOTIATED_READ, elapsed_ms=15.0))
    m.add(CaseResult("cxgb4", "siw", Outcome.XFAIL, initiator_error=NO_RTR, responder_error=NO_RTR,
                     expected="both sides fail no_matching_rtr (RFC 6581 s3, MPA code 0x07)",
                     expected_failure="no_matching_rtr", notes=["no RTR type in common"]))
    m.add(CaseResult("cxgb4", "cxgb4", Outcome.SKIP, notes=["provider lacks markers"]))
    m.add(CaseResult("never-rtr", "siw", Outcome.FAIL,
                     responder_error=SideError(failure="rtr_timeout", kind="setup"),
                     mismatches=["responder failure: want rtr_mismatch, got rtr_timeout"]))
    m.add(CaseResult("never-rtr", "cxgb4", Outcome.FAIL, negotiated=NEGOTIATED_READ,
                     mismatches=["ird: want 16, got 8"]))
    return m


def test_cells_name_the_outcome_and_rtr_or_failure() -> None:
    m = sample()
    assert m.get("siw", "siw").cell() == "PASS -"
    assert m.get("siw", "cxgb4").cell() == "PASS read"
    assert m.get("cxgb4", "siw").cell() == "XFAIL no_matching_rtr"
    assert m.get("cxgb4", "cxgb4").cell() == "SKIP"
    assert m.get("never-rtr", "siw").cell() == "FAIL rtr_timeout"
    assert m.get("never-rtr", "cxgb4").cell() == "FAIL mismatch"


def test_table_has_responders_across_initiators_down_aligned() -> None:
    text = sample().render_table()
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("initiator \\ responder"))
    assert header.split("|")[1].strip() == "siw" and header.split("|")[2].strip() == "cxgb4"
    rows = {line.split("|")[0].strip(): line for line in lines
            if "|" in line and not line.startswith("initiator")}
    assert list(rows) == ["siw", "cxgb4", "never-rtr"]
    assert rows["siw"].split("|")[2].strip() == "PASS read"
    assert rows["cxgb4"].split("|")[1].strip().startswith("XFAIL no_matching_rtr [")
    # Columns line up: every separator sits at the same offset in the header and the rows.
    table = [header, *rows.values()]
    offsets = {tuple(i for i, ch in enumerate(line) if ch == "|") for line in table}
    assert len(offsets) == 1


def test_each_provider_table_shows_only_its_own_rows_and_columns() -> None:
    m = InteropMatrix(initiators=["ours", "fault:a", "kernel"], responders=["kernel", "ours"])
    m.add(CaseResult("ours", "kernel", Outcome.PASS, provider="tcp"))
    m.add(CaseResult("kernel", "ours", Outcome.PASS, provider="tcp"))
    m.add(CaseResult("fault:a", "kernel", Outcome.FAIL, provider="faults", reason="deviation"))
    text = m.render_table(legend=False)
    tcp, faults = text.split("provider: tcp")[1].split("provider: faults")
    tcp_rows = [ln.split("|")[0].strip() for ln in tcp.splitlines() if "|" in ln]
    fault_rows = [ln.split("|")[0].strip() for ln in faults.splitlines() if "|" in ln]
    assert tcp_rows == ["initiator \\ responder", "ours", "kernel"]
    assert fault_rows == ["initiator \\ responder", "fault:a"]
    assert faults.splitlines()[1].split("|")[1:] == [" kernel"]


def test_table_ends_with_summary_legend_and_numbered_notes() -> None:
    text = sample().render_table()
    assert "6 cases: 2 pass, 1 expected-fail, 2 fail, 1 skip" in text
    assert "XFAIL <why>" in text and "PASS <rtr>" in text
    notes = text.split("Notes:")[1]
    assert "[1] no RTR type in common" in notes
    assert "[3] mismatch: responder failure: want rtr_mismatch, got rtr_timeout" in notes


def test_cells_with_the_same_note_share_its_number() -> None:
    m = InteropMatrix()
    for responder in ("a", "b", "c"):
        m.add(CaseResult("x", responder, Outcome.SKIP, notes=["no rdma-probe"]))
    text = m.render_table()
    assert text.count("SKIP [1]") == 3 and text.count("no rdma-probe") == 1


def test_a_fail_cell_names_its_reason_when_given() -> None:
    case = CaseResult("a", "b", Outcome.FAIL, initiator_error=SideError(failure="connection_reset"),
                      reason="mismatch")
    assert case.cell() == "FAIL mismatch"
    m = InteropMatrix()
    m.add(case)
    assert InteropMatrix.from_json(m.to_json()).cases[0].cell() == "FAIL mismatch"


def test_a_later_result_for_a_cell_replaces_the_earlier() -> None:
    m = sample()
    m.add(CaseResult("never-rtr", "siw", Outcome.PASS, negotiated=NEGOTIATED_READ))
    assert len(m) == 6
    assert m.get("never-rtr", "siw").cell() == "PASS read"
    assert not m.ok() and m.summary()["fail"] == 1


def test_rows_and_columns_without_cases_are_left_out_and_order_is_kept() -> None:
    m = InteropMatrix(initiators=["b", "a", "unused"], responders=["y", "x"])
    m.add(CaseResult("a", "x", Outcome.PASS))
    m.add(CaseResult("extra", "x", Outcome.PASS))
    m.add(CaseResult("b", "x", Outcome.PASS))
    assert m.initiators == ["b", "a", "extra"] and m.responders == ["x"]


def test_ok_means_no_unexpected_failure() -> None:
    m = InteropMatrix()
    m.add(CaseResult("a", "b", Outcome.PASS))
    m.add(CaseResult("a", "c", Outcome.XFAIL, expected_failure="rtr_timeout"))
    m.add(CaseResult("b", "c", Outcome.SKIP))
    assert m.ok()


def test_json_follows_the_schema_and_round_trips(tmp_path: Path) -> None:
    m = sample()
    path = m.write_json(tmp_path / "out" / "matrix.json")
    doc = json.loads(path.read_text())
    assert doc["schema"] == SCHEMA == "rdma-interop/matrix/1"
    assert set(doc) == {"schema", "title", "generated_at", "environment", "initiators",
                        "responders", "providers", "summary", "cases"}
    assert doc["summary"] == {"total": 6, "pass": 2, "fail": 2, "skip": 1, "expected-fail": 1}
    assert doc["initiators"] == ["siw", "cxgb4", "never-rtr"]
    assert doc["responders"] == ["siw", "cxgb4"] and doc["providers"] == ["tcp"]
    assert doc["generated_at"].endswith("Z")
    case_keys = {"id", "initiator", "responder", "provider", "outcome", "cell", "negotiated",
                 "responder_negotiated", "rtr", "failure", "expected", "errors", "mismatches",
                 "notes", "elapsed_ms"}
    for case in doc["cases"]:
        assert set(case) == case_keys
        assert case["outcome"] in {"pass", "fail", "skip", "expected-fail"}
        assert set(case["errors"]) == {"initiator", "responder"}
    xfail = next(c for c in doc["cases"] if c["id"] == "cxgb4->siw@tcp")
    assert xfail["failure"] == "no_matching_rtr"
    assert xfail["errors"]["responder"] == {"failure": "no_matching_rtr", "kind": "setup",
                                            "detail": "initiator offers send only",
                                            "terminate": {"layer": 2, "etype": 0, "code": 7}}
    again = InteropMatrix.from_json(doc)
    assert [c.to_json() for c in again.cases] == [c.to_json() for c in m.cases]
    assert again.render_table() == m.render_table()


def test_from_json_refuses_other_schemas() -> None:
    with pytest.raises(ValueError, match="schema"):
        InteropMatrix.from_json({"schema": "something/else"})


def test_junit_has_one_testcase_per_cell_and_parses_back(tmp_path: Path) -> None:
    path = sample().write_junit(tmp_path / "matrix-junit.xml")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("6", "2", "1")
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == "interop.tcp" and suite.get("tests") == "6"
    cases = {tc.get("name"): tc for tc in suite.findall("testcase")}
    assert set(cases) == {f"{i} -> {r}" for i in ["siw", "cxgb4", "never-rtr"] for r in ["siw", "cxgb4"]}
    assert cases["siw -> siw"].get("classname") == "interop.tcp.siw"
    assert cases["siw -> siw"].get("time") == "0.013"
    failure = cases["never-rtr -> siw"].find("failure")
    assert failure is not None and failure.get("message") == "FAIL rtr_timeout"
    assert "want rtr_mismatch" in (failure.text or "")
    assert cases["cxgb4 -> cxgb4"].find("skipped") is not None
    xfail = cases["cxgb4 -> siw"]
    assert xfail.find("failure") is None and xfail.find("skipped") is None
    props = {p.get("name"): p.get("value") for p in xfail.iter("property")}
    assert props == {"outcome": "expected-fail", "cell": "XFAIL no_matching_rtr"}
    assert "RFC 6581" in (xfail.findtext("system-out") or "")
    props = {p.get("name"): p.get("value") for p in cases["siw -> cxgb4"].iter("property")}
    assert props["rtr"] == "read"


def test_several_providers_get_a_table_and_a_suite_each() -> None:
    m = sample()
    m.add(CaseResult("siw", "siw", Outcome.PASS, provider="verbs", negotiated=NEGOTIATED_READ))
    text = m.render_table()
    assert "provider: tcp" in text and "provider: verbs" in text
    suites = m.to_junit().getroot().findall("testsuite")
    assert [s.get("name") for s in suites] == ["interop.tcp", "interop.verbs"]


def test_reports_are_safe_for_any_text_a_peer_sent(tmp_path: Path) -> None:
    # Issue 17: a reject's private data or a Terminate detail is the peer's choice. An escape
    # sequence or a newline must not reach the terminal raw (it forges rows, clears screens),
    # and a control character or a lone surrogate (a byte that was not UTF-8, decoded with
    # surrogateescape) must not make the JUnit file XML that no reader accepts.
    hostile = "\x1b[2J\nforged row \x00\x7f\x9b \udcff end \u202e"
    m = InteropMatrix("hostile", initiators=["a"], responders=["b"])
    m.add(CaseResult("a", "b", Outcome.FAIL, notes=[hostile],
                     responder_error=SideError(failure="peer_rejected", kind="setup",
                                               detail=hostile)))
    table = m.render_table()
    assert "\x1b" not in table and "\x00" not in table and "\x9b" not in table
    assert "\\x1b[2J\\x0aforged row \\x00\\x7f\\x9b \\udcff end \\u202e" in table
    assert "\u202e" not in table
    assert not any(line.startswith("forged row") for line in table.splitlines())
    path = m.write_junit(tmp_path / "junit.xml")
    root = ET.parse(path).getroot()  # strict XML 1.0 parser: refuses control characters
    failure = root.find(".//failure")
    assert failure is not None and failure.text is not None
    assert "\\x1b[2J\\x0aforged row" in failure.text
    assert json.loads(json.dumps(m.to_json(), ensure_ascii=False)) is not None


def test_a_backslash_from_a_peer_cannot_pass_for_an_escape() -> None:
    m = InteropMatrix("backslash", initiators=["a"], responders=["b"])
    m.add(CaseResult("a", "b", Outcome.SKIP, notes=["literally \\x1b, not an escape"]))
    assert "literally \\\\x1b, not an escape" in m.render_table()
