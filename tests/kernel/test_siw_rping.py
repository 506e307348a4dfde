"""Our tcp provider against the Linux kernel's siw, speaking rping's protocol, both roles.

ours-tcp -> kernel-siw: the guest runs ``rping -s`` and we connect as its client.
kernel-siw -> ours-tcp: we listen on the host and the guest runs ``rping -c``.

What siw does, from drivers/infiniband/sw/siw/siw_cm.c (6.1) and siw_main.c:
- It speaks MPA revision 2 with the RFC 6581 IRD/ORD words; its own ``peer_to_peer`` and
  ``mpa_crc_required``/``mpa_crc_strict`` are compile-time false, so as initiator it never
  asks for peer-to-peer nor CRC (and never retries in revision 1), and as responder it
  mirrors the C flag of the Request (siw_proc_mpareq copies the Request's bits).
- As responder to a peer-to-peer Request (siw_proc_mpareq) it picks a zero-length Write RTR
  when offered, else Read; with neither offered it still answers Write ("Sends would
  require pre-posting a Receive and are not supported").
- To a revision-1 Request it answers in revision 1 with no IRD/ORD, and its QP keeps
  ORD 0, so the rping server's RDMA Read is refused (siw_qp.c siw_activate_tx(): "We
  negotiated not to send READ req's", -EINVAL).
- As initiator it requires a revision-2 Reply with the enhanced flag (siw_proc_mpareply)
  and fails the connection otherwise.

Every case asserts the real outcome and adds a matrix cell (group "rping", row the variant,
column ours->siw or siw->ours); a kernel oops/BUG makes the cell a FINDING "crashed" with
its trace, and the guest is rebooted for the next case. A Send-only RTR offer that siw
answers with an RTR it was not offered is a FINDING (RFC 6581 s3), not an XFAIL.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome, SideError
from rdma_interop.provider import (
    ConnectionState,
    Crc,
    MpaPolicy,
    PeerToPeer,
    Provider,
    Rtr,
    open_provider,
)
from rdma_interop.wire import MpaEnhanced, MpaFrame, MpaKind

from tests.support.guest import (GUEST_SIW_ADDRESS, HOST_FROM_GUEST, SIW_FIRST_FPDU_DELAY_MS, Guest,
                                 GuestJob, KernelCrash)

from . import rping_peer
from .kernel_matrix import OURS_TO_SIW, SIW_TO_OURS, add_case, attach_crashes, peer_crashes
from .rping_peer import RpingError, RpingResult, frame_hex

PINGS = 2
SIZE = rping_peer.DEFAULT_SIZE
GUEST_PORT = 7001
#: A normal exchange takes well under a second; past this we look at the guest's socket,
#: before our side gives up and closes it.
STALL_S = 2.5
VERIFIED_NOTE = (f"rping -C {PINGS}: each ping {SIZE} octets RDMA Read by the server and "
                 f"RDMA Written back, sink == start verified on both sides")
DELAY_NOTE = (f"our initiator held its first FPDU {SIW_FIRST_FPDU_DELAY_MS} ms after siw's Reply "
              "(siw's first-FPDU race: see the evidence)")
DELAY_WHY = ("siw's passive side switches its socket to the QP only after sending the MPA "
             "Reply (siw_accept()), and an FPDU landing in between sits unread until the next "
             "segment; our initiator holds its first FPDU after the Reply "
             "(MpaPolicy.first_fpdu_delay_ms)")
CLOSE_BEFORE_RTR_NOTE = (
    "finding (kernel iw_cm): siw's passive side waits for the RTR with its iw_cm id in "
    "CONN_RECV (siw_accept() delivers ESTABLISHED only from siw_rtr_data_ready()); when the "
    "initiator's Terminate and close arrive instead, siw reports IW_CM_EVENT_CLOSE and "
    "cm_close_handler() hits BUG() for that state (iwcm.c:969): an initiator that fails or "
    "dies between the Reply and its RTR crashes the responder's kernel")


@dataclass(frozen=True)
class Case:
    """One variant: our policy, and what siw's code and the RFCs make of it."""

    label: str  # the matrix "provider" column: the variant
    policy: MpaPolicy
    # PASS: revision, crc, rtr of the connection. XFAIL: the failure name.
    revision: int = 2
    crc: bool = True
    rtr: Rtr | None = None
    xfail: str | None = None
    why: str = ""


