"""rdma_interop.matrix: the table reads right, JSON and JUnit XML parse back with what went in;
the verdicts (PASS, XFAIL, FINDING, FAIL, SKIP) mean the same in every format; no table is
wider than 100 columns; colour only where asked, never with NO_COLOR.

Pure formatting, so the case records here are synthetic.
"""

from __future__ import annotations

import json
import os
import pty
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rdma_interop.matrix import (SCHEMA, CaseResult, Evidence, InteropMatrix, Outcome,
                                 SideError)
from rdma_interop.verdict import use_colour

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
    assert "6 cases: 2 pass, 1 expected-fail, 0 finding, 2 fail, 1 skip" in text
    assert "verdict: FAILED (2 FAIL cell(s))" in text
    assert "PASS <rtr>" in text and "XFAIL/FINDING/FAIL <why>" in text
    for word in ("PASS ", "XFAIL ", "FINDING ", "FAIL ", "SKIP "):
        assert any(line.startswith(word) for line in text.splitlines()), word
    notes = text.split("\nNotes")[1]
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
    assert doc["schema"] == SCHEMA == "rdma-interop/matrix/2"
    assert set(doc) == {"schema", "title", "generated_at", "environment", "layout", "initiators",
                        "responders", "providers", "checks", "peers", "groups", "legend",
                        "summary", "cases"}
    assert doc["summary"] == {"total": 6, "pass": 2, "fail": 2, "skip": 1, "expected-fail": 1,
                              "finding": 0}
    assert doc["initiators"] == ["siw", "cxgb4", "never-rtr"]
    assert doc["responders"] == ["siw", "cxgb4"] and doc["providers"] == ["tcp"]
    assert doc["generated_at"].endswith("Z")
    case_keys = {"id", "initiator", "responder", "provider", "group", "check", "peer", "outcome",
                 "cell", "negotiated", "responder_negotiated", "rtr", "failure", "expected",
                 "errors", "mismatches", "notes", "evidence", "elapsed_ms"}
    for case in doc["cases"]:
        assert set(case) == case_keys
        assert case["outcome"] in {"pass", "fail", "skip", "expected-fail", "finding"}
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


# ---- FINDING: its own verdict, in every format ------------------------------------------

#: Kernel siw's Terminate FPDU for an RDMA Write to an invalid STag (the kernel tier's
#: write_invalid_stag case): layer and type nibbles swapped, M/D at the wrong bits.
SIW_TERMINATE = ("0026414700000000000000020000000100000000110003000010c14025b02500000055ff43"
                 "cb53405e79ed05")
KERNEL_BUG = "kernel BUG at drivers/infiniband/core/iwcm.c:969!"
TRACE = (f"[   42.1] {KERNEL_BUG}\n[   42.1] invalid opcode: 0000 [#1] PREEMPT SMP NOPTI\n"
         "[   42.1] Workqueue: iw_cm_wq cm_work_handler [iw_cm]\n"
         "[   42.1] RIP: 0010:cm_work_handler+0xa8f/0xe20 [iw_cm]\n"
         "[   42.1]  process_one_work+0x1c7/0x380\n[   42.1] ---[ end trace 0000 ]---")


def finding_matrix() -> InteropMatrix:
    m = InteropMatrix("kernel", layout="checks", peers=["ours->siw", "verbs@rxe"],
                      groups=["faults", "verbs-check"])
    m.add(CaseResult("fault:write_invalid_stag", "kernel-siw", Outcome.FINDING,
                     reason="deviation", group="faults", check="write_invalid_stag",
                     peer="ours->siw", notes=["the M flag is clear: RFC 5040 s4.8 requires ..."],
                     evidence=[Evidence.terminate("kernel siw's Terminate (FPDU)",
                                                  bytes.fromhex(SIW_TERMINATE))]))
    m.add(CaseResult("ours-verbs@rxe", "kernel-rxe", Outcome.PASS, group="verbs-check",
                     check="read", peer="verbs@rxe"))
    return m


