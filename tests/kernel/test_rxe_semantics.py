"""Our verbs provider on the guest's kernel rxe: connect, Send/Receive, Write, Read, and the
RC error semantics the XRC liveness probe relies on; XRC itself on siw and rxe.

``verbs-check`` (tools/verbs-check, built with the verbs provider) runs each check as a
client and a forked server through rxe0 (10.9.0.1) inside the guest:

- send-recv, write, read: the data arrives and is verified;
- sq-overflow: one chain of Writes four times the send queue posts what fits (all of it
  completes) and is refused with ENOMEM for the rest, as ibv_post_send(3) says (siw returns
  0 for it and the rest is lost: a FINDING in its column);
- bad-rkey-read: an RDMA Read of >= 1 octet with a bad rkey completes with a remote access
  error (IBV_WC_REM_ACCESS_ERR);
- zero-length-read: a zero-length Read is not rkey-checked (IB spec C9-88), so one with a
  bad rkey succeeds, and a good Read works after it;
- dead-peer-read: a Read to a peer whose process is gone ends in retry exceeded
  (IBV_WC_RETRY_EXC_ERR) after the transport's retries, within seconds;
- dead-peer-bad-rkey-read: the invalid-rkey liveness probe against a killed peer ends in
  retry exceeded ("no answer"), where bad-rkey-read shows a live one answering;
- liveness-probe: core/xrc's LivenessProbe on zero-length Reads keeps the live server alive
  (every probe answered, the QP unhurt) and finds it dead within its bound once killed.

``rdma-probe xrc`` reports siw0 and rxe0 without XRC (ibv_open_xrcd: EOPNOTSUPP), so the
XRC lifetime over verbs skips with that reason; the lifetime engine itself runs on the
simulated fabric (tests/unit/xrc_sim_random_test.cc).

Each check is one matrix cell, row the check (group "verbs-check"), column verbs@rxe: PASS,
FINDING when rxe answers otherwise (the test still fails: the XRC probe relies on these
semantics), FAIL when the check could not run. XRC (``ibv_xsrq_pingpong``) skips with the
device's reason when it cannot open an XRC domain (EOPNOTSUPP), and fails on any other
error.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome, SideError

from tests.support.guest import GUEST_RXE_ADDRESSES, GUEST_SIW_ADDRESS, Guest, guest_path
from tests.support.paths import build_dir
from tests.support.tools import built_tool

from .kernel_matrix import VERBS_RXE, VERBS_SIW, add_case, attach_crashes, peer_crashes
from .verbs_check_expected import RXE_EXPECTED

GUEST_PORT = 7003  # verbs-check: check i listens on PORT + i (rdma_cm ports on rxe0)
#: dead-peer-read: 2 retries of a 268 ms ACK timeout (verbs-check's defaults) end well within.
DEAD_PEER_BOUND_MS = 10_000
EOPNOTSUPP = 95


def guest_verbs_check() -> str:
    return guest_path(built_tool("verbs-check"))


@pytest.fixture(scope="module")
def rxe_checks(guest: Guest) -> dict[str, Any]:
    """verbs-check's JSON line per check, run once for the module on rxe0; plus "_crashes"
    (kernel crashes, if any) and "_raw" (the whole output)."""
    tool = guest_verbs_check()
    if not guest.alive():
        guest.restart()
    mark = guest.console_mark()
    result = guest.run(f"{tool} --address {GUEST_RXE_ADDRESSES[0]} --port {GUEST_PORT} --json",
                       timeout=60 + 20 * len(RXE_EXPECTED))
    checks: dict[str, Any] = {}
    for line in result.output.splitlines():
        if line.startswith("{"):
            report = json.loads(line)
            checks[report["check"]] = report
    checks["_crashes"] = peer_crashes(guest, mark)
    checks["_raw"] = f"exit {result.rc}: {result.output}"
    return checks


def record_check(matrix: InteropMatrix, name: str, report: dict[str, Any] | None,
                 ok: bool, crashes: list[Any], raw: str) -> None:
    """PASS; FINDING when rxe answered, otherwise than required; FAIL when the check did
    not run (an error, no line)."""
    answered = report is not None and report.get("result") in ("pass", "fail")
    cell = CaseResult(initiator="ours-verbs@rxe", responder="kernel-rxe", provider="verbs",
                      outcome=Outcome.PASS if ok else Outcome.FINDING if answered
                      else Outcome.FAIL,
                      expected=f"{name}: {RXE_EXPECTED[name]}", group="verbs-check", check=name,
                      peer=VERBS_RXE)
    attach_crashes(cell, crashes)
    if report is not None:
        cell.negotiated = report.get("negotiated")
        cell.notes.append(str(report.get("detail")))
        cell.elapsed_ms = report.get("elapsed_ms")
        if not ok:
            cell.reason = "deviation" if answered else str(report.get("result"))
            cell.notes.insert(0, f"expected {report.get('expected', RXE_EXPECTED[name])}, got "
                                 f"{report.get('got')}")
            cell.initiator_error = SideError(kind=str(report.get("result")),
                                             detail=str(report.get("connection") or
                                                        report.get("detail")))
    else:
        cell.evidence.append(Evidence("log", "verbs-check", raw))
    add_case(matrix, cell)


def check(rxe_checks: dict[str, Any], kernel_matrix: InteropMatrix, name: str) -> dict[str, Any]:
    """The check's report, recorded as a cell; fails unless it observed what it must."""
    report: dict[str, Any] | None = rxe_checks.get(name)
    ok = (report is not None and report.get("got") == RXE_EXPECTED[name]
          and report.get("result") == "pass" and report.get("device") == "rxe0")
    record_check(kernel_matrix, name, report, ok, rxe_checks["_crashes"], rxe_checks["_raw"])
    assert report is not None, f"verbs-check reported nothing for {name}: {rxe_checks['_raw']}"
    assert report.get("device") == "rxe0", report
    assert report.get("got") == RXE_EXPECTED[name], report
    assert report.get("result") == "pass", report
    return report