def policy(*, revision: int = 2, crc: Crc = Crc.WANT, rtrs: set[Rtr] | None = None) -> MpaPolicy:
    """Our side: peer-to-peer (as initiator: asked for) exactly when `rtrs` is given. As
    initiator it holds its first FPDU after siw's Reply (guest.SIW_FIRST_FPDU_DELAY_MS)."""
    if rtrs is None:
        return MpaPolicy(revision=revision, crc=crc, peer_to_peer=PeerToPeer.OFF,
                         first_fpdu_delay_ms=SIW_FIRST_FPDU_DELAY_MS)
    return MpaPolicy(revision=revision, crc=crc, peer_to_peer=PeerToPeer.ON,
                     rtr_offer=frozenset(rtrs), first_fpdu_delay_ms=SIW_FIRST_FPDU_DELAY_MS)


CLIENT_CASES = [
    Case("tcp rev2 crc", policy(), why="siw mirrors the C flag it is asked for"),
    Case("tcp rev2 no-crc", policy(crc=Crc.REFUSE), crc=False,
         why="siw asks for CRC only with mpa_crc_required (off)"),
    Case("tcp rev2 rtr=write crc", policy(rtrs={Rtr.WRITE}), rtr=Rtr.WRITE),
    Case("tcp rev2 rtr=write no-crc", policy(crc=Crc.REFUSE, rtrs={Rtr.WRITE}), crc=False,
         rtr=Rtr.WRITE),
    Case("tcp rev2 rtr=read crc", policy(rtrs={Rtr.READ}),
         rtr=Rtr.READ),
    Case("tcp rev2 rtr=write,read crc", policy(rtrs={Rtr.WRITE, Rtr.READ}), rtr=Rtr.WRITE,
         why="siw prefers Write when both are offered"),
    Case("tcp rev2 rtr=send crc", policy(rtrs={Rtr.SEND}), rtr=Rtr.SEND, xfail="no_matching_rtr",
         why="RFC 6581 s3: no RTR type in common; our initiator sends a Terminate "
             "(LLP, MPA, 0x07 no matching RTR option)"),
    Case("tcp rev1 crc", policy(revision=1), revision=1, xfail="rdma_read_refused",
         why="revision 1 carries no IRD/ORD (RFC 5044 s7.1); siw's QP keeps ORD 0 and "
             "refuses the rping server's RDMA Read"),
]

SERVER_CASES = [
    Case("tcp rev2 crc", policy(), why="our Reply sets C: CRC both ways (RFC 5044 s7.1)"),
    Case("tcp rev2 crc=optional", policy(crc=Crc.OPTIONAL), crc=False,
         why="neither side asks for CRC"),
    Case("tcp rev2 no-crc", policy(crc=Crc.REFUSE), crc=False,
         why="siw never asks for CRC, so refusing it costs nothing"),
    Case("tcp rev2 rtr=send crc", policy(rtrs={Rtr.SEND}),
         why="siw never asks for peer-to-peer, so our Send-only RTR offer never comes "
             "into play"),
    Case("tcp rev1 crc", policy(revision=1), revision=1, xfail="revision_unsupported",
         why="siw's revision-2 Request gets our revision-1 Reply; siw requires a "
             "revision-2 enhanced Reply and does not retry in revision 1"),
]


def case_id(case: Case) -> str:
    """A -k friendly id: "tcp rev2 rtr=write,read crc" -> "rev2-rtr-write_read-crc"."""
    return case.label.removeprefix("tcp ").replace(" ", "-").replace("=", "-").replace(",", "_")


@pytest.fixture(scope="module")
def provider() -> Provider:
    return open_provider("tcp")


# ---- guest helpers ---------------------------------------------------------------------