def test_a_finding_is_reported_in_every_format_and_fails_only_a_strict_run(tmp_path: Path) -> None:
    m = finding_matrix()
    assert m.ok() and not m.ok(strict=True)
    assert m.get_check("write_invalid_stag", "ours->siw").cell() == "FINDING deviation"
    text = m.render_table()
    assert "FINDING deviation [1]" in text
    assert "2 cases: 1 pass, 0 expected-fail, 1 finding, 0 fail, 0 skip" in text
    assert "verdict: ok, with 1 FINDING(s)" in text
    assert "verdict: FAILED (1 FINDING cell(s), --strict)" == m.verdict_line(strict=True)

    doc = json.loads(m.write_json(tmp_path / "matrix.json").read_text())
    case = next(c for c in doc["cases"] if c["check"] == "write_invalid_stag")
    assert (case["outcome"], case["failure"], case["cell"]) == ("finding", "deviation",
                                                                "FINDING deviation")
    assert case["evidence"] == [{"kind": "terminate", "label": "kernel siw's Terminate (FPDU)",
                                 "text": SIW_TERMINATE}]
    assert doc["summary"]["finding"] == 1
    again = InteropMatrix.from_json(doc)
    assert [c.to_json() for c in again.cases] == [c.to_json() for c in m.cases]

    root = ET.parse(m.write_junit(tmp_path / "junit.xml")).getroot()
    assert root.get("failures") == "0"
    tc = next(t for t in root.iter("testcase") if "write_invalid_stag" in (t.get("name") or ""))
    assert tc.find("failure") is None and tc.find("skipped") is None
    props = {p.get("name"): p.get("value") for p in tc.iter("property")}
    assert props["outcome"] == "finding" and props["finding"] == "deviation"
    out = tc.findtext("system-out") or ""
    assert "evidence (terminate) kernel siw's Terminate (FPDU):" in out and SIW_TERMINATE in out

    strict = ET.parse(m.write_junit(tmp_path / "strict.xml", strict=True)).getroot()
    assert strict.get("failures") == "1"
    failure = next(t for t in strict.iter("testcase")
                   if "write_invalid_stag" in (t.get("name") or "")).find("failure")
    assert failure is not None and failure.get("type") == "finding"
    assert failure.get("message") == "FINDING deviation" and SIW_TERMINATE in (failure.text or "")

    page = m.to_html()
    assert 'class="cell v-finding" data-verdict="finding"' in page
    assert "FINDING deviation" in page
    # The Terminate decoded field by field, with the RFCs' names.
    assert "DDP/tagged buffer/invalid STag (1/1/0x00)" in page
    assert "reserved bits 0x0300 set" in page and "16 octet(s) beyond what M/D/R announce" in page


@pytest.mark.parametrize("before", [Outcome.XFAIL, Outcome.PASS, Outcome.FAIL, Outcome.SKIP])
def test_a_crash_is_a_finding_with_its_trace_whatever_the_cell_read(before: Outcome,
                                                                     tmp_path: Path) -> None:
    # Issue 22: a kernel BUG sat in an "XFAIL no_matching_rtr" cell, which reads as benign.
    m = InteropMatrix("kernel", layout="checks")
    case = CaseResult("ours-tcp", "kernel-siw", before, expected_failure="no_matching_rtr",
                      reason="harness", check="rev2 rtr=send crc", peer="ours->siw",
                      group="rping", notes=[f"peer crashed: {KERNEL_BUG}"],
                      evidence=[Evidence.crash(KERNEL_BUG, TRACE)])
    was = case.cell()
    m.add(case)
    m.add(case)  # adding again changes nothing
    got = m.get_check("rev2 rtr=send crc", "ours->siw")
    assert got is not None and got.outcome is Outcome.FINDING and got.cell() == "FINDING crashed"
    assert got.notes == [f"peer crashed: {KERNEL_BUG}",
                         f"the peer crashed; without the crash the cell reads {was}"]
    assert m.ok() and not m.ok(strict=True)
    doc = m.to_json()
    assert doc["cases"][0]["outcome"] == "finding"
    assert doc["cases"][0]["evidence"][0] == {"kind": "crash", "label": KERNEL_BUG, "text": TRACE}
    out = m.to_junit().getroot().find(".//system-out")
    assert out is not None and "cm_work_handler+0xa8f/0xe20" in (out.text or "")
    page = m.to_html()
    assert '<pre class="crash">' in page and "cm_work_handler+0xa8f/0xe20 [iw_cm]" in page


def test_a_version_1_matrix_still_reads() -> None:
    doc = sample().to_json()
    doc["schema"] = "rdma-interop/matrix/1"
    for key in ("layout", "checks", "peers", "groups", "legend"):
        del doc[key]
    for case in doc["cases"]:
        for key in ("group", "check", "peer", "evidence"):
            del case[key]
    again = InteropMatrix.from_json(doc)
    assert again.render_table() == sample().render_table()


# ---- width: 100 columns, folded when wider ---------------------------------------------

NAMES = ["siw", "cxgb4", "cxgb4-write", "cxgb4-rev1", "freebsd-cxgbe", "irdma", "qedr", "erdma",
         "rev1-only", "never-rtr", "strict", "send-rtr-only", "deep-ord-strict", "crc-refuse"]


def wide_matrix() -> InteropMatrix:
    m = InteropMatrix("Interop matrix: every personality against every other", initiators=NAMES,
                      responders=NAMES)
    for i, ini in enumerate(NAMES):
        for j, res in enumerate(NAMES):
            if (i + j) % 3 == 0:
                m.add(CaseResult(ini, res, Outcome.PASS, negotiated={"rtr": "write"}))
            else:
                m.add(CaseResult(ini, res, Outcome.XFAIL, expected_failure="revision_unsupported",
                                 notes=[f"rule {(i + j) % 3}: " + "a long explanation " * 12]))
    return m


def blocks_of(text: str) -> dict[tuple[str, str], str]:
    """Every (row, column) cell of every folded block of a one-provider table."""
    cells: dict[tuple[str, str], str] = {}
    cols: list[str] = []
    for line in text.splitlines():
        if "|" not in line:
            continue
        parts = [p.strip() for p in line.split("|")]
        if parts[0] == "initiator \\ responder":
            cols = parts[1:]
            continue
        for col, cell in zip(cols, parts[1:]):
            assert (parts[0], col) not in cells, f"{(parts[0], col)} printed twice"
            cells[(parts[0], col)] = cell
    return cells


