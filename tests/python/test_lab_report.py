"""rdma_interop.lab_report: node pairs' matrices and responder probes merged into one report.

The tier's playbook test (tests/ansible) merges real results; these cover what a real lab
brings that a healthy namespace lab does not: a missing pair, FAIL cells, a broken file.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rdma_interop import lab_report
from rdma_interop.lab_report import (
    LAB_MATRIX_SCHEMA,
    RUN_SCHEMA,
    LabReportError,
    load_lab_report,
    main,
)
from rdma_interop.matrix import CaseResult, InteropMatrix, Outcome, SideError

PAIRS = [["n1", "n2"], ["n1", "n3"], ["n2", "n3"]]
SERVICES = [{"node": "n2", "personality": "siw", "uri": "tcp://198.18.0.3:7300"},
            {"node": "n3", "personality": "siw", "uri": "tcp://198.18.0.4:7300"}]
PROBE = {"schema": "rdma-interop/probe/2", "outcome": "probed",
         "detail": "probed an iWARP peer speaking MPA revision 2",
         "responder_policy": {"name": "probed-198.18.0.3-7300", "description": "...",
                              "mpa": {"revision": 2, "peer_to_peer": "when-asked",
                                      "rtr_accepted": ["write", "read"], "crc": "optional",
                                      "ird": 16, "ord": 16},
                              "private_data": "siw"},
         "fingerprint": {"verdict": "known", "behaves_like": ["siw"], "closest": "siw",
                         "summary": "behaves like siw (21 of 21 traits match)", "matches": []}}
# What a node with an older toolkit reports: a flat responder_policy and no fingerprint.
PROBE_V1 = {"schema": "rdma-interop/probe/1", "outcome": "probed", "detail": "...",
            "responder_policy": {"revision": 2, "peer_to_peer": "accepted",
                                 "rtr_accepted": ["write", "read"], "crc": "optional",
                                 "ird": 16, "ord": 16}}


def matrix(fail: bool = False, finding: bool = False) -> InteropMatrix:
    m = InteropMatrix("interop", initiators=["siw", "rev1-only"], responders=["siw", "rev1-only"],
                      environment={"lab": "lab.yml: a=198.18.0.2, b=198.18.0.3"})
    m.add(CaseResult("siw", "siw", Outcome.PASS, negotiated={"rtr": "write"}, elapsed_ms=10.0))
    m.add(CaseResult("rev1-only", "siw", Outcome.FINDING if finding else Outcome.PASS,
                     reason="deviation" if finding else None, elapsed_ms=5.0))
    if fail:
        m.add(CaseResult("siw", "rev1-only", Outcome.FAIL,
                         initiator_error=SideError(failure="reply_timeout", kind="setup")))
    else:
        m.add(CaseResult("siw", "rev1-only", Outcome.XFAIL, expected_failure="no_matching_rtr"))
    return m


def lab_dir(tmp_path: Path, *, skip_pair: int | None = None, fail_pair: int | None = None,
            skip_probe: bool = False, finding_pair: int | None = None) -> Path:
    (tmp_path / "run.json").write_text(json.dumps(
        {"schema": RUN_SCHEMA, "controller": "n1", "pairs": PAIRS, "services": SERVICES}))
    for i, (ini, res) in enumerate(PAIRS):
        pair = tmp_path / "pairs" / f"{ini}--{res}"
        pair.mkdir(parents=True)
        (pair / "pytest.log").write_text("3 passed in 9.1s\n")
        if i != skip_pair:
            matrix(fail=i == fail_pair, finding=i == finding_pair).write_json(
                pair / "matrix.json")
    (tmp_path / "probe").mkdir()
    for svc in SERVICES[: 1 if skip_probe else None]:
        (tmp_path / "probe" / f"{svc['node']}--{svc['personality']}.json").write_text(
            json.dumps(PROBE))
    return tmp_path


def test_every_pair_present_and_passing_exits_0_with_the_overview(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(lab_dir(tmp_path))]) == 0
    text = capsys.readouterr().out
    # The overview: initiator nodes down, responder nodes across, a node never with itself.
    overview = [[cell.strip() for cell in line.split("|")]
                for line in text.split("\n\n")[1].splitlines()]
    assert overview[0] == ["initiator \\ responder", "n2", "n3"]
    assert overview[2] == ["n1", "OK 3/3", "OK 3/3"]
    assert overview[3] == ["n2", "-", "OK 3/3"]
    assert "9 cases over 3 pairs: 6 pass, 3 expected-fail, 0 finding, 0 fail, 0 skip" in text
    assert "== n1 -> n3 ==" in text and "PASS write" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    # The services, one row per node and personality; folded to fit 100 columns.
    services: dict[tuple[str, str], str] = {}
    cols: list[str] = []
    for line in text.split("Responder services, as rdma-probe sees them:")[1].split("==")[0] \
            .splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 2:
            continue
        if parts[0] == "node personality":
            cols = parts[1:]
        else:
            services.update({(parts[0], c): v for c, v in zip(cols, parts[1:])})
    assert {k: v for k, v in services.items() if k[0] == "n3 siw"} == {
        ("n3 siw", "uri"): "tcp://198.18.0.4:7300", ("n3 siw", "outcome"): "probed",
        ("n3 siw", "revision"): "2", ("n3 siw", "peer-to-peer"): "when-asked",
        ("n3 siw", "RTR accepted"): "write, read", ("n3 siw", "CRC"): "optional",
        ("n3 siw", "IRD/ORD"): "16/16", ("n3 siw", "behaves like"): "siw"}
    doc = json.loads((tmp_path / "lab-matrix.json").read_text())
    assert doc["schema"] == LAB_MATRIX_SCHEMA and doc["controller"] == "n1"
    assert doc["summary"] == {"pairs": 3, "missing": 0, "services": 2, "services_missing": 0,
                              "total": 9, "pass": 6, "fail": 0, "skip": 0, "expected-fail": 3,
                              "finding": 0}
    assert [p["status"] for p in doc["pairs"]] == ["ok"] * 3
    assert InteropMatrix.from_json(doc["pairs"][0]["matrix"]).get("siw", "siw") is not None
    assert doc["services"][0]["responder_policy"]["rtr_accepted"] == ["write", "read"]
    assert doc["services"][0]["behaves_like"] == ["siw"]
    assert doc["services"][0]["stack"] == "behaves like siw (21 of 21 traits match)"
    junit = ET.parse(tmp_path / "lab-junit.xml").getroot()
    assert junit.get("tests") == "9" and junit.get("failures") == "0"
    assert [s.get("name") for s in junit.findall("testsuite")] == [
        "n1--n2.interop.tcp", "n1--n3.interop.tcp", "n2--n3.interop.tcp"]


def test_a_finding_is_reported_and_fails_only_a_strict_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = lab_dir(tmp_path, finding_pair=1)
    assert main([str(base)]) == 0
    text = capsys.readouterr().out
    assert "OK 2/3 1 finding" in text and "FINDING deviation" in text
    assert ET.parse(base / "lab-junit.xml").getroot().get("failures") == "0"
    page = (base / "lab-matrix.html").read_text()
    assert 'data-verdict="finding"' in page and "n1 -&gt; n3" in page
    assert main([str(base), "--strict"]) == 1
    assert ET.parse(base / "lab-junit.xml").getroot().get("failures") == "1"
    assert "verdict: FAILED (FAIL cells or FINDINGs, --strict)" in (
        base / "lab-matrix.html").read_text()


def test_the_report_is_coloured_on_a_terminal_only_and_never_with_no_color(
        tmp_path: Path) -> None:
    base = lab_dir(tmp_path, fail_pair=0, finding_pair=1)
    package_parent = Path(lab_report.__file__).resolve().parents[1]

    def on_a_terminal(**env: str) -> str:
        master, slave = pty.openpty()
        with subprocess.Popen([sys.executable, "-m", "rdma_interop.lab_report", str(base)],
                              stdout=slave, stderr=subprocess.PIPE,
                              env={**{k: v for k, v in os.environ.items() if k != "NO_COLOR"},
                                   "PYTHONPATH": str(package_parent), "TERM": "xterm", **env}
                              ) as proc:
            os.close(slave)
            out = b""
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            assert proc.wait(timeout=60) == 1
        os.close(master)
        return out.decode()

    coloured = on_a_terminal()
    assert "\x1b[1;31mFAIL\x1b[0m" in coloured and "\x1b[33mFINDING\x1b[0m" in coloured
    for name in ("lab-matrix.txt", "lab-matrix.json", "lab-junit.xml", "lab-matrix.html"):
        assert "\x1b" not in (base / name).read_text(), name
    assert "\x1b" not in on_a_terminal(NO_COLOR="1")
    piped = subprocess.run([sys.executable, "-m", "rdma_interop.lab_report", str(base)],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(package_parent)})
    assert piped.returncode == 1 and "\x1b" not in piped.stdout


def test_a_failed_cell_exits_1_and_names_the_pair(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(lab_dir(tmp_path, fail_pair=2))]) == 1
    text = capsys.readouterr().out
    assert "FAIL 1/3" in text and "FAIL reply_timeout" in text
    junit = ET.parse(tmp_path / "lab-junit.xml").getroot()
    assert junit.get("failures") == "1"


def test_a_missing_pair_or_probe_exits_3_and_says_why(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(lab_dir(tmp_path, skip_pair=1, fail_pair=0, skip_probe=True))]) == 3
    text = capsys.readouterr().out
    assert "MISSING" in text
    assert "n1 -> n3: no matrix.json came back (pytest: 3 passed in 9.1s)" in text
    report = load_lab_report(tmp_path)
    assert [p.status for p in report.pairs] == ["fail", "missing", "ok"]
    assert [s.outcome for s in report.services] == ["probed", "missing"]
    junit = ET.parse(tmp_path / "lab-junit.xml").getroot()
    assert junit.get("errors") == "1"


def test_a_broken_matrix_is_a_missing_pair_not_a_crash(tmp_path: Path) -> None:
    lab_dir(tmp_path)
    (tmp_path / "pairs" / "n2--n3" / "matrix.json").write_text('{"schema": "something/else"}')
    (tmp_path / "pairs" / "n1--n2" / "matrix.json").write_text("{truncated")
    report = load_lab_report(tmp_path)
    assert report.pairs[0].problem is not None and "unreadable" in report.pairs[0].problem
    assert report.pairs[2].problem is not None and "not an interop matrix" in report.pairs[2].problem
    assert report.exit_code() == 3


@pytest.mark.parametrize("run_json", [None, "not json", '{"schema": "x"}',
                                      json.dumps({"schema": RUN_SCHEMA, "pairs": [["only-one"]]})])
def test_an_unusable_directory_is_a_clear_error(tmp_path: Path, run_json: str | None) -> None:
    if run_json is not None:
        (tmp_path / "run.json").write_text(run_json)
    with pytest.raises(LabReportError, match=str(tmp_path)):
        load_lab_report(tmp_path)
    package_parent = Path(lab_report.__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "rdma_interop.lab_report", str(tmp_path)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(package_parent)})
    assert done.returncode == 2 and done.stderr.startswith("lab_report: ")


def device_matrix(fail: bool = False) -> dict:
    from rdma_interop.device_matrix import DeviceCell, DeviceMatrix, NodeInventory
    m = DeviceMatrix()
    m.nodes = [NodeInventory("n1", "ok", "", [{"name": "siw0", "kind": "iwarp"}]),
               NodeInventory("n2", "ok", "", [{"name": "siw0", "kind": "iwarp"}]),
               NodeInventory("n3", "no-device", "no RDMA device")]
    m.schedule = [[("n1", "n2")], [("n2", "n1")]]
    m.add(DeviceCell("ib_send_bw", "n1/siw0", "n2/siw0", "iwarp", "pass", figure="1.52 Gbit/s"))
    m.add(DeviceCell("ibv_xsrq_pingpong", "n1/siw0", "n2/siw0", "iwarp", "skip",
                     "n1/siw0: no XRC: ibv_open_xrcd: Operation not supported (errno 95)"))
    m.add(DeviceCell("rping", "n2/siw0", "n1/siw0", "iwarp", "fail" if fail else "pass",
                     "client exit 1" if fail else ""))
    return m.to_json()


@pytest.mark.parametrize("fail", [False, True])
def test_the_device_matrix_is_merged_beside_the_pairs(tmp_path: Path, fail: bool,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    base = lab_dir(tmp_path)
    (base / "devices").mkdir()
    (base / "devices" / "device-matrix.json").write_text(json.dumps(device_matrix(fail)))
    assert main([str(base)]) == (1 if fail else 0)
    text = capsys.readouterr().out
    assert "device tier" in text and "n3: no RDMA device" in text and "PASS 1.52 Gbit/s" in text
    doc = json.loads((base / "lab-matrix.json").read_text())
    assert doc["devices"]["summary"]["total"] == 3
    junit = ET.parse(base / "lab-junit.xml").getroot()
    assert junit.get("tests") == "12" and junit.get("skipped") == "1"
    assert junit.get("failures") == ("1" if fail else "0")


def test_an_unreadable_device_matrix_is_missing_results(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    base = lab_dir(tmp_path)
    (base / "devices").mkdir()
    (base / "devices" / "device-matrix.json").write_text('{"schema": "rdma-interop/device-matrix/1"')
    assert main([str(base)]) == 3
    assert "Device tier: MISSING" in capsys.readouterr().out


def test_an_older_nodes_flat_probe_report_still_shows_its_policy(tmp_path: Path) -> None:
    from rdma_interop.lab_report import ServiceResult
    old = ServiceResult("n2", "siw", "tcp://198.18.0.3:7300", PROBE_V1)
    assert old.policy() == PROBE_V1["responder_policy"]
    assert old.stack() == "?" and old.to_json()["behaves_like"] is None
    unknown = dict(PROBE, fingerprint={"verdict": "unknown", "behaves_like": [], "closest": "siw",
                                       "summary": "unknown stack, closest: siw (...)"})
    assert ServiceResult("n2", "x", "tcp://a:1", unknown).stack() == "unknown (closest siw)"