def wait_listening(guest: Guest, port: int, job: GuestJob, timeout: float = 20.0) -> None:
    """Until the guest has a TCP listener on `port` (rping -s prints nothing then)."""
    deadline = time.monotonic() + timeout
    while guest.run(f"ss -Hltn 'sport = :{port}' | grep -q LISTEN", timeout=30).rc != 0:
        if job.finished() or time.monotonic() > deadline:
            raise AssertionError(f"rping -s is not listening on {port}: {job.output()}")
        time.sleep(0.1)


def siw_socket_queues(guest: Guest, port: int) -> str:
    """`ss` lines for the guest's connections on `port`: Recv-Q shows unread octets."""
    return guest.run(f"ss -Htn 'sport = :{port}'", timeout=30).output.strip()


def rping_output_ok(output: str, role: str, pings: int, size: int) -> list[str]:
    """What is wrong with the kernel rping's own report of the data (-v prints it)."""
    prefix = "server ping data: " if role == "server" else "ping data: "
    problems = []
    for i in range(pings):
        text = rping_peer.rping_start_buffer(i, size)[:-1].decode()
        if f"{prefix}{text}\n" not in output:
            problems.append(f"rping did not print {prefix}{text[:24]}...")
    return problems


#: Debian 12's rping (rdma-core 44) destroys its event channel while its CM thread still
#: waits in rdma_get_cm_event(), which then fails and exit()s 255 after a good exchange
#: (newer rping.c stops the thread through an eventfd first). Not the kernel's doing.
RPING_TEARDOWN = "rdma_get_cm_event: Bad file descriptor"
RPING_TEARDOWN_NOTE = ("rping exited 255 after the exchange: its CM thread's rdma_get_cm_event() "
                       "hit the event channel rping's main thread had just destroyed (rping "
                       "teardown race in rdma-core 44, not a kernel result)")


def rping_exit_ok(rc: int | None, output: str, notes: list[str]) -> bool:
    """rping's exit status said success, or only its own teardown race failed it."""
    if rc == 0:
        return True
    if rc is not None and RPING_TEARDOWN in output:
        notes.append(RPING_TEARDOWN_NOTE)
        return True
    return False


def kernel_error(output: str) -> SideError:
    last = [ln for ln in output.strip().splitlines() if ln.strip()]
    return SideError(kind="rping", detail=" | ".join(last[-3:]) or "no output")


# ---- ours-tcp -> kernel-siw (rping -s in the guest) ------------------------------------


@dataclass
class ClientRun:
    result: RpingResult | None = None
    error: RpingError | None = None
    stalled: str | None = None  # `ss` output when the exchange hung, then failed
    rping_rc: int | None = None
    rping_output: str = ""
    crashes: list[KernelCrash] = field(default_factory=list)


def run_client_once(guest: Guest, provider: Provider, case: Case) -> ClientRun:
    job = guest.spawn(f"rping -s -a {GUEST_SIW_ADDRESS} -p {GUEST_PORT} -v -C {PINGS}")
    wait_listening(guest, GUEST_PORT, job)
    mark = guest.console_mark()
    run = ClientRun()

    def client() -> None:
        try:
            run.result = rping_peer.run_client(
                provider, f"tcp://127.0.0.1:{guest.host_port(GUEST_PORT)}", case.policy,
                count=PINGS, size=SIZE, timeout_s=15)
        except RpingError as e:
            run.error = e

    worker = threading.Thread(target=client, name="rping-client")
    worker.start()
    worker.join(STALL_S)
    if worker.is_alive():
        snapshot = siw_socket_queues(guest, GUEST_PORT)
        worker.join()
        if run.result is None:  # slow but successful is not a stall
            run.stalled = snapshot
    # rping ends by itself after an exchange, or when we close; after a failed setup or a
    # stall siw may never tell it (see CLOSE_BEFORE_RTR_NOTE), so do not wait long then.
    setup_failed = run.error is not None and run.error.connect_error is not None
    try:
        done = job.wait(timeout=3 if setup_failed or run.stalled else 10)
        run.rping_rc, run.rping_output = done.rc, done.output
    except TimeoutError:
        run.rping_output = job.output()
        job.kill()
    run.crashes = peer_crashes(guest, mark)
    return run