@pytest.mark.parametrize("name", ["send-recv", "write", "read"])
def test_rxe_data_path_verified(rxe_checks: dict[str, Any], kernel_matrix: InteropMatrix,
                                name: str) -> None:
    check(rxe_checks, kernel_matrix, name)


def test_rxe_refuses_what_its_send_queue_cannot_take(rxe_checks: dict[str, Any],
                                                     kernel_matrix: InteropMatrix) -> None:
    report = check(rxe_checks, kernel_matrix, "sq-overflow")
    assert report.get("asked") == 64 and report.get("granted", 0) >= 64, report
    assert report.get("chain") == 4 * report.get("granted"), report
    assert report.get("granted") <= report.get("posted", 0) < report.get("chain", 0), report
    assert report.get("returned_success") is False, report


def test_rxe_read_with_bad_rkey_completes_with_remote_access_error(
        rxe_checks: dict[str, Any], kernel_matrix: InteropMatrix) -> None:
    report = check(rxe_checks, kernel_matrix, "bad-rkey-read")
    assert "IBV_WC_REM_ACCESS_ERR" in report.get("connection", ""), report


def test_rxe_zero_length_read_is_not_rkey_checked(rxe_checks: dict[str, Any],
                                                  kernel_matrix: InteropMatrix) -> None:
    check(rxe_checks, kernel_matrix, "zero-length-read")


def test_rxe_read_to_dead_peer_ends_in_retry_exceeded(rxe_checks: dict[str, Any],
                                                      kernel_matrix: InteropMatrix) -> None:
    report = check(rxe_checks, kernel_matrix, "dead-peer-read")
    assert "IBV_WC_RETRY_EXC_ERR" in report.get("connection", ""), report
    assert report.get("server") == "killed by the check", report
    assert 0 < report.get("completion_ms", -1) <= DEAD_PEER_BOUND_MS, report


def test_rxe_invalid_rkey_probe_of_dead_peer_gets_no_answer(
        rxe_checks: dict[str, Any], kernel_matrix: InteropMatrix) -> None:
    report = check(rxe_checks, kernel_matrix, "dead-peer-bad-rkey-read")
    assert report.get("probe_outcome") == "no_answer", report
    assert 0 < report.get("completion_ms", -1) <= DEAD_PEER_BOUND_MS, report


