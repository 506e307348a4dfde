"""Our verbs provider on the guest's kernel siw against our tcp provider on the host, both
roles, running rdma-probe's interop exchange (Send, RDMA Write, RDMA Read, verified).

ours-tcp -> ours-verbs@siw: guest ``rdma-probe serve --listen verbs://10.0.2.15:7002``,
host ``rdma-probe connect tcp://127.0.0.1:<host_port(7002)>``.
ours-verbs@siw -> ours-tcp: host ``rdma-probe serve --listen tcp://127.0.0.1:0``, guest
``rdma-probe connect verbs://10.0.2.2:<port>``.

The guest runs the same rdma-probe binary as the host, from the read-only /host share:
$RDMA_INTEROP_BUILD (default build/) must lie inside the repository. With the verbs
provider's sources in the tree, a binary that has no verbs provider is a failure, with
rdma-probe's own message, not a skip.
"""

from __future__ import annotations

import json
import select
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome, SideError

from tests.support.guest import (GUEST_SIW_ADDRESS, HOST_FROM_GUEST, SIW_FIRST_FPDU_DELAY_MS, Guest,
                                 GuestJob, KernelCrash, guest_path, json_lines)
from tests.support.paths import REPO_ROOT, build_dir
from tests.support.tools import built_tool

from .kernel_matrix import OURS_TO_SIW, SIW_TO_OURS, add_case, attach_crashes, peer_crashes

GUEST_PORT = 7002
#: The personality both rdma-probes act as. The verbs side's MPA is kernel siw's own
#: (rdma_cm drives it); the personality sets what the provider can: IRD/ORD, private data.
PERSONALITY = "siw"
TIMEOUT_S = 40.0
#: A normal exchange takes about a second; past this we look for siw's first-FPDU race.
STALL_S = 3.0
VERBS_SOURCES = REPO_ROOT / "core" / "transport" / "verbs"
NO_VERBS = "no provider for scheme 'verbs'"
#: The guest cannot see the directories compiled into the binary; it reads the tree's.
GUEST_PERSONALITIES = "--personality-dir /host/tools/personalities"


def host_probe() -> Path:
    return built_tool("rdma-probe")


def guest_probe() -> str:
    """The host's rdma-probe as the guest sees it through the /host share."""
    return guest_path(host_probe())


def fail_unless_verbs(output: str, who: str) -> None:
    """A probe that says it has no verbs provider fails the test once the provider exists."""
    if NO_VERBS in output:
        line = next(ln for ln in output.splitlines() if NO_VERBS in ln)
        if VERBS_SOURCES.is_dir():
            pytest.fail(f"{who}: {line.strip()} (core/transport/verbs is in the tree: build "
                        f"it into {build_dir()})")
        pytest.skip(f"{who}: {line.strip()} (the verbs provider has not landed)")


def side_error(report: dict[str, Any] | None, fallback: str) -> SideError | None:
    if report is None:
        return SideError(kind="no-report", detail=fallback[-300:])
    if report.get("ok"):
        return None
    return SideError.from_json(report.get("error")) or SideError(kind="exchange", detail=str(
        report.get("exchange")))


