"""`rdma-probe verbs://...` through the guest's kernel devices: the report an initiator on
rdma-core gives of a peer, here our own `rdma-probe serve` on the same device (loopback).

Per device (siw0 at 10.0.2.15, rxe0 at 10.9.0.1), inside the guest:
    rdma-probe serve --listen verbs://ADDR:PORT --personality siw
    rdma-probe --json --timeout 3 verbs://ADDR:PORT
Over verbs the kernel negotiates MPA (siw's siw_cm.c; rxe has none), so the probe asks no
MPA question: those rows are n/a. It makes one connection per connection-level question:
first contact, the round trips (16 zero-length RDMA Reads, 16 64-octet echo Sends that serve
answers), and the four Terminate cases (an unknown STag, and 8 octets past the end of the
region serve advertises, for an RDMA Write and an RDMA Read): 6 connections.

What the devices do, and so what the rows must say:
- rdma_cm hands the responder's private data to the initiator: the personality's "siw"
  (over rxe zero-padded by the IB CM to the REP's 196 octets).
- IRD/ORD: rxe's initiator gets the REP's depths, i.e. what serve granted. iw_cm reports
  no IRD/ORD of the peer to the active side (siw_cm_upcall() fills them only for a
  CONNECT_REQUEST; core/transport/verbs/verbs_connection.h): not visible, never "0".
- Terminates are the kernel's: user space sees work request status and the disconnect.
  siw's dynamic debug shows them: with `module siw +p` the probe's QP logs "got TERMINATE.
  layer L, type T, code C" (siw_qp_rx.c siw_proc_terminate), DDP tagged 1/1/0x00 and 0x01
  for the Writes, RDMAP remote protection 0/1/0x00 and 0x01 for the Reads (siw's reading of
  its own little-endian encoding, see test_siw_probe.py; the RFC 5040/5041 s7 codes).
  rxe NAKs each bad access and the request completes IBV_WC_REM_ACCESS_ERR. siw Terminates
  and closes: our RDMA Write completed when siw sent it (a Write's completion says only that
  the local buffer may be reused), then the connection closes; our RDMA Read never succeeds
  (it is flushed when the peer's Terminate takes our QP out of RTS). Since siw did send a
  Terminate, a row must not say there was none.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome, SideError

from tests.support.guest import (GUEST_RXE_ADDRESSES, GUEST_SIW_ADDRESS, Guest, KernelCrash,
                                 guest_path, json_lines)
from tests.support.tools import built_tool

from .kernel_matrix import VERBS_RXE, VERBS_SIW, add_case, attach_crashes

SCHEMA = "rdma-interop/probe/2"
TIMEOUT_S = 3
#: 6 connections of at most TIMEOUT_S each (setup and all); past this the probe hangs.
PROBE_LIMIT_S = 60.0
#: The guest cannot see the directories compiled into the binary; it reads the tree's.
GUEST_PERSONALITIES = "--personality-dir /host/tools/personalities"
#: The rows the kernel's MPA negotiation leaves the probe no way to ask.
MPA_ROWS = ("mpa_revisions", "peer_to_peer", "rtr_types", "rtr_choice", "ird_ord_check", "crc",
            "markers", "private_data", "reserved_bits")
TERMINATE_ROWS = ("terminate_write_invalid_stag", "terminate_read_invalid_stag",
                  "terminate_write_out_of_bounds", "terminate_read_out_of_bounds")
#: What a verbs:// probe asks: everything not in MPA_ROWS.
CONNECTION_ROWS = ("iwarp", "ird_ord", "rtt_read0", "rtt_send64", *TERMINATE_ROWS)
ROUND_TRIPS = 16
#: siw's dynamic debug switch; absent when the guest kernel has no CONFIG_DYNAMIC_DEBUG.
DYNDBG = "/sys/kernel/debug/dynamic_debug/control"
#: Written to the kernel log before the probe (at debug level: not on the console).
KMSG_MARK = "rdma-interop: test_verbs_probe starts"
#: siw_proc_terminate(): the Terminate a siw QP received, as siw reads it.
GOT_TERMINATE = re.compile(r"siw: got TERMINATE\. layer (\d+), type (\d+), code (\d+)")
#: What the four Terminate probes should draw (layer, etype, code): RFC 5041 s7.2 for the
#: Writes (DDP, tagged buffer, invalid STag / base or bounds), RFC 5040 s7.2 for the Reads
#: (RDMAP, remote protection, invalid STag / base or bounds), in the probe's order.
RFC_TERMINATES = [(1, 1, 0x00), (0, 1, 0x00), (1, 1, 0x01), (0, 1, 0x01)]


@dataclass(frozen=True)
class Device:
    name: str
    address: str
    port: int

    @property
    def iwarp(self) -> bool:
        return self.name.startswith("siw")

    @property
    def cell(self) -> str:
        return f"ours-verbs@{self.name.rstrip('0123456789')}"

    @property
    def peer(self) -> str:
        """The kernel matrix's column."""
        return VERBS_SIW if self.iwarp else VERBS_RXE


