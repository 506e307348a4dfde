"""Fault cases against the Linux kernel's siw as responder: our initiator misbehaves at
every step, and every Terminate the kernel sends is checked field by field.

The responder is rdma-core's ``rping -s`` on siw0 in the guest, reached through
127.0.0.1:guest.host_port(7001). The initiator is tests/kernel/fault_client.py, a raw-socket
iWARP peer with the personality our rping client uses (MPA revision 2, IRD/ORD 16/16, CRC),
asking for peer-to-peer with a zero-length Write RTR so that there is an RTR step.

rping's server posts one 16-octet receive, reads our advertised buffer with an RDMA Read
once our first Send arrives (its Read Request carries its own valid sink STag and TO: its
``rdma_buf``, RPING_SIZE octets with remote read and write access), sends a go-ahead, and
re-posts its receive. The "later" cases first run that much of a ping correctly (the
"data phase"), then misbehave; the "after RTR" cases put the fault in the same TCP
segment as the RTR.

Each case is one matrix cell, row ``<case>`` of group "faults", column ``ours->siw``:

- PASS: the kernel answered as RFC 5040/5041/5044 (and 6581) require (terminate_check.RULES).
- FINDING deviation: it answered otherwise; the notes say how many fields and why, the
  evidence holds each deviation and the octets (what we sent, the kernel's Terminate, the
  Terminate the RFCs require).
- FINDING crashed: the guest kernel hit an oops/BUG/panic (its trace is the evidence); the
  guest is rebooted for the next case.

The pytest test passes in all three: a deviation or a crash is a finding about the kernel,
not a broken test. It fails only when the case could not be run or observed: rping did not
start, the exchange before the fault did not happen (no Reply, no Read Request), or after
the fault nothing came back, neither an FPDU nor the end of the stream, within OBSERVE_S
(a stream left open that long is indistinguishable from a lost forward or a wedged guest,
so it is not reported as a kernel finding; the cell then says FAIL no-answer).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome
from rdma_interop.wire import MpaFrame, MpaKind, ReadRequest

from tests.support.guest import GUEST_SIW_ADDRESS, Guest, GuestError, GuestJob, KernelCrash

from .fault_client import (
    OUR_SOURCE,
    RDMA_INFO,
    RPING_SIZE,
    FaultClient,
    FaultClientError,
    ReadRequestSeen,
    RequestOptions,
    answer_read,
    start_ping,
)
from .kernel_matrix import OURS_TO_SIW, add_case, attach_crashes
from .terminate_check import RULES, Verdict, judge

GUEST_PORT = 7001
#: How long we wait for the kernel's answer to a fault (TCG guest on a shared host).
OBSERVE_S = 10.0
#: After a Terminate, how long we keep reading for what follows it and for the close.
LINGER_S = 2.0
#: After the answer, how long a kernel crash report may take to reach the console.
CRASH_GRACE_S = 1.5
#: Our initiator (fault_client.RequestOptions defaults): siw-like revision 2, IRD/ORD 16.
OPTIONS = RequestOptions()
#: A sink of ours for the Read Requests we send: never used, the reads fail first.
OUR_SINK = (0x0000_2000, 0x0012_3400)  # (TO, STag)
#: Where a truncated FPDU stops: its MPA length, the 18-octet DDP header, 4 of 16 payload
#: octets. The length field says 16 more octets and a CRC follow; a FIN comes instead.
TRUNCATE_AT = 2 + 18 + 4


#: Why siw's kernel crashes when an error comes with the RTR (read in Linux 6.1.192's
#: drivers/infiniband/sw/siw/siw_cm.c and drivers/infiniband/core/iwcm.c).
IWCM_CLOSE_BUG_WHY = (
    "why the kernel crashes (from the 6.1 sources): in peer-to-peer mode siw_accept() leaves "
    "the socket to siw_rtr_data_ready(), which reads the RTR and whatever follows it in the "
    "same call; the bad FPDU makes siw_tcp_rx_data() call siw_qp_cm_drop(), so "
    "IW_CM_EVENT_ESTABLISHED is never sent but SIW_CM_WORK_CLOSE_LLP is queued, and its "
    "IW_CM_EVENT_CLOSE reaches iw_cm while the cm_id is still IW_CM_STATE_CONN_RECV: "
    "cm_close_handler() BUG()s. Any initiator that follows its RTR with a bad FPDU brings "
    "the responder's kernel down")


def invalid_stag(valid: int) -> int:
    """An STag siw has not registered: `valid` with the top bit of its 24-bit index flipped
    (siw_mem.c: STag = index << 8; indices are allocated cyclically from a random start,
    and rping registers three regions)."""
    return valid ^ 0x8000_0000


def sink_advertisement() -> bytes:
    """rping's second Send: the client's sink buffer for the server's RDMA Write."""
    return RDMA_INFO.pack(0x0000_3000, 0x00AB_CE00, RPING_SIZE)