def wait_guest_listening(job: GuestJob, timeout: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        out = job.output()
        for event in json_lines(out):
            if event.get("event") == "listening":
                return event
        if job.finished():
            fail_unless_verbs(out, "guest rdma-probe serve")
            pytest.fail(f"guest rdma-probe serve exited without listening: {out}")
        if time.monotonic() > deadline:
            pytest.fail(f"guest rdma-probe serve not listening after {timeout} s: {out}")
        time.sleep(0.2)


#: siw_qp_tx.c siw_qp_sq_proc_tx() (Linux 6.1): after a DDP segment went out it tests
#: tx_suspend (set when the peer half-closes) before DDP_FLAG_LAST, so the last segment of a
#: message that was wholly handed to TCP fails the WQE with -ECONNABORTED, completed as
#: IBV_WC_LOC_QP_OP_ERR. Our tcp initiator closes as soon as the responder's final "verified"
#: Send arrives; when that FIN is processed before siw's sending thread leaves the function,
#: siw fails a Send its peer has received.
SIW_LAST_SEGMENT_NOTE = (
    "siw completed the responder's final Send with IBV_WC_LOC_QP_OP_ERR although our "
    "initiator received it (why: in the evidence)")
SIW_LAST_SEGMENT_WHY = (
    "the responder's final Send (\"verified\", received and acted on by our "
    "initiator) completed with IBV_WC_LOC_QP_OP_ERR: siw_qp_sq_proc_tx() checks tx_suspend "
    "(set by siw_cm_llp_state_change() on the peer's FIN, TCP_CLOSE_WAIT) before "
    "DDP_FLAG_LAST after a segment went out, so a message wholly handed to TCP fails when "
    "the FIN is processed in between")


def siw_failed_delivered_send(connect: dict[str, Any], served: dict[str, Any]) -> bool:
    """The initiator completed and verified everything, and the responder's one failure is
    siw's completion error on its last Send (the one the initiator waited for)."""
    if not connect.get("ok") or served.get("ok") or not served.get("exchange"):
        return False
    steps = served["exchange"]["steps"]
    failed = [s for s in steps if not s.get("ok")]
    return (len(failed) == 1 and failed[0] is steps[-1] and failed[0]["name"] == "verified"
            and "local_qp_operation_error" in failed[0].get("detail", "")
            and any(s["name"] == "await_verified" and s["ok"]
                    for s in connect["exchange"]["steps"]))


def record(matrix: InteropMatrix, initiator: str, responder: str,
           connect: dict[str, Any] | None, served: dict[str, Any] | None,
           connect_text: str, serve_text: str, notes: list[str], started: float,
           crashes: list[KernelCrash], peer: str) -> CaseResult:
    """The cell from both sides' reports: PASS when both say ok with the same verified
    byte count; FINDING when siw failed a Send our side received; FAIL (with both errors)
    otherwise; a kernel crash makes it a FINDING "crashed"."""
    cell = CaseResult(initiator=initiator, responder=responder, provider="verbs",
                      outcome=Outcome.FAIL, notes=notes,
                      expected="connect, Send/Write/Read exchange verified on both sides",
                      group="rdma-probe", check="rdma-probe exchange", peer=peer)
    attach_crashes(cell, crashes)
    for who, text in (("rdma-probe connect", connect_text), ("rdma-probe serve", serve_text)):
        if text.strip():
            cell.evidence.append(Evidence("log", who, text))
    cell.negotiated = (connect or {}).get("negotiated")
    cell.responder_negotiated = (served or {}).get("negotiated")
    cell.initiator_error = side_error(connect, connect_text)
    cell.responder_error = side_error(served, serve_text)
    both_ok = bool(connect and connect.get("ok") and served and served.get("ok"))
    if connect and served and siw_failed_delivered_send(connect, served):
        cell.outcome = Outcome.FINDING
        cell.reason = "deviation"
        cell.notes.append(SIW_LAST_SEGMENT_NOTE)
        cell.evidence.append(Evidence("text", "why siw fails a delivered Send",
                                      SIW_LAST_SEGMENT_WHY))
        cell.notes.append(f"rdma-probe exchange: {connect['exchange']['bytes_verified']} octets "
                          "verified by the initiator; the responder verified everything it "
                          "received (its steps before the final Send all ok)")
    elif both_ok:
        sent = connect["exchange"]["bytes_verified"]  # type: ignore[index]
        got = served["exchange"]["bytes_verified"]  # type: ignore[index]
        if sent == got and sent > 0:
            cell.outcome = Outcome.PASS
            cell.notes.append(f"rdma-probe exchange: {sent} octets verified by each side")
        else:
            cell.mismatches.append(f"bytes verified: initiator {sent}, responder {got}")
    cell.elapsed_ms = (time.monotonic() - started) * 1000
    add_case(matrix, cell)
    return cell


@dataclass
class TcpToVerbsRun:
    connect: dict[str, Any] | None = None
    served: dict[str, Any] | None = None
    connect_text: str = ""
    serve_text: str = ""
    stalled: str | None = None  # the guest socket's `ss` line when siw left our FPDU unread


def unread_octets(ss_line: str) -> int:
    """Recv-Q of an `ss -Htn` line ("ESTAB 296 0 10.0.2.15:7002 ..."), 0 if none."""
    fields = ss_line.split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0


def run_tcp_to_verbs_once(guest: Guest) -> TcpToVerbsRun:
    """One exchange; when it has not finished after STALL_S and siw's socket holds unread
    octets, both probes are stopped and the stall is reported instead of waited out."""
    run = TcpToVerbsRun()
    job = guest.spawn(
        f"{guest_probe()} serve --json --listen verbs://{GUEST_SIW_ADDRESS}:{GUEST_PORT} "
        f"--personality {PERSONALITY} {GUEST_PERSONALITIES} --once "
        f"--exchange-timeout {TIMEOUT_S / 2:g} --idle-timeout {TIMEOUT_S / 2:g}")
    try:
        wait_guest_listening(job)
        connect = subprocess.Popen(
            [str(host_probe()), "connect", f"tcp://127.0.0.1:{guest.host_port(GUEST_PORT)}",
             "--personality", PERSONALITY, "--json", "--timeout", f"{TIMEOUT_S / 2:g}",
             "--first-fpdu-delay", str(SIW_FIRST_FPDU_DELAY_MS)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            run.connect_text, _ = connect.communicate(timeout=STALL_S)
        except subprocess.TimeoutExpired:
            queues = guest.run(f"ss -Htn 'sport = :{GUEST_PORT}'", timeout=30).output.strip()
            time.sleep(0.5)  # data in flight is read within that; an orphaned FPDU is not
            again = guest.run(f"ss -Htn 'sport = :{GUEST_PORT}'", timeout=30).output.strip()
            if unread_octets(queues) > 0 and unread_octets(again) == unread_octets(queues):
                run.stalled = again
                connect.kill()
            run.connect_text, _ = connect.communicate(timeout=TIMEOUT_S)
        reports = [r for r in json_lines(run.connect_text) if r.get("schema")]
        run.connect = reports[-1] if reports else None
        try:
            run.serve_text = job.wait(timeout=5 if run.stalled else TIMEOUT_S).output
        except TimeoutError:
            run.serve_text = job.output()
        run.served = next((e for e in json_lines(run.serve_text)
                           if e.get("event") == "connection"), None)
    finally:
        job.kill()
    return run


def test_ours_tcp_to_ours_verbs_on_siw(live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    started = time.monotonic()
    mark = live_guest.console_mark()
    run = run_tcp_to_verbs_once(live_guest)
    notes = [f"our tcp initiator held its first FPDU {SIW_FIRST_FPDU_DELAY_MS} ms after siw's "
             "Reply (rdma-probe connect --first-fpdu-delay): siw's first-FPDU race"]
    if run.stalled is not None:
        notes.append(f"siw left our first FPDU unread despite the delay; its socket (ss): "
                     f"{run.stalled!r}")
    cell = record(kernel_matrix, "ours-tcp", "ours-verbs@siw", run.connect, run.served,
                  run.connect_text, run.serve_text, notes, started,
                  peer_crashes(live_guest, mark), OURS_TO_SIW)
    assert run.stalled is None, f"siw left our first FPDU unread: {run.stalled}"
    # A FINDING is siw's (a delivered Send it failed, or a crash), not a failure of ours.
    assert cell.outcome in (Outcome.PASS, Outcome.FINDING), (
        f"connect: {run.connect_text.strip()}\nguest serve: {run.serve_text}")


def test_ours_verbs_on_siw_to_ours_tcp(live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    started = time.monotonic()
    mark = live_guest.console_mark()
    serve = subprocess.Popen(
        [str(host_probe()), "serve", "--json", "--listen", "tcp://127.0.0.1:0", "--personality",
         PERSONALITY, "--once", "--exchange-timeout", f"{TIMEOUT_S / 2:g}",
         "--idle-timeout", f"{TIMEOUT_S / 2:g}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert serve.stdout is not None
        ready, _, _ = select.select([serve.stdout], [], [], 10)
        listening = json.loads(serve.stdout.readline()) if ready else {}
        assert listening.get("event") == "listening", listening or "host serve did not start"
        port = int(str(listening["address"]).rsplit(":", 1)[1])
        result = live_guest.run(
            f"{guest_probe()} connect {shlex.quote(f'verbs://{HOST_FROM_GUEST}:{port}')} "
            f"--personality {PERSONALITY} {GUEST_PERSONALITIES} --json "
            f"--timeout {TIMEOUT_S / 2:g}",
            timeout=TIMEOUT_S)
        fail_unless_verbs(result.output, "guest rdma-probe connect")
        reports = [r for r in json_lines(result.output) if r.get("schema")]
        connect = reports[-1] if reports else None
        if connect is None:  # the guest never got as far as connecting
            serve.terminate()
        try:
            serve_out, serve_err = serve.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve_out, serve_err = serve.communicate()
        served = next((e for e in json_lines(serve_out) if e.get("event") == "connection"), None)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    cell = record(kernel_matrix, "ours-verbs@siw", "ours-tcp", connect, served, result.output,
                  serve_out + serve_err, [], started, peer_crashes(live_guest, mark),
                  SIW_TO_OURS)
    assert cell.outcome in (Outcome.PASS, Outcome.FINDING), (
        f"guest connect (exit {result.rc}): {result.output.strip()}\nhost serve: {serve_out}"
        f"{serve_err}")