def test_a_matrix_too_wide_for_100_columns_folds_and_shows_verdicts_with_notes() -> None:
    text = wide_matrix().render_table()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "(responders 1-" in text and "of 14)" in text
    cells = blocks_of(text)
    assert set(cells) == {(i, r) for i in NAMES for r in NAMES}  # every cell once
    assert cells[("siw", "siw")] == "PASS write"
    assert re.fullmatch(r"XFAIL \[\d\]", cells[("siw", "cxgb4")])
    # The note of an abbreviated cell names its failure first.
    mark = cells[("siw", "cxgb4")].split()[-1]
    notes = text.split("Notes")[1]
    assert f"{mark} XFAIL revision_unsupported: rule 1: a long explanation" in notes


def test_a_matrix_that_fits_keeps_its_whole_cells_unfolded() -> None:
    text = sample().render_table()
    assert "(responders" not in text and "XFAIL no_matching_rtr [1]" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_long_notes_and_hex_wrap_within_100_columns() -> None:
    m = InteropMatrix()
    m.add(CaseResult("a", "b", Outcome.FAIL, notes=["octets " + "ab" * 300]))
    lines = m.render_table().splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "".join(line.strip() for line in lines if line.startswith(("[", " "))).count("ab") >= 300


def test_the_checks_layout_is_one_matrix_with_checks_down_and_peers_across() -> None:
    m = InteropMatrix("kernel", layout="checks", peers=["ours->siw", "siw->ours", "verbs@rxe"],
                      groups=["rping", "faults", "verbs-check"])
    m.add(CaseResult("fault:x", "kernel-siw", Outcome.PASS, group="faults", check="bad_crc",
                     peer="ours->siw"))
    m.add(CaseResult("ours-verbs@rxe", "kernel-rxe", Outcome.PASS, group="verbs-check",
                     check="read", peer="verbs@rxe"))
    for peer, ini, res in (("siw->ours", "kernel-siw", "ours-tcp"),
                           ("ours->siw", "ours-tcp", "kernel-siw")):
        m.add(CaseResult(ini, res, Outcome.PASS, group="rping", check="rev2 crc", peer=peer,
                         negotiated={"rtr": None}))
    text = m.render_table(legend=False)
    assert text.count("check \\ peer") == 1 and "provider:" not in text
    lines = text.splitlines()
    header = next(ln for ln in lines if ln.startswith("check \\ peer"))
    assert [p.strip() for p in header.split("|")[1:]] == ["ours->siw", "siw->ours", "verbs@rxe"]
    rows = [ln.split("|")[0].strip() if "|" in ln else ln for ln in lines
            if ln.startswith("-- ") or ("|" in ln and not ln.startswith("check"))]
    assert rows[0].startswith("-- rping ") and rows[1] == "rev2 crc"
    assert rows[2].startswith("-- faults ") and rows[3] == "bad_crc"
    assert rows[4].startswith("-- verbs-check ") and rows[5] == "read"
    rev2 = next(ln for ln in lines if ln.startswith("rev2 crc"))
    assert [p.strip() for p in rev2.split("|")[1:]] == ["PASS", "PASS", ""]
    assert m.to_json()["checks"] == ["rev2 crc", "bad_crc", "read"]


# ---- colour: on a terminal only, never with NO_COLOR ------------------------------------

ANSI = re.compile("\x1b\\[[0-9;]*m")


def test_colour_marks_only_the_verdict_words_and_keeps_the_columns() -> None:
    m = sample()
    m.add(CaseResult("siw", "cxgb4", Outcome.FINDING, reason="deviation"))
    plain, coloured = m.render_table(), m.render_table(colour=True)
    assert "\x1b" not in plain
    assert "\x1b[33mFINDING\x1b[0m deviation" in coloured
    assert "\x1b[1;31mFAIL\x1b[0m rtr_timeout" in coloured
    assert ANSI.sub("", coloured) == plain


def test_colour_only_for_a_terminal_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    master, slave = pty.openpty()
    with os.fdopen(slave, "w") as tty, open(tmp_path / "f", "w") as plain_file, \
            os.fdopen(master, "rb"):
        assert use_colour(tty) and not use_colour(plain_file) and not use_colour(None)
        assert use_colour(markup=True) and not use_colour(markup=False)
        monkeypatch.setenv("NO_COLOR", "1")
        assert not use_colour(tty) and not use_colour(markup=True)
        monkeypatch.setenv("NO_COLOR", "")  # present but empty: no-color.org says colour on
        assert use_colour(tty)
        monkeypatch.setenv("TERM", "dumb")
        assert not use_colour(tty)


def test_files_never_get_colour(tmp_path: Path) -> None:
    m = finding_matrix()
    for path in (m.write_json(tmp_path / "m.json"), m.write_junit(tmp_path / "m.xml"),
                 m.write_html(tmp_path / "m.html")):
        assert "\x1b" not in path.read_text(), path