@pytest.mark.parametrize("case", CLIENT_CASES, ids=case_id)
def test_ours_tcp_to_kernel_siw_rping_server(live_guest: Guest, provider: Provider,
                                             kernel_matrix: InteropMatrix, case: Case) -> None:
    started = time.monotonic()
    run = run_client_once(live_guest, provider, case)
    cell = CaseResult(initiator="ours-tcp", responder="kernel-siw", provider="tcp",
                      outcome=Outcome.FAIL, expected=case.why or None, group="rping",
                      check=case.label.removeprefix("tcp "), peer=OURS_TO_SIW)
    attach_crashes(cell, run.crashes)
    if run.stalled is not None:
        cell.notes.append("exchange stalled (siw's socket in the evidence)")
        cell.evidence.append(Evidence("log", "siw's socket (ss)", run.stalled))
    if run.rping_output:
        cell.evidence.append(Evidence("log", f"rping -s (exit {run.rping_rc})", run.rping_output))
    try:
        if case.xfail == "no_matching_rtr":
            check_send_only_offer(case, run, cell)
        elif case.xfail == "rdma_read_refused":
            check_rev1_read_refused(case, run, cell)
        else:
            check_client_pass(case, run, cell)
    finally:
        cell.elapsed_ms = (time.monotonic() - started) * 1000
        add_case(kernel_matrix, cell)


def check_client_pass(case: Case, run: ClientRun, cell: CaseResult) -> None:
    assert run.stalled is None, f"exchange stalled; guest socket: {run.stalled}"
    if run.error is not None:
        cell.reason = run.error.step
        cell.initiator_error = SideError(kind=run.error.step, detail=run.error.detail)
        cell.responder_error = kernel_error(run.rping_output)
        pytest.fail(f"{run.error}; rping: {run.rping_output}")
    assert run.result is not None
    r = run.result
    cell.negotiated = r.negotiated
    cell.responder_negotiated = r.peer_negotiated
    got = (r.info.params.revision, r.info.params.crc, r.info.params.rtr)
    assert got == (case.revision, case.crc, case.rtr), (
        f"negotiated {got}; sent {frame_hex(r.info.sent_frame)} "
        f"received {frame_hex(r.info.received_frame)}")
    cell.evidence += [Evidence.frame("our MPA Request", r.info.sent_frame.encode()),
                      Evidence.frame("kernel siw's MPA Reply", r.info.received_frame.encode())]
    assert r.bytes_verified == PINGS * SIZE
    problems = rping_output_ok(run.rping_output, "server", PINGS, SIZE)
    assert not problems, (problems, run.rping_output)
    assert rping_exit_ok(run.rping_rc, run.rping_output, cell.notes), (
        run.rping_rc, run.rping_output)
    cell.outcome = Outcome.PASS
    cell.notes.append(VERIFIED_NOTE)
    if r.first_fpdu_delay_ms:
        cell.notes.append(DELAY_NOTE)
        cell.evidence.append(Evidence("text", "siw's first-FPDU race", DELAY_WHY))