DEVICES = [Device("siw0", GUEST_SIW_ADDRESS, 7300), Device("rxe0", GUEST_RXE_ADDRESSES[0], 7301)]


@dataclass
class VerbsProbeRun:
    device: Device
    command: str
    rc: int | None
    output: str
    elapsed_s: float
    report: dict[str, Any] | None
    served: list[dict[str, Any]] = field(default_factory=list)  # serve's "connection" lines
    serve_output: str = ""
    crashes: list[KernelCrash] = field(default_factory=list)
    # siw only, when dynamic debug is on: the Terminates the kernel received, in order.
    kernel_terminates: list[tuple[int, int, int]] | None = None

    def rows(self) -> dict[str, dict[str, Any]]:
        """The capability rows by id; fails when the guest crashed or there is no report."""
        if self.crashes:
            pytest.fail(f"the guest kernel crashed during the probe over {self.device.name}: "
                        f"{self.crashes[0].note()} [{self.crashes[0].gist()}]", pytrace=False)
        if self.report is None:
            pytest.fail(f"no {SCHEMA} report (exit {self.rc}): {self.command}\n"
                        f"{self.output[-3000:]}", pytrace=False)
        return {c["id"]: c for c in self.report["capabilities"]}

    def granted(self) -> dict[str, int]:
        """What serve's side says it granted on the first contact: its IRD and ORD."""
        assert self.served, f"serve reported no connection:\n{self.serve_output}"
        negotiated = self.served[0]["negotiated"]
        return {"ird": negotiated["ird"], "ord": negotiated["ord"]}


def probe_binary() -> str:
    return guest_path(built_tool("rdma-probe"))


def siw_debug(guest: Guest, on: bool) -> bool:
    """Switches siw's dynamic debug messages; False when the guest has no dynamic debug."""
    return guest.run(f"test -e {DYNDBG} || mount -t debugfs none /sys/kernel/debug; "
                     f"echo 'module siw {'+' if on else '-'}p' > {DYNDBG}", timeout=30).ok


def kernel_terminates(guest: Guest) -> list[tuple[int, int, int]]:
    """The Terminates siw received since KMSG_MARK."""
    log = guest.check("dmesg", timeout=30)
    log = log[log.rfind(KMSG_MARK):] if KMSG_MARK in log else ""
    return [(int(a), int(b), int(c)) for a, b, c in GOT_TERMINATE.findall(log)]


def run_probe(guest: Guest, device: Device) -> VerbsProbeRun:
    probe = probe_binary()
    debug = device.iwarp and siw_debug(guest, True)
    serve = guest.spawn(f"exec {probe} serve --json --listen verbs://{device.address}:{device.port} "
                        f"--personality siw {GUEST_PERSONALITIES}")
    try:
        listening = serve.wait_for_output('"listening"', 30)
        assert f'"address":"{device.address}:{device.port}"' in listening, listening
        guest.check(f"echo '<7>{KMSG_MARK}' > /dev/kmsg", timeout=30)
        mark = guest.console_mark()
        command = f"{probe} --json --timeout {TIMEOUT_S} verbs://{device.address}:{device.port}"
        started = time.monotonic()
        result = guest.run(command, timeout=PROBE_LIMIT_S)
        elapsed = time.monotonic() - started
        reports = [r for r in json_lines(result.output) if r.get("schema") == SCHEMA]
        run = VerbsProbeRun(device, command, result.rc, result.output, elapsed,
                            reports[-1] if reports else None)
        run.crashes = guest.crashes(mark, grace_s=1.0)
        if run.crashes:
            guest.restart()  # the next device gets a sound kernel; this console is kept
            return run
        if debug:
            run.kernel_terminates = kernel_terminates(guest)
        serve.kill("TERM")  # serve prints its counters and exits within a second
        try:
            run.serve_output = serve.wait(timeout=10).output
        except TimeoutError:
            run.serve_output = serve.output()
        run.served = [e for e in json_lines(run.serve_output) if e.get("event") == "connection"]
        return run
    finally:
        if guest.alive():
            serve.kill()
            if debug:
                siw_debug(guest, False)