def start_advertisement() -> bytes:
    to, stag = OUR_SOURCE
    return RDMA_INFO.pack(to, stag, RPING_SIZE)


@dataclass
class Injected:
    """What a case did: the fault's rule, the offending ULPDU and where it was sent."""

    rule: str
    offending: bytes = b""
    read_request: ReadRequestSeen | None = None
    notes: list[str] = field(default_factory=list)


# ---- the steps before a fault ----------------------------------------------------------


def data_phase(c: FaultClient) -> ReadRequestSeen:
    """Handshake with RTR, then one ping up to the server's go-ahead: our start
    advertisement, its RDMA Read (answered with rping's data), its go-ahead Send."""
    c.handshake(OPTIONS)
    rr = start_ping(c)
    answer_read(c, rr)
    return rr


def rtr_then(c: FaultClient, *fpdus: bytes) -> None:
    """The RTR and `fpdus` in one TCP segment, right after the Reply (and settle)."""
    c.send_raw(c.fpdu(c.rtr_ulpdu()) + b"".join(fpdus))


# ---- the faults ------------------------------------------------------------------------


def close_before_rtr(c: FaultClient) -> Injected:
    c.handshake(OPTIONS, send_rtr=False)
    c.shutdown_write()
    return Injected("close_before_rtr")


def bad_crc_after_rtr(c: FaultClient) -> Injected:
    c.handshake(OPTIONS, send_rtr=False)
    send = c.send_ulpdu(start_advertisement())
    rtr_then(c, c.corrupt_crc(c.fpdu(send)))
    return Injected("bad_crc", send)


def bad_crc_later(c: FaultClient) -> Injected:
    data_phase(c)
    send = c.send_ulpdu(sink_advertisement())
    c.send_raw(c.corrupt_crc(c.fpdu(send)))
    return Injected("bad_crc", send)


def truncated_after_rtr(c: FaultClient) -> Injected:
    c.handshake(OPTIONS, send_rtr=False)
    send = c.send_ulpdu(start_advertisement())
    rtr_then(c, c.fpdu(send)[:TRUNCATE_AT])
    c.shutdown_write()
    return Injected("truncated_fpdu", send)


def truncated_later(c: FaultClient) -> Injected:
    data_phase(c)
    send = c.send_ulpdu(sink_advertisement())
    c.send_raw(c.fpdu(send)[:TRUNCATE_AT])
    c.shutdown_write()
    return Injected("truncated_fpdu", send)


def write_invalid_stag(c: FaultClient) -> Injected:
    rr = data_phase(c)
    write = c.write_ulpdu(invalid_stag(rr.body.sink_stag), rr.body.sink_tagged_offset, b"W" * 16)
    c.send_raw(c.fpdu(write))
    return Injected("write_invalid_stag", write, rr)


def write_out_of_bounds(c: FaultClient) -> Injected:
    """16 octets at 8 before the end of the server's RPING_SIZE-octet buffer."""
    rr = data_phase(c)
    write = c.write_ulpdu(rr.body.sink_stag, rr.body.sink_tagged_offset + RPING_SIZE - 8,
                          b"W" * 16)
    c.send_raw(c.fpdu(write))
    return Injected("write_out_of_bounds", write, rr)