def check_send_only_offer(case: Case, run: ClientRun, cell: CaseResult) -> None:
    """RFC 6581 s3: the responder picks one of the RTR types the initiator offered. siw
    answers a Send-only offer with a Write RTR; our initiator fails no_matching_rtr and
    sends the Terminate RFC 6581 defines for it."""
    assert run.error is not None and run.error.connect_error is not None, run
    err = run.error.connect_error
    cell.initiator_error = SideError(failure=err.failure, kind=err.kind, detail=err.detail,
                                     terminate=None if err.terminate is None else {
                                         "layer": int(err.terminate.layer),
                                         "etype": err.terminate.etype,
                                         "code": err.terminate.code})
    cell.responder_error = kernel_error(run.rping_output)
    assert err.failure == "no_matching_rtr", err
    reply = err.peer_frame
    assert reply is not None and reply.peer_to_peer, reply
    request = MpaFrame(kind=MpaKind.REQUEST, crc=True, revision=2, enhanced=MpaEnhanced(
        peer_to_peer=True, rtr_send=True, ird=case.policy.ird, ord=case.policy.ord))
    cell.negotiated = None
    cell.responder_negotiated = rping_peer.frame_view(reply, request)
    cell.evidence += [Evidence.frame("our MPA Request (Send RTR only)", request.encode()),
                      Evidence.frame("kernel siw's MPA Reply", reply.encode())]
    cell.outcome = Outcome.XFAIL
    cell.expected_failure = "no_matching_rtr"
    if reply.rtr_write or reply.rtr_read:
        # The responder chose an RTR we did not offer: the initiator's Terminate carries
        # MPA error code 0x07 (RFC 6581 s3), layer LLP (2), error type MPA (0). Our side did
        # what the standard requires; siw did not: a finding, not an expected failure.
        assert err.terminate == (2, 0, 0x07), err.terminate
        cell.outcome = Outcome.FINDING
        cell.reason = "deviation"
        cell.notes.append(
            f"siw answers a Send-only RTR offer with a {'Write' if reply.rtr_write else 'Read'} "
            "RTR it was not offered (RFC 6581 s3 requires failing with 'no matching RTR "
            "option'; siw_proc_mpareq: 'Propose zero length Write if none of Read and Write "
            "is indicated'); our initiator fails no_matching_rtr and Terminates (2/0/0x07)")
    if any(e.kind == "crash" for e in cell.evidence):
        cell.notes.append("the kernel's iw_cm BUG()s when the initiator closes before its RTR "
                          "(see the evidence: why)")
        cell.evidence.append(Evidence("text", "why the kernel crashes", CLOSE_BEFORE_RTR_NOTE))


def check_rev1_read_refused(case: Case, run: ClientRun, cell: CaseResult) -> None:
    """Revision 1 connects; the rping server's RDMA Read is refused by siw (ORD 0), it
    closes, and our client sees the connection end before the first go-ahead."""
    assert run.stalled is None, f"exchange stalled; guest socket: {run.stalled}"
    assert run.error is not None, "rping completed over MPA revision 1 against siw"
    err = run.error
    assert err.connect_error is None, f"revision 1 did not connect: {err}"
    assert err.info is not None and err.info.params.revision == 1, err.info
    cell.negotiated = err.info.params.to_json()
    cell.responder_negotiated = rping_peer.frame_view(err.info.received_frame,
                                                      err.info.sent_frame)
    cell.initiator_error = SideError(kind=err.step, detail=err.detail)
    cell.responder_error = kernel_error(run.rping_output)
    cell.evidence += [Evidence.frame("our MPA Request", err.info.sent_frame.encode()),
                      Evidence.frame("kernel siw's MPA Reply", err.info.received_frame.encode())]
    assert err.iteration == 0 and "after the server's RDMA Read" in err.step, err
    assert err.state is not ConnectionState.CONNECTED, err
    assert "post send error" in run.rping_output and run.rping_rc != 0, run.rping_output
    cell.notes.append(
        "revision 1: the siw passive side keeps IRD/ORD 0 (no RFC 6581 words to set them, "
        "rdma_accept takes the request's 0/0), so the rping server's RDMA Read fails to post "
        "(-EINVAL, 'We negotiated not to send READ req's')")
    cell.outcome = Outcome.XFAIL
    cell.expected_failure = "rdma_read_refused"


# ---- kernel-siw -> ours-tcp (rping -c in the guest) ------------------------------------