def record(matrix: InteropMatrix, run: VerbsProbeRun) -> None:
    """One cell: the probe ran to the end through the device; notes list the rows that are
    not ok or n/a, so the matrix shows what the probe found."""
    cell = CaseResult(initiator=run.device.cell, responder=run.device.cell,
                      provider="verbs", outcome=Outcome.FAIL,
                      elapsed_ms=run.elapsed_s * 1000,
                      expected="rdma-probe verbs:// against rdma-probe serve on the same "
                               "device: probed, the connection-level rows measured",
                      group="rdma-probe", check="rdma-probe URI", peer=run.device.peer)
    attach_crashes(cell, run.crashes)
    report = run.report
    if run.crashes:
        pass  # a FINDING "crashed" (attach_crashes)
    elif report is None or run.rc != 0 or report.get("outcome") != "probed":
        cell.reason = "no report" if report is None else str(report.get("outcome"))
        cell.initiator_error = SideError(kind="rdma-probe", detail=run.output[-300:])
    else:
        untested = [c["id"] for c in report["capabilities"] if c["verdict"] == "not_tested"]
        if untested:
            cell.reason = "not tested"
            cell.mismatches.append(f"rows not tested: {', '.join(untested)}")
        else:
            cell.outcome = Outcome.PASS
    if report is not None and not run.crashes:
        rows = [f"{c['id']}: {c['verdict']}: {c['value']}"
                for c in report.get("capabilities", []) if c["verdict"] not in ("ok", "n/a")]
        if rows:
            cell.notes.append(f"{len(rows)} probe row(s) neither ok nor n/a (in the evidence)")
            cell.evidence.append(Evidence("text", "probe rows neither ok nor n/a",
                                          "\n".join(rows)))
    add_case(matrix, cell)


@pytest.fixture(scope="module", params=DEVICES, ids=[d.name for d in DEVICES])
def verbs_probe(request: pytest.FixtureRequest, guest: Guest,
                kernel_matrix: InteropMatrix) -> VerbsProbeRun:
    if not guest.alive():
        guest.restart()
    run = run_probe(guest, request.param)
    record(kernel_matrix, run)
    return run


# ---- the run ---------------------------------------------------------------------------


def test_verbs_probe_runs_to_the_end_without_crashing_the_kernel(
        verbs_probe: VerbsProbeRun) -> None:
    rows = verbs_probe.rows()
    report = verbs_probe.report
    assert report is not None
    assert (verbs_probe.rc, report["outcome"]) == (0, "probed"), (verbs_probe.rc, report["detail"])
    assert report["uri"] == f"verbs://{verbs_probe.device.address}:{verbs_probe.device.port}"
    # One connection per connection-level question, each of which reached serve.
    assert report["connections"] == 6, report["connections"]
    assert len(verbs_probe.served) == 6, verbs_probe.serve_output
    # Every row the probe could ask was asked: none is not_tested.
    assert set(CONNECTION_ROWS) <= set(rows), sorted(rows)
    untested = {i: r for i, r in rows.items() if r["verdict"] == "not_tested"}
    assert not untested, untested
    assert verbs_probe.elapsed_s < PROBE_LIMIT_S / 2, verbs_probe.elapsed_s


def test_mpa_rows_are_not_applicable_over_verbs(verbs_probe: VerbsProbeRun) -> None:
    rows = verbs_probe.rows()
    for rid in MPA_ROWS:
        row = rows[rid]
        assert (row["verdict"], row["data"]) == ("n/a", {}), row
        assert "the kernel negotiates MPA" in row["value"], row
    # Any other row beyond the connection-level ones is an MPA question too: n/a.
    for rid, row in rows.items():
        if rid not in CONNECTION_ROWS:
            assert row["verdict"] == "n/a", row
    # Nothing MPA is known about the responder, so its policy claims nothing.
    assert verbs_probe.report is not None
    policy = verbs_probe.report["responder_policy"]
    assert all(v is None for v in policy["mpa"].values()), policy
    assert policy["private_data"] is None, policy
    # ...and no fingerprint: the kernel's MPA is not visible through rdma_cm.
    assert verbs_probe.report["fingerprint"] is None and verbs_probe.report["traits"] is None


# ---- first contact (rdma_cm) -----------------------------------------------------------