def test_rxe_liveness_probe_keeps_live_peer_and_finds_killed_one(
        rxe_checks: dict[str, Any], kernel_matrix: InteropMatrix) -> None:
    report = check(rxe_checks, kernel_matrix, "liveness-probe")
    assert report.get("live_answered", 0) >= 3 and report.get("live_failed") == 0, report
    bound = report["probe"]["detection_bound_ms"]
    assert 0 < report.get("found_dead_ms", -1) <= bound + 1000, report
    assert "no_answer" in report.get("outcomes", []), report


# ---- XRC ---------------------------------------------------------------------------------


def test_rdma_probe_xrc_reports_soft_devices_without_xrc(
        live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    """rdma-probe xrc asks every device for real (ibv_open_xrcd): siw and rxe have no XRC,
    so the XRC lifetime over verbs is a skip with the device's own reason."""
    tool = guest_path(build_dir() / "tools" / "rdma-probe")
    result = live_guest.run(f"{tool} xrc --json", timeout=60)
    assert result.rc == 0, result.output
    line = next(ln for ln in result.output.splitlines() if ln.startswith("{"))
    report = json.loads(line)
    assert report["schema"] == "rdma-interop/xrc-devices/1"
    devices = {d["device"]: d for d in report["devices"]}
    assert {"siw0", "rxe0"} <= set(devices), report
    for name, initiator, responder, peer in (("siw0", "ours-verbs@siw", "kernel-siw", VERBS_SIW),
                                             ("rxe0", "ours-verbs@rxe", "kernel-rxe", VERBS_RXE)):
        d = devices[name]
        cell = CaseResult(initiator=initiator, responder=responder, provider="verbs",
                          outcome=Outcome.SKIP if not d["supported"] else Outcome.PASS,
                          expected="ibv_open_xrcd", notes=[f"{name}: {d['detail']}"],
                          group="xrc", check="XRC lifetime (rdma-probe xrc)", peer=peer)
        add_case(kernel_matrix, cell)
        assert not d["supported"], d
        assert d["errno"] in (EOPNOTSUPP, 38), d  # EOPNOTSUPP, or ENOSYS from older providers
        assert "not supported" in d["detail"], d




@pytest.mark.parametrize("device,address,initiator,responder,peer", [
    ("siw0", GUEST_SIW_ADDRESS, "ours-verbs@siw", "kernel-siw", VERBS_SIW),
    ("rxe0", GUEST_RXE_ADDRESSES[0], "ours-verbs@rxe", "kernel-rxe", VERBS_RXE),
], ids=["siw", "rxe"])
def test_xrc_pingpong(live_guest: Guest, kernel_matrix: InteropMatrix, device: str,
                      address: str, initiator: str, responder: str, peer: str) -> None:
    """rdma-core's ibv_xsrq_pingpong (XRC SRQs): skip with the reason when the device cannot
    open an XRC domain (EOPNOTSUPP); otherwise it must complete."""
    mark = live_guest.console_mark()
    server = live_guest.spawn(f"ibv_xsrq_pingpong -d {device} -g 1 -n 2")
    deadline = time.monotonic() + 10
    while not server.finished() and time.monotonic() < deadline:
        time.sleep(0.2)  # an XRC-capable device listens; one without fails at once
    cell = CaseResult(initiator=initiator, responder=responder, provider="verbs",
                      outcome=Outcome.FAIL, expected="ibv_xsrq_pingpong completes",
                      group="xrc", check="ibv_xsrq_pingpong", peer=peer)
    try:
        if server.finished():
            done = server.wait(timeout=5)
            client_rc, client_out = None, ""
        else:
            client = live_guest.run(f"ibv_xsrq_pingpong -d {device} -g 1 -n 2 {address}",
                                    timeout=60)
            client_rc, client_out = client.rc, client.output
            try:
                done = server.wait(timeout=15)
            except TimeoutError:
                server.kill()
                done = server.wait(timeout=5)
        attach_crashes(cell, peer_crashes(live_guest, mark))
        reason = f"{device}: ibv_xsrq_pingpong: {done.output.strip()}"
        if done.rc != 0 and f"XRC Domain {EOPNOTSUPP}" in done.output:
            cell.outcome = Outcome.SKIP
            cell.notes.append(f"{reason} (errno {EOPNOTSUPP} EOPNOTSUPP: the device has no XRC)")
            pytest.skip(cell.notes[-1])
        assert done.rc == 0 and client_rc == 0, (reason, client_out)
        cell.outcome = Outcome.PASS
    finally:
        add_case(kernel_matrix, cell)