def read_invalid_stag(c: FaultClient) -> Injected:
    rr = data_phase(c)
    to, stag = OUR_SINK
    read = c.read_request_ulpdu(ReadRequest(stag, to, 16, invalid_stag(rr.body.sink_stag),
                                            rr.body.sink_tagged_offset))
    c.send_raw(c.fpdu(read))
    return Injected("read_invalid_stag", read, rr)


def read_out_of_bounds(c: FaultClient) -> Injected:
    """Twice the server's buffer, from its start."""
    rr = data_phase(c)
    to, stag = OUR_SINK
    read = c.read_request_ulpdu(ReadRequest(stag, to, 2 * RPING_SIZE, rr.body.sink_stag,
                                            rr.body.sink_tagged_offset))
    c.send_raw(c.fpdu(read))
    return Injected("read_out_of_bounds", read, rr)


def send_without_receive_after_rtr(c: FaultClient) -> Injected:
    """rping posted one receive: two Sends (with the RTR, one segment) need two."""
    c.handshake(OPTIONS, send_rtr=False)
    first = c.send_ulpdu(start_advertisement())
    second = c.send_ulpdu(start_advertisement())
    rtr_then(c, c.fpdu(first), c.fpdu(second))
    return Injected("send_without_receive", second)


def send_without_receive_later(c: FaultClient) -> Injected:
    """After the go-ahead rping has one receive posted again; two Sends in one segment
    reach siw before rping's completion thread could post another."""
    data_phase(c)
    first = c.send_ulpdu(sink_advertisement())
    second = c.send_ulpdu(sink_advertisement())
    c.send_raw(c.fpdu(first) + c.fpdu(second))
    return Injected("send_without_receive", second)


@dataclass(frozen=True)
class Case:
    name: str
    inject: Callable[[FaultClient], Injected]
    what: str


CASES = [
    Case("close_before_rtr", close_before_rtr,
         "MPA Request, Reply, then our FIN instead of the RTR"),
    Case("bad_crc_after_rtr", bad_crc_after_rtr,
         "the RTR, then in the same segment a Send whose CRC is wrong"),
    Case("bad_crc_later", bad_crc_later,
         "one ping up to the go-ahead, then the sink advertisement with a wrong CRC"),
    Case("truncated_after_rtr", truncated_after_rtr,
         f"the RTR, then the first {TRUNCATE_AT} octets of a Send FPDU, then FIN"),
    Case("truncated_later", truncated_later,
         f"one ping up to the go-ahead, then {TRUNCATE_AT} octets of a Send FPDU, then FIN"),
    Case("write_invalid_stag", write_invalid_stag,
         "an RDMA Write of 16 octets to an STag siw never registered"),
    Case("write_out_of_bounds", write_out_of_bounds,
         "an RDMA Write of 16 octets straddling the end of the server's valid buffer"),
    Case("read_invalid_stag", read_invalid_stag,
         "an RDMA Read Request of 16 octets from an STag siw never registered"),
    Case("read_out_of_bounds", read_out_of_bounds,
         "an RDMA Read Request of twice the server's valid buffer"),
    Case("send_without_receive_after_rtr", send_without_receive_after_rtr,
         "the RTR and two Sends in one segment; rping posted one receive"),
    Case("send_without_receive_later", send_without_receive_later,
         "one ping up to the go-ahead, then two Sends in one segment; one receive posted"),
]


# ---- guest helpers ---------------------------------------------------------------------


def start_rping(guest: Guest) -> GuestJob:
    """A fresh ``rping -s`` on siw0, listening (rping prints nothing until a client comes)."""
    job = guest.spawn(f"exec rping -s -a {GUEST_SIW_ADDRESS} -p {GUEST_PORT} -v -C 1")
    deadline = time.monotonic() + 20
    while guest.run(f"ss -Hltn 'sport = :{GUEST_PORT}' | grep -q LISTEN", timeout=30).rc != 0:
        if job.finished() or time.monotonic() > deadline:
            out = job.output()
            job.kill()
            pytest.fail(f"rping -s is not listening on {GUEST_PORT}: {out}")
        time.sleep(0.1)
    return job