def test_first_contact_goes_through_rdma_cm_with_the_responders_private_data(
        verbs_probe: VerbsProbeRun) -> None:
    row = verbs_probe.rows()["iwarp"]
    assert row["verdict"] == "ok", row
    assert row["value"].startswith("yes"), row
    # serve's siw personality sends "siw" as private data; rdma_cm delivers it (rxe: padded).
    came_back = row["evidence"][0]["came_back"]
    assert 'private data "siw' in came_back and "established" in came_back, row
    if verbs_probe.device.iwarp:
        assert 'private data "siw";' in came_back, row


def test_ird_ord_is_what_the_responder_granted_or_not_visible(verbs_probe: VerbsProbeRun) -> None:
    row = verbs_probe.rows()["ird_ord"]
    granted = verbs_probe.granted()
    if verbs_probe.device.iwarp and row["data"] != granted:
        # iw_cm gives the active side no IRD/ORD of the peer (rdma_cm reports 0/0): the row
        # must say "not visible", not that serve granted IRD 0 and ORD 0.
        assert (row["verdict"], row["data"]) == ("n/a", {"ird": None, "ord": None}), (
            f"serve granted {granted}; the row claims {row['verdict']}: {row['value']} "
            f"{row['data']}, which rdma_cm cannot tell the initiator over iWARP")
    else:
        # The IB CM's REP carries the responder's depths: exactly serve's grant.
        assert (row["verdict"], row["data"]) == ("ok", granted), row


# ---- established connections -----------------------------------------------------------


def test_zero_length_reads_and_echo_sends_make_16_round_trips(verbs_probe: VerbsProbeRun) -> None:
    rows = verbs_probe.rows()
    for rid in ("rtt_read0", "rtt_send64"):
        row = rows[rid]
        assert row["verdict"] == "ok", row
        data = row["data"]
        assert data["count"] == ROUND_TRIPS, row
        assert 0 < data["min_us"] <= data["median_us"] <= data["max_us"], row
    # The echoes were serve's answers: it says so for the round-trip connection.
    answered = [s for e in verbs_probe.served for s in (e["exchange"] or {}).get("steps", [])
                if s["name"] == f"answered {ROUND_TRIPS} echoes"]
    assert answered and answered[0]["ok"], verbs_probe.serve_output


def test_terminate_rows_show_the_work_request_status_not_a_terminate(
        verbs_probe: VerbsProbeRun) -> None:
    rows = verbs_probe.rows()
    for rid in TERMINATE_ROWS:
        row = rows[rid]
        # No Terminate is visible through verbs: a note with no codes, never a claim that the
        # peer accepted the access (fail) or a code (ok/warn).
        assert (row["verdict"], row["data"]) == ("note", {}), row
        assert row["value"].startswith("no Terminate"), row
        assert "over verbs the kernel owns the stream" in row["why"], row
        offered = row["evidence"][0]["offered"]
        if "out_of_bounds" in rid:
            # serve advertised a region, and the probe went 8 octets past its end.
            assert "past the end of the region it advertised" in offered, row
        else:
            assert "remote STag 0xfffffe00" in offered, row
        came_back = row["evidence"][0]["came_back"]
        if not verbs_probe.device.iwarp:
            # rxe NAKs the access: the request completes with a remote access error.
            assert "remote_access_error" in row["value"], row
            continue
        # siw Terminates and closes; that Terminate is the kernel's, so "none" would be false.
        assert "without a Terminate" not in row["value"], (
            f"{rid}: siw sends a Terminate for this access (its dynamic debug shows ours "
            f"receiving it: test_siw_exchanged_the_rfc_terminates_the_rows_cannot_show); over "
            f"verbs the probe cannot see it, so it must not say there was none: {row['value']}")
        # The connection ends: the QP left RTS (flushed requests) or the peer disconnected.
        assert "flushed" in came_back or "peer disconnected" in came_back, row
        if "_read_" in rid:
            # A Read of a region the peer refused never completes successfully.
            assert "our work request: success" not in came_back, row


def test_siw_exchanged_the_rfc_terminates_the_rows_cannot_show(verbs_probe: VerbsProbeRun) -> None:
    """The kernel's side of the terminate rows: the Terminates are there, only not visible
    to user space, which is why the rows may say no more than "no Terminate visible"."""
    verbs_probe.rows()
    if not verbs_probe.device.iwarp:
        pytest.skip("rxe (RoCE) has no Terminate: a bad access is NAKed")
    if verbs_probe.kernel_terminates is None:
        pytest.skip(f"the guest kernel has no dynamic debug ({DYNDBG})")
    assert verbs_probe.kernel_terminates == RFC_TERMINATES, verbs_probe.kernel_terminates