@pytest.mark.parametrize("case", SERVER_CASES, ids=case_id)
def test_kernel_siw_rping_client_to_ours_tcp(live_guest: Guest, provider: Provider,
                                             kernel_matrix: InteropMatrix, case: Case) -> None:
    started = time.monotonic()
    cell = CaseResult(initiator="kernel-siw", responder="ours-tcp", provider="tcp",
                      outcome=Outcome.FAIL, expected=case.why or None, group="rping",
                      check=case.label.removeprefix("tcp "), peer=SIW_TO_OURS)
    mark = live_guest.console_mark()
    result: RpingResult | None = None
    error: RpingError | None = None
    try:
        with provider.listen("tcp://127.0.0.1:0", case.policy) as listener:
            port = int(listener.local_address.rsplit(":", 1)[1])
            job = live_guest.spawn(f"rping -c -a {HOST_FROM_GUEST} -p {port} -v -V -C {PINGS}")
            try:
                result = rping_peer.serve_one(listener, count=PINGS, timeout_s=15)
            except RpingError as e:
                error = e
            try:
                done = job.wait(timeout=15)
                rc, output = done.rc, done.output
            except TimeoutError:
                rc, output = None, job.output()
                job.kill()
        attach_crashes(cell, peer_crashes(live_guest, mark))
        if output:
            cell.evidence.append(Evidence("log", f"rping -c (exit {rc})", output))
        if case.xfail == "revision_unsupported":
            check_server_rev1(result, error, rc, output, cell)
        else:
            check_server_pass(case, result, error, rc, output, cell)
    finally:
        cell.elapsed_ms = (time.monotonic() - started) * 1000
        add_case(kernel_matrix, cell)


def check_server_pass(case: Case, result: RpingResult | None, error: RpingError | None,
                      rc: int | None, output: str, cell: CaseResult) -> None:
    if error is not None:
        cell.reason = error.step
        cell.responder_error = SideError(kind=error.step, detail=error.detail)
        cell.initiator_error = kernel_error(output)
        pytest.fail(f"{error}; rping -c: {output}")
    assert result is not None
    cell.negotiated = result.peer_negotiated  # the initiator is the kernel
    cell.responder_negotiated = result.negotiated
    p = result.info.params
    cell.evidence += [
        Evidence.frame("kernel siw's MPA Request", result.info.received_frame.encode()),
        Evidence.frame("our MPA Reply", result.info.sent_frame.encode())]
    assert (p.revision, p.crc, p.rtr, p.peer_to_peer) == (case.revision, case.crc, None, False)
    request = result.info.received_frame
    assert request.enhanced is not None and not request.peer_to_peer and not request.crc, (
        f"siw's Request changed: {request.encode().hex()}")
    assert result.bytes_verified == PINGS * SIZE
    problems = rping_output_ok(output, "client", PINGS, SIZE)
    assert not problems, (problems, output)
    assert rping_exit_ok(rc, output, cell.notes), (rc, output)
    cell.outcome = Outcome.PASS
    cell.notes.append(VERIFIED_NOTE)


def check_server_rev1(result: RpingResult | None, error: RpingError | None,
                      rc: int | None, output: str, cell: CaseResult) -> None:
    """We accept in revision 1; siw's initiator refuses the Reply and closes."""
    assert result is None, "rping -c completed against a revision-1 Reply"
    assert error is not None and error.connect_error is None, error
    assert error.info is not None and error.info.params.revision == 1
    cell.responder_negotiated = error.info.params.to_json()
    cell.negotiated = rping_peer.frame_view(error.info.received_frame, error.info.sent_frame)
    cell.responder_error = SideError(kind=error.step, detail=error.detail)
    cell.initiator_error = SideError(failure="revision_unsupported", kind="rping",
                                     detail=kernel_error(output).detail)
    cell.evidence += [
        Evidence.frame("kernel siw's MPA Request", error.info.received_frame.encode()),
        Evidence.frame("our MPA Reply", error.info.sent_frame.encode())]
    assert error.iteration == 0 and error.step == "recv start advertisement", error
    assert rc not in (None, 0) and "RDMA_CM_EVENT_REJECTED" in output, (rc, output)
    cell.notes.append(
        "siw (siw_proc_mpareply) requires a revision-2 Reply with the enhanced flag to its "
        "enhanced Request and ends the connection (-ECONNRESET)")
    cell.outcome = Outcome.XFAIL
    cell.expected_failure = "revision_unsupported"