def stop_rping(guest: Guest, job: GuestJob) -> str:
    """rping's output; the process is ended if it still runs."""
    try:
        out = job.output()
        if not job.finished():
            job.kill()
        return out
    except GuestError:
        return ""


# ---- the matrix cell -------------------------------------------------------------------


def our_view(c: FaultClient) -> dict[str, Any]:
    """Our side's parameters, shaped like rdma-probe's "negotiated" object."""
    return {"source": "fault_client", "revision": OPTIONS.revision, "crc": c.crc,
            "peer_to_peer": c.rtr is not None, "rtr": c.rtr, "ird": OPTIONS.ird,
            "ord": OPTIONS.ord}


def reply_view(reply: MpaFrame) -> dict[str, Any]:
    """The kernel's parameters as its MPA Reply states them."""
    rtr = None
    if reply.enhanced is not None and reply.peer_to_peer:
        rtr = ",".join(n for n, on in (("send", reply.rtr_send), ("write", reply.rtr_write),
                                        ("read", reply.rtr_read)) if on) or None
    return {"source": "its MPA Reply", "revision": reply.revision, "crc": reply.crc,
            "enhanced": reply.enhanced is not None, "peer_to_peer": bool(reply.peer_to_peer),
            "rtr": rtr, "ird": reply.ird, "ord": reply.ord}


def verdict_findings(injected: Injected, verdict: Verdict) -> tuple[list[str], list[Evidence]]:
    """Short notes (how many deviations, the first, why they likely happen) and the
    evidence: every deviation, and the octets (what we sent, the kernel's Terminate, the
    Terminate the RFCs require: decoded field by field in the HTML report)."""
    notes: list[str] = []
    evidence: list[Evidence] = []
    if verdict.deviations:
        notes.append(f"{len(verdict.deviations)} deviation(s) from the RFCs; the first: "
                     f"{verdict.deviations[0]}")
        evidence.append(Evidence("text", "deviations from the RFCs",
                                 "\n".join(verdict.deviations)))
    for check in verdict.checks:
        notes += ["why: " + d for d in check.diagnosis]
        if check.deviations:
            evidence += [
                Evidence.frame("we sent this ULPDU", injected.offending),
                Evidence.terminate("kernel siw's Terminate (FPDU)", bytes.fromhex(check.raw_hex)),
                Evidence.terminate("the Terminate RFC 5040 s4.8 requires (ULPDU)",
                                   bytes.fromhex(check.required_hex))]
    return notes, evidence


def record(matrix: InteropMatrix, name: str, outcome: Outcome, *, reason: str | None = None,
           expected: str | None = None, client: FaultClient | None = None,
           notes: list[str], started: float, evidence: list[Evidence] | None = None,
           crashes: list[KernelCrash] | None = None) -> CaseResult:
    cell = CaseResult(initiator=f"fault:{name}", responder="kernel-siw", provider="tcp",
                      outcome=outcome, reason=reason, expected=expected, notes=notes,
                      elapsed_ms=(time.monotonic() - started) * 1000,
                      group="faults", check=name, peer=OURS_TO_SIW,
                      evidence=list(evidence or []))
    attach_crashes(cell, crashes or [])
    if client is not None and client.reply is not None:
        cell.negotiated = our_view(client)
        cell.responder_negotiated = reply_view(client.reply)
        cell.evidence += [Evidence.frame("our MPA Request", client.request_bytes),
                          Evidence.frame("kernel siw's MPA Reply", client.reply_bytes)]
    add_case(matrix, cell)
    return cell


