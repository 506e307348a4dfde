"""`rdma-probe URI` against the Linux kernel's siw: the report must describe what siw does.

The guest runs ``rping -s -P`` (persistent: a thread per connection, so one listener takes
the probe's ~25 connections in a row) on siw0; the host runs ``rdma-probe --json --timeout 3
--rtr-wait 500 --first-fpdu-delay 200 tcp://127.0.0.1:<host_port(7004)>`` once per module
(about 3 s), and each test checks the rows for one of siw's documented behaviours. The MPA
exchange is siw's own (drivers/infiniband/sw/siw/siw_cm.c, Linux 6.1.192 as the guest
builds it); rping only accepts with rdma_cm's defaults and posts one 16-octet receive.

What siw does, and so what the report must say:
- siw_proc_mpareq: revisions 0..2 are answered in the Request's revision; the Reply copies
  the Request's flag octet, so C is mirrored (mpa_crc_required and mpa_crc_strict are false:
  crc "optional") and the reserved bits come back set; M is answered with an MPA Reject.
- IRD/ORD (RFC 6581): siw's IRD is the initiator's ORD and its ORD the initiator's IRD,
  each capped at 128 (SIW_MAX_IRD_QP/SIW_MAX_ORD_QP); rdma_accept() with rping's NULL
  parameters keeps them. The plain Request (IRD 16383, ORD 1) gets IRD 1, ORD 128; the
  probe's ORD 16383 gets IRD 128, ORD 128 and connects: relaxed, limits 128/128.
- Peer-to-peer: accepted; a Write RTR is picked when offered, else Read; to an offer of only
  a Send RTR it still answers Write ("Sends would require pre-posting a Receive"), against
  RFC 6581 s3 (the responder picks from the offer): rtr_types fails with that finding.
  The probe reads peer-to-peer Replies on raw sockets and sends nothing after them, and
  every probe connection stays open --first-fpdu-delay after siw's Reply: a Terminate, a
  reset or even a FIN inside siw_accept()'s hand-over window crashes iw_cm (below).
- siw_recv_mpa_rr: PD_Length above MPA_MAX_PRIVDATA (256, counting the 4 IRD/ORD octets) is
  -EPROTO: the connection is closed without a Reply.
- Terminates (siw_qp_rx.c, siw_qp_tx.c): an RDMA Write to an unknown STag draws DDP/tagged/
  invalid STag (1/1/0x00), an RDMA Read naming one RDMAP/remote protection/invalid STag
  (0/1/0x00), both malformed on the wire: see
  test_siw_terminates_for_unknown_stags_are_malformed_but_mean_the_rfc_codes. rping advertises no region to rdma-probe, so the out-of-bounds rows are not tested.

A kernel oops/BUG during the probe fails the first test with its trace and skips the others
(the rows after it describe a broken peer); the guest is rebooted for the next module.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome, SideError

from tests.support.guest import (GUEST_SIW_ADDRESS, SIW_FIRST_FPDU_DELAY_MS, Guest, GuestJob,
                                 KernelCrash)
from tests.support.paths import SHIPPED_PERSONALITIES
from tests.support.tools import built_tool

from .kernel_matrix import OURS_TO_SIW, add_case, attach_crashes

GUEST_PORT = 7004
TIMEOUT_S = 3
RTR_WAIT_MS = 500
#: The probe makes at most 48 connections of --timeout each; past this it is hung.
PROBE_LIMIT_S = 150.0
SCHEMA = "rdma-interop/probe/2"

#: What the kernel BUG during the probe means (tests/kernel/test_siw_rping.py has the
#: same crash from rping's own client).
CLOSE_BEFORE_RTR = (
    "siw's passive side waits for the RTR with its iw_cm id in CONN_RECV (siw_accept() "
    "delivers ESTABLISHED only from siw_rtr_data_ready()); a Terminate, a reset or a FIN "
    "arriving right after its Reply instead make siw report IW_CM_EVENT_CLOSE, and "
    "cm_close_handler() hits BUG() for that state (iwcm.c:969). rdma-probe avoids it by "
    "sending nothing after a peer-to-peer Reply it will not complete and by keeping every "
    "connection open --first-fpdu-delay after the Reply; a crash here means one of its "
    "probe connections closed inside that window again (the console trace says when)")


@dataclass
class ProbeRun:
    """One `rdma-probe --json` run against `rping -s -P` in the guest."""

    command: list[str]
    rc: int | None
    stdout: str
    stderr: str
    elapsed_s: float
    report: dict[str, Any] | None
    crashes: list[KernelCrash] = field(default_factory=list)
    rping_alive: bool = True
    rping_output: str = ""

    def rows(self, *, first: bool = False) -> dict[str, dict[str, Any]]:
        """The capability rows by id. A kernel crash fails the `first` test and skips the
        others (the rows past it describe a broken peer); a missing report or an rping that
        died fails them all."""
        if self.crashes:
            why = (f"the guest kernel crashed during the probe: {self.crashes[0].note()} "
                   f"[{self.crashes[0].gist()}]. Why: {CLOSE_BEFORE_RTR}")
            if first:
                pytest.fail(why, pytrace=False)
            pytest.skip("not judged: the guest kernel crashed during the probe and the rows "
                        "past the crash describe a broken peer (see "
                        "test_probe_runs_to_the_end_without_crashing_siw)")
        if self.report is None:
            pytest.fail(f"no JSON report (exit {self.rc}): {' '.join(self.command)}\n"
                        f"stdout: {self.stdout[-2000:]}\nstderr: {self.stderr[-2000:]}",
                        pytrace=False)
        if not self.rping_alive:
            pytest.fail(f"rping -s -P exited during the probe, later rows probed nothing: "
                        f"{self.rping_output[-2000:]}", pytrace=False)
        return {c["id"]: c for c in self.report["capabilities"]}

    @property
    def policy(self) -> Mapping[str, Any]:
        self.rows()
        assert self.report is not None
        return self.report["responder_policy"]["mpa"]


def host_probe() -> Path:
    return built_tool("rdma-probe")


def wait_listening(guest: Guest, job: GuestJob, timeout: float = 20.0) -> None:
    """Until the guest has a TCP listener on GUEST_PORT (rping -s prints nothing then)."""
    deadline = time.monotonic() + timeout
    while guest.run(f"ss -Hltn 'sport = :{GUEST_PORT}' | grep -q LISTEN", timeout=30).rc != 0:
        if job.finished() or time.monotonic() > deadline:
            pytest.fail(f"rping -s -P is not listening on {GUEST_PORT}: {job.output()}")
        time.sleep(0.1)


def run_probe(guest: Guest) -> ProbeRun:
    job = guest.spawn(f"exec rping -s -P -a {GUEST_SIW_ADDRESS} -p {GUEST_PORT}")
    wait_listening(guest, job)
    mark = guest.console_mark()
    # The fingerprint compares with the source tree's personalities (an installed, older set
    # would otherwise come first).
    command = [str(host_probe()), "--json", "--timeout", str(TIMEOUT_S), "--rtr-wait",
               str(RTR_WAIT_MS), "--first-fpdu-delay", str(SIW_FIRST_FPDU_DELAY_MS),
               "--personality-dir", str(SHIPPED_PERSONALITIES),
               f"tcp://127.0.0.1:{guest.host_port(GUEST_PORT)}"]
    started = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_LIMIT_S)
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as e:
        rc = None
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        err = f"rdma-probe still running after {PROBE_LIMIT_S:g} s (killed)"
    elapsed = time.monotonic() - started
    report = None
    for line in out.splitlines():
        if line.startswith("{"):
            candidate = json.loads(line)
            if candidate.get("schema") == SCHEMA:
                report = candidate
    run = ProbeRun(command, rc, out, err, elapsed, report)
    run.crashes = guest.crashes(mark, grace_s=1.0)
    if run.crashes:
        guest.restart()  # the next module gets a sound kernel; this console is kept
        return run
    run.rping_alive = not job.finished()
    run.rping_output = job.output()
    job.kill()
    return run


def record(matrix: InteropMatrix, run: ProbeRun) -> None:
    """One matrix cell: the probe ran to the end against siw; notes list the rows that are
    not plain ok, so the matrix shows what the probe found."""
    cell = CaseResult(initiator="ours-tcp", responder="kernel-siw", provider="tcp",
                      outcome=Outcome.FAIL, elapsed_ms=run.elapsed_s * 1000,
                      expected="rdma-probe URI against rping -s -P: probed, siw's behaviour "
                               "(siw_cm.c) in every row", group="rdma-probe",
                      check="rdma-probe URI", peer=OURS_TO_SIW)
    attach_crashes(cell, run.crashes)
    report = run.report
    if run.crashes:
        cell.evidence.append(Evidence("text", "why the kernel crashes", CLOSE_BEFORE_RTR))
    elif report is None or run.rc != 0:
        cell.reason = "no report" if report is None else str(report.get("outcome"))
        cell.initiator_error = SideError(kind="rdma-probe",
                                         detail=(run.stderr or run.stdout)[-300:])
    elif not run.rping_alive:
        cell.reason = "rping exited"
        cell.responder_error = SideError(kind="rping", detail=run.rping_output[-300:])
    else:
        cell.outcome = Outcome.PASS
    if report is not None and not run.crashes:  # past a crash the rows mean nothing
        fp = report.get("fingerprint") or {}
        rows = [f"{c['id']}: {c['verdict']}: {c['value']}"
                for c in report.get("capabilities", []) if c["verdict"] != "ok"]
        cell.notes.append(f"fingerprint: {fp.get('summary')}")
        cell.notes.append(f"{len(rows)} probe row(s) not plain ok (in the evidence)")
        cell.evidence += [Evidence("text", "probe rows that are not plain ok", "\n".join(rows)),
                          Evidence("log", "responder_policy (a personality file that replays "
                                   "the peer)", json.dumps(report.get("responder_policy"),
                                                           indent=2))]
    add_case(matrix, cell)


@pytest.fixture(scope="module")
def siw_probe(guest: Guest, kernel_matrix: InteropMatrix) -> ProbeRun:
    if not guest.alive():
        guest.restart()
    run = run_probe(guest)
    record(kernel_matrix, run)
    return run


# ---- the run itself --------------------------------------------------------------------


def test_probe_runs_to_the_end_without_crashing_siw(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows(first=True)
    report = siw_probe.report
    assert report is not None
    assert (siw_probe.rc, report["outcome"]) == (0, "probed"), (siw_probe.rc, report["detail"])
    # One connection per question, well inside the default budget of 48.
    assert 20 <= report["connections"] <= 48, report["connections"]
    not_tested = {i for i, r in rows.items() if r["verdict"] == "not_tested"}
    # The only rows siw's rping cannot answer: see the tests below.
    assert not_tested == {"rtt_send64", "terminate_write_out_of_bounds",
                          "terminate_read_out_of_bounds"}, {i: rows[i] for i in not_tested}
    # siw answered the plain Request at the end as at first contact: nothing broke.
    assert rows["still_answering"]["data"] == {"unchanged": True}, rows["still_answering"]


# ---- MPA setup (siw_cm.c siw_proc_mpareq, siw_accept) ----------------------------------


def test_siw_answers_revision_2_and_revision_1(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    assert rows["iwarp"]["verdict"] == "ok", rows["iwarp"]
    # rping accepts with no private data of its own; siw frees the Request's.
    assert rows["iwarp"]["data"]["private_data"] == "", rows["iwarp"]
    assert rows["mpa_revisions"]["data"] == {"revision2": True, "revision1": True,
                                             "revision129": False}
    assert rows["revision2_to_revision1"]["verdict"] == "n/a", rows["revision2_to_revision1"]
    assert siw_probe.policy["revision"] == 2


def test_siw_accepts_peer_to_peer_with_a_write_or_read_rtr(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    assert rows["peer_to_peer"]["data"] == {"accepted": True, "required": False}, rows["peer_to_peer"]
    # Write and Read alone are accepted. A Send-only offer is answered with a Write RTR, not
    # offered (siw_proc_mpareq: "Sends would require pre-posting a Receive"): RFC 6581 s3 has
    # the responder pick from the offer, so the row fails with that finding.
    assert rows["rtr_types"]["data"] == {"accepted": ["write", "read"],
                                         "outside_offer": ["send answered with write"]}
    assert rows["rtr_types"]["verdict"] == "fail", rows["rtr_types"]
    # "Writes are preferred" (siw_proc_mpareq).
    assert rows["rtr_choice"]["data"] == {"picked": "write", "preference": ["write", "read"],
                                          "reply": "chosen"}


def test_siw_sends_nothing_before_the_rtr(siw_probe: ProbeRun) -> None:
    row = siw_probe.rows()["rtr_wait"]
    # Withheld for RTR_WAIT_MS: nothing arrives, and siw keeps the connection (rping's
    # server never sends first anyway; siw only waits in siw_rtr_data_ready()).
    assert row["verdict"] == "ok", row
    assert row["data"] == {"waits": True, "gave_up_after_ms": None}, row


def test_siw_grants_ird_and_ord_from_the_offer(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    # siw's IRD = min(our ORD, SIW_MAX_IRD_QP), its ORD = min(our IRD, SIW_MAX_ORD_QP): to
    # IRD 16382, ORD 16382 it answers 128/128, to the plain ORD 1 an IRD of 1; IRD 0x3fff is
    # no sentinel to it (irdma's IETF_NO_IRD_ORD): capped like any other.
    assert rows["ird_ord"]["data"] == {"ird": 128, "ord": 128, "ird_to_ord_1": 1,
                                       "sentinel": False}, rows["ird_ord"]
    # ORD 16382 connects: siw follows the offer, it is never strict.
    assert rows["ird_ord_check"]["data"] == {"strict": False}, rows["ird_ord_check"]
    assert rows["ird_ord_check"]["verdict"] == "ok", rows["ird_ord_check"]


def test_siw_uses_crc_only_when_asked(siw_probe: ProbeRun) -> None:
    row = siw_probe.rows()["crc"]
    # mpa_crc_required = false: no C unasked; mpa_crc_strict = false: C is mirrored.
    assert (row["verdict"], row["data"]) == ("ok", {"crc": "optional"}), row


def test_siw_rejects_markers(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    # "MPA Markers: currently not supported": an MPA Reject, sent by siw before rping hears.
    assert rows["markers"]["data"] == {"wanted": False, "supported": False}, rows["markers"]
    assert "MPA Reject (R) with 0 octets of private data" in rows["rejects"]["data"]["forms"]


def test_siw_takes_private_data_up_to_256_octets(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    # MPA_MAX_PRIVDATA (RDMA_MAX_PRIVATE_DATA, 256) counts the 4 IRD/ORD octets; above it
    # siw_recv_mpa_rr() fails with -EPROTO and the socket is closed without a Reply.
    assert rows["private_data"]["data"] == {"largest": 256}, rows["private_data"]
    assert rows["private_data"]["verdict"] == "note", rows["private_data"]
    assert "TCP close without a Reply" in rows["rejects"]["data"]["forms"], rows["rejects"]


def test_siw_echoes_reserved_request_bits_in_its_reply(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    row = rows["reserved_bits"]
    # RFC 5044 s7.1: Res is not checked on receipt (siw does not), and is zero when sent:
    # siw builds its Reply from the Request's header, so the bits come back (warn).
    assert row["data"] == {"rejected": False, "echoed": True}, row
    assert row["verdict"] == "warn", row
    # Its own GSO bit (0x08, MPA_RR_FLAG_GSO_EXP) and Chelsio's FPDU-size bits: taken, and
    # echoed the same way; try_gso is off, so nothing of its own.
    ext = rows["extension_bits"]
    assert ext["data"] == {"rejected": False, "reply_bits": 0x0C}, ext


def test_siw_closes_a_newer_revision_and_needs_no_rtr_in_revision_1(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    # siw_proc_mpareq: "allow for 0, 1, and 2 only", -EPROTO and the socket closed.
    assert rows["newer_revision"]["data"] == {"answer": "close"}, rows["newer_revision"]
    # In revision 1 a zero-length Read or Write may come first: siw waits for no RTR there.
    assert rows["rtr_revision1"]["data"] == {"needs": "none"}, rows["rtr_revision1"]


def test_responder_policy_is_siws_and_loads_as_a_personality(siw_probe: ProbeRun,
                                                             tmp_path: Path) -> None:
    assert dict(siw_probe.policy) == {
        "revision": 2, "crc": "optional", "markers_wanted": False, "markers_supported": False,
        "peer_to_peer": "when-asked", "rtr_offer": ["write", "read"],
        "rtr_accepted": ["write", "read"], "rtr_preference": ["write", "read"],
        "rtr_reply": "chosen", "no_common_rtr": "propose", "rtr_in_revision1": False,
        "ird": 128, "ord": 128, "strict_ird_ord": False, "private_data_limit": 256,
        "reject_reserved_bits": False, "on_newer_revision": "close", "refuse_with": "reject",
        "on_malformed_frame": "close", "echo_reserved_bits": True, "ird_ord_sentinel": False,
    }
    assert siw_probe.report is not None
    assert siw_probe.report["responder_policy"]["private_data"] is None  # rping sends none
    # Saved as it is, it is a personality file: kernel siw can be replayed by rdma-probe serve.
    (tmp_path / "kernel-siw.json").write_text(json.dumps(siw_probe.report["responder_policy"]))
    listed = subprocess.run([str(host_probe()), "personalities", "--json", "--personality-dir",
                             str(tmp_path)], capture_output=True, text=True, timeout=30)
    assert listed.returncode == 0 and "skipped" not in listed.stderr, listed.stderr
    mine = [p for p in json.loads(listed.stdout) if p["source_path"].endswith("kernel-siw.json")]
    assert len(mine) == 1 and mine[0]["mpa"]["no_common_rtr"] == "propose", mine


def test_kernel_siw_is_recognised_as_siw(siw_probe: ProbeRun) -> None:
    """The fingerprint compares what the probe saw of kernel siw (Debian's 6.1 build) with
    every shipped personality: siw matches every trait, IRD/ORD aside (rping's, 128/128,
    against the personality's 16/16: settings, not decisive)."""
    siw_probe.rows()
    assert siw_probe.report is not None
    fp = siw_probe.report["fingerprint"]
    assert fp["verdict"] == "known", fp["summary"]
    assert fp["behaves_like"] == ["siw"], fp["summary"]
    best = fp["matches"][0]
    assert best["name"] == "siw" and best["differs"] == [], best
    assert {d["trait"] for d in best["settings_differ"]} <= {"ird", "ord"}, best
    assert fp["summary"].startswith("behaves like siw ("), fp["summary"]
    for m in fp["matches"][1:]:
        assert m["differs"], m


# ---- established connections (siw_qp_rx.c, siw_qp_tx.c) -------------------------------


def test_siw_answers_zero_length_reads_but_rping_echoes_nothing(siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    read = rows["rtt_read0"]
    # siw answers Read Requests itself (IRD 1 is enough for one at a time).
    assert read["verdict"] == "ok" and read["data"]["count"] == 16, read
    assert 0 < read["data"]["min_us"] <= read["data"]["median_us"] <= read["data"]["max_us"]
    # rping's one 16-octet receive takes no 64-octet echo Send: nothing comes back.
    assert rows["rtt_send64"]["verdict"] == "not_tested", rows["rtt_send64"]


def test_siw_terminates_for_unknown_stags_are_malformed_but_mean_the_rfc_codes(
        siw_probe: ProbeRun) -> None:
    """Finding: siw does send the documented Terminates, but encodes the Terminate Control
    field with little-endian bitfields (iwarp.h struct iwarp_terminate): octet 0 holds
    EType<<4|Layer instead of Layer<<4|EType, and M/D/R sit at bits 0x01/0x02/0x04 of octet
    2 instead of 0x80/0x40/0x20 (RFC 5040 s4.8). Captured on the host's loopback (hostfwd),
    siw's answer to the probe's RDMA Write of 16 octets to STag 0xfffffe00 was
        0026 4147 00000000 00000002 00000001 00000000 | 11 00 03 00 | 0010 | c140fffffe00...
    (siw's dyndbg: "sent TERM: layer 1, type 1, code 0"), and to the RDMA Read
        0046 4147 00000000 00000002 00000001 00000000 | 10 00 07 00 | 0000 | 4141...
    ("layer 0, type 1, code 0": RFC 5040 reads 0x10 as DDP, catastrophic). Our codec
    rejects both (wire::decode_terminate_body: reserved bits); the endpoint keeps what it
    can read of them (wire::MalformedTerminate), and the probe reports them malformed, with
    the little-endian reading of what siw meant: exactly the RFC codes.
    tests/kernel/test_terminate_check.py holds the same bytes from test_siw_faults."""
    rows = siw_probe.rows()
    meant = {"terminate_write_invalid_stag": (1, 1, 0x00), "terminate_read_invalid_stag": (0, 1, 0x00)}
    for rid, (layer, etype, code) in meant.items():
        row = rows[rid]
        assert row["verdict"] == "warn", row
        assert row["data"] == {"malformed": True, "little_endian": True, "layer": layer,
                               "etype": etype, "code": code}, row
        assert "is what RFC" in row["why"], row
        assert "malformed Terminate" in row["evidence"][0]["came_back"], row


def test_out_of_bounds_rows_are_not_tested_without_an_advertised_region(
        siw_probe: ProbeRun) -> None:
    rows = siw_probe.rows()
    write, read = rows["terminate_write_out_of_bounds"], rows["terminate_read_out_of_bounds"]
    # The probe asks for a region with the exchange's "advertise" Send; rping's 16-octet
    # receive cannot take it, so no region and no bounds to go past; the Read row is skipped.
    for row in (write, read):
        assert (row["verdict"], row["data"]) == ("not_tested", {}), row
        # The one reason these rows give without a row field for it.
        assert "advertised no region" in row["value"], row
    assert write["evidence"] and read["evidence"] == [], (write, read)