# ---- the tests -------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kernel_siw_answers_fault(live_guest: Guest, kernel_matrix: InteropMatrix,
                                  case: Case) -> None:
    guest = live_guest
    started = time.monotonic()
    job = start_rping(guest)
    mark = guest.console_mark()
    client = FaultClient.connect("127.0.0.1", guest.host_port(GUEST_PORT))
    try:
        try:
            injected = case.inject(client)
        except FaultClientError as e:
            crashes = guest.crashes(mark, CRASH_GRACE_S)
            record(kernel_matrix, case.name, Outcome.FAIL, reason="harness", client=client,
                   started=started, crashes=crashes,
                   notes=[f"could not reach the fault: {e}"])
            if crashes:
                guest.restart()
                return  # the kernel crashed before the fault: that is the finding
            pytest.fail(f"could not reach the fault: {e}; rping: {stop_rping(guest, job)}")
        rule = RULES[injected.rule]
        exp = rule.expectation(injected.offending)
        obs = client.observe(OBSERVE_S, linger_s=LINGER_S)
    finally:
        client.close()
    crashes = guest.crashes(mark, CRASH_GRACE_S)
    rping_out = "" if crashes else stop_rping(guest, job)
    verdict = judge(exp, obs)
    notes, evidence = verdict_findings(injected, verdict)
    if any("iwcm.c" in c.title for c in crashes) and case.name.endswith("_after_rtr"):
        notes.append("the kernel's iw_cm BUG()s when a bad FPDU follows the RTR in one segment "
                     "(see the evidence: why)")
        evidence.append(Evidence("text", "why the kernel crashes", IWCM_CLOSE_BUG_WHY))
    expected = f"{case.what}: {exp.summary}"
    if not crashes and not verdict.answered:
        outcome, reason = Outcome.FAIL, "no-answer"
    elif verdict.deviations:
        outcome, reason = Outcome.FINDING, "deviation"
    else:
        outcome, reason = Outcome.PASS, None  # a crash makes it a FINDING (attach_crashes)
    cell = record(kernel_matrix, case.name, outcome, reason=reason, expected=expected,
                  client=client, notes=notes, started=started, evidence=evidence,
                  crashes=crashes)
    print(f"{case.name}: {cell.cell()}: observed {verdict.observed}")
    for note in cell.notes:
        print(f"  {note}")
    if crashes:
        guest.restart()
        return
    assert verdict.answered, (
        f"no FPDU and no close within {OBSERVE_S} s after the fault; guest sockets: "
        f"{guest.run(f'ss -Htn sport = :{GUEST_PORT}', timeout=30).output!r}; rping: "
        f"{rping_out!r}")


# ---- MPA Request faults ----------------------------------------------------------------


def test_kernel_siw_ignores_reserved_bits_in_the_mpa_request(
        live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    """RFC 5044 s7.1: the Res bits are sent as zero and not checked on receipt, so the
    responder accepts the Request; its own Reply carries them as zero."""
    name = "mpa_reserved_bits"
    guest = live_guest
    started = time.monotonic()
    job = start_rping(guest)
    mark = guest.console_mark()
    options = RequestOptions(reserved_bits=0x0F)
    notes: list[str] = []
    with FaultClient.connect("127.0.0.1", guest.host_port(GUEST_PORT)) as client:
        client.send_request(options)
        try:
            reply = client.read_reply(OBSERVE_S)
        except FaultClientError as e:
            reply = None
            notes.append(f"the Request with reserved bits 0x0f was not answered with a "
                         f"Reply (RFC 5044 s7.1: Res is not checked on receipt): {e}")
        if reply is not None:
            if reply.reject:
                notes.append("the Reply rejects the Request, whose only oddity is the "
                             "reserved bits (RFC 5044 s7.1: not checked on receipt)")
            if reply.reserved_bits:
                notes.append(f"the MPA Reply's flags octet is 0x{client.reply_bytes[16]:02x}, "
                             f"its reserved bits 0x{reply.reserved_bits:x} copied from our "
                             "Request; RFC 5044 s7.1: Res is zero when sending")
            time.sleep(client.settle_s)
            client.send_rtr()
            client.shutdown_write()
            client.observe(OBSERVE_S)
    crashes = guest.crashes(mark, CRASH_GRACE_S)
    if not crashes:
        stop_rping(guest, job)
    outcome = Outcome.FINDING if notes else Outcome.PASS
    record(kernel_matrix, name, outcome, reason="deviation" if notes else None, client=client,
           started=started, notes=notes, crashes=crashes,
           expected="MPA Request with the four low Res bits set: accepted, Reply with Res zero "
                    "(RFC 5044 s7.1)")
    if crashes:
        guest.restart()
        return
    assert reply is not None or client.stream_end is not None, "no Reply and no close"


def bad_key_verdict(reply: MpaFrame | None, closed: bool) -> tuple[Outcome, list[str]]:
    """The cell for a Request with a bad key (RFC 5044 s7.1: it is not an MPA Request; the
    responder closes, a Reply with the Reject bit first is allowed, and never accepts):
    PASS when it closed without accepting, FINDING when it accepted or answered and stayed
    open, FAIL when it neither answered nor closed within OBSERVE_S (unobservable, as for
    every fault case: see the module's docstring)."""
    if reply is None and not closed:
        return Outcome.FAIL, [f"no answer and no close within {OBSERVE_S:g} s of the bad key"]
    notes = []
    if reply is not None and not reply.reject:
        notes.append("the responder accepted a Request with a bad key")
    if not closed:
        notes.append(f"the connection stayed open {OBSERVE_S:g} s after the bad key")
    return (Outcome.FINDING if notes else Outcome.PASS), notes


@pytest.mark.parametrize(("answer", "closed", "outcome"), [
    ("none", True, Outcome.PASS),
    ("reject", True, Outcome.PASS),
    ("accept", True, Outcome.FINDING),
    ("reject", False, Outcome.FINDING),
    ("accept", False, Outcome.FINDING),
    ("none", False, Outcome.FAIL),
])
def test_a_bad_key_passes_only_when_the_responder_closes_without_accepting(
        answer: str, closed: bool, outcome: Outcome) -> None:
    """The verdict the guest test below records, for every answer siw could give (no guest
    needed)."""
    reply = None if answer == "none" else MpaFrame(MpaKind.REPLY, reject=answer == "reject")
    assert bad_key_verdict(reply, closed)[0] is outcome


def test_kernel_siw_answer_to_an_mpa_request_with_a_bad_key(
        live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    """RFC 5044 s7.1: a Request whose key is not "MPA ID Req Frame" is not an MPA Request;
    the responder closes (a Reply with the Reject bit first is allowed), never accepts. The
    cell says what siw did (bad_key_verdict); as with every fault case, siw deviating is a
    FINDING, and the test fails only when the answer could not be observed."""
    name = "mpa_bad_key"
    guest = live_guest
    started = time.monotonic()
    job = start_rping(guest)
    mark = guest.console_mark()
    with FaultClient.connect("127.0.0.1", guest.host_port(GUEST_PORT)) as client:
        client.send_request(RequestOptions(key=b"MPA ID Req Fram3"))
        try:
            reply = client.read_reply(OBSERVE_S)
        except FaultClientError:
            reply = None
        if reply is not None:
            client.observe(OBSERVE_S)
        end = client.stream_end
    crashes = guest.crashes(mark, CRASH_GRACE_S)
    if not crashes:
        stop_rping(guest, job)
    outcome, notes = bad_key_verdict(reply, closed=end is not None)
    reason = {Outcome.FINDING: "deviation", Outcome.FAIL: "no-answer"}.get(outcome)
    evidence = [Evidence.frame("our MPA Request (bad key)", client.request_bytes)]
    if client.reply_bytes:
        evidence.append(Evidence.frame("kernel siw's answer", client.reply_bytes))
    cell = record(kernel_matrix, name, outcome, reason=reason, client=None, started=started,
                  notes=notes, crashes=crashes, evidence=evidence,
                  expected='MPA Request keyed "MPA ID Req Fram3": the responder closes '
                           "without accepting (RFC 5044 s7.1)")
    if crashes:
        guest.restart()
        return
    assert cell.outcome in (Outcome.PASS, Outcome.FINDING), f"{cell.outcome.value}: {notes}"
