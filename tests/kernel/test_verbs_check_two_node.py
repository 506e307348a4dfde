"""verbs-check's two-node form in the guest: ``verbs-check --serve`` on one device answers
``verbs-check --peer`` on another, as the device tier runs it across two lab nodes.

- rxe: the serve on rxe0 (10.9.0.1, veth-a), the client on rxe1 (``--address 10.9.0.2``,
  veth-b): two RoCE devices on the two ends of a veth pair, so every packet leaves one
  device and enters the other. Every check must pass as on one node (test_rxe_semantics.py):
  the dead-peer checks' servers die by SIGKILL at the client's request, and the kernel's
  teardown of the dead process's queue pair is what the client then observes.
- siw: the guest has one iWARP device, so the pair runs through siw0's loopback
  (10.0.2.15 both ends). siw keeps the data path, the zero-length Read and the liveness
  probe; its documented deviations (test_verbs_in_guest.py: a bad-rkey Read flushed instead
  of remote_access_error, a Read to a dead peer neither run nor flushed, success returned
  for a partly posted chain) must show up here as the same device answers (fail), never as
  a harness error.
- Neither side may hang without the other: a client with no serve ends each check in
  "error" within --timeout, a serve with no client gives up on each check after --timeout
  and exits 1.

Both rxe addresses belong to the guest: Linux drops a packet whose source address is its
own (accept_local=0), and reverse-path filtering would call it a martian, so the fixture
sets accept_local=1 and rp_filter=0 on the veth pair first (harmless to the other tests).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome

from tests.support.guest import GUEST_RXE_ADDRESSES, GUEST_SIW_ADDRESS, Guest, guest_path
from tests.support.tools import built_tool

from .kernel_matrix import VERBS_RXE, VERBS_SIW, add_case, attach_crashes, peer_crashes
from .verbs_check_expected import RXE_EXPECTED

#: First port of each pair: check i listens on PORT + i (the agent owns 7000).
RXE_PORT = 7520
SIW_PORT = 7540
LONELY_PORT = 7560
#: The kernel matrix's row for a whole two-node run (group "verbs-check").
TWO_NODE_ROW = "all, two nodes (--serve/--peer)"
KILLING_CHECKS = {"dead-peer-read", "dead-peer-bad-rkey-read", "liveness-probe"}
#: What siw keeps (test_verbs_in_guest.py); the rest are device answers, pass or fail.
SIW_KEEPS = {"send-recv", "write", "read", "zero-length-read", "liveness-probe"}
#: The seconds each check may take (--timeout), on both sides.
CHECK_TIMEOUT_S = 15
#: A whole run: the nine checks take ~15 s on rxe, ~30 s on siw under TCG.
RUN_TIMEOUT_S = 240


def tool() -> str:
    return guest_path(built_tool("verbs-check"))


def lines_of(text: str) -> dict[str, dict[str, Any]]:
    return {r["check"]: r for r in (json.loads(ln) for ln in text.splitlines()
                                    if ln.startswith("{"))}


def run_pair(guest: Guest, serve_address: str, peer_args: str, port: int,
             extra: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """`verbs-check --serve` in the background, then the client; returns both runs:
    {"rc", "checks" (by name), "raw"} each, and the kernel crashes in the client's."""
    mark = guest.console_mark()
    common = f"--port {port} --timeout {CHECK_TIMEOUT_S} --json {extra}"
    serve = guest.spawn(f"{tool()} --serve --address {serve_address} {common}")
    client = guest.run(f"{tool()} {peer_args} {common}", timeout=RUN_TIMEOUT_S)
    try:
        served = serve.wait(timeout=30)
    except TimeoutError:
        serve.kill()
        served = serve.wait(timeout=10)
    crashes = peer_crashes(guest, mark)
    return ({"rc": served.rc, "checks": lines_of(served.output), "raw": served.output},
            {"rc": client.rc, "checks": lines_of(client.output), "raw": client.output,
             "crashes": crashes})


@pytest.fixture(scope="module")
def rxe_pair(guest: Guest) -> tuple[dict[str, Any], dict[str, Any]]:
    if not guest.alive():
        guest.restart()
    guest.check("for i in all veth-a veth-b; do sysctl -qw net.ipv4.conf.$i.accept_local=1 "
                "net.ipv4.conf.$i.rp_filter=0; done")
    server, client = GUEST_RXE_ADDRESSES
    return run_pair(guest, server, f"--peer {server} --address {client}", RXE_PORT)


def test_two_node_rxe_serve_and_peer_pass_every_check(
        rxe_pair: tuple[dict[str, Any], dict[str, Any]], kernel_matrix: InteropMatrix) -> None:
    served, client = rxe_pair
    checks = client["checks"]
    failures = [f"{name}: expected {want}, got {checks.get(name, {}).get('got')} "
                f"({checks.get(name, {}).get('detail', 'no line')})"
                for name, want in RXE_EXPECTED.items()
                if checks.get(name, {}).get("got") != want
                or checks.get(name, {}).get("result") != "pass"]
    cell = CaseResult(
        initiator="ours-verbs@rxe", responder="kernel-rxe", provider="verbs",
        outcome=Outcome.FAIL if failures else Outcome.PASS,
        reason="mismatch" if failures else None,
        negotiated=checks.get("read", {}).get("negotiated"),
        expected="every check passes, rxe1 -> rxe0", group="verbs-check",
        check=TWO_NODE_ROW, peer=VERBS_RXE,
        notes=[f"{len(failures)} check(s) not as expected"] if failures else
        [f"{len(checks)} checks pass, rxe1 -> rxe0"])
    if failures:
        cell.evidence.append(Evidence("text", "checks not as expected", "\n".join(failures)))
    attach_crashes(cell, client["crashes"])
    add_case(kernel_matrix, cell)
    assert not client["crashes"], [c.note() for c in client["crashes"]]
    assert set(checks) == set(RXE_EXPECTED), client["raw"]
    assert not failures, failures
    assert client["rc"] == 0, client["raw"]
    for name, r in checks.items():
        # The client really is the other device: rxe1 on veth-b, the serve's rxe0 on veth-a.
        assert r["device"] == "rxe1" and r["peer"] == GUEST_RXE_ADDRESSES[0], r
        assert r["address"] == GUEST_RXE_ADDRESSES[1], r
        assert f"source={GUEST_RXE_ADDRESSES[1]}" in r["uri"], r
        want = ("killed by the check (die request)" if name in KILLING_CHECKS
                else "remote (verbs-check --serve)")
        assert r["server"] == want, r


def test_two_node_rxe_dead_peer_checks_see_the_killed_server_as_on_one_node(
        rxe_pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    _, client = rxe_pair
    checks = client["checks"]
    for name in ("dead-peer-read", "dead-peer-bad-rkey-read"):
        r = checks[name]
        assert "IBV_WC_RETRY_EXC_ERR" in r.get("connection", ""), r
        assert 0 < r["completion_ms"] <= 10_000, r
        assert "asked to die; its disconnect came" in r["detail"], r
    assert checks["dead-peer-bad-rkey-read"]["probe_outcome"] == "no_answer"
    probe = checks["liveness-probe"]
    assert probe["live_answered"] >= 3 and probe["live_failed"] == 0, probe
    assert 0 < probe["found_dead_ms"] <= probe["probe"]["detection_bound_ms"] + 1000, probe


def test_two_node_rxe_serve_reports_each_server_ending_as_its_check_needs(
        rxe_pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    served, _ = rxe_pair
    assert served["rc"] == 0, served["raw"]
    assert list(served["checks"]) == list(RXE_EXPECTED), served["raw"]
    for name, r in served["checks"].items():
        want = "killed as requested" if name in KILLING_CHECKS else "exit 0"
        assert r["server"] == r["expected"] == want, r
        assert r["ok"] and r["result"] == "pass", r
        assert r["device"] == "rxe0" and r["port"] == RXE_PORT + list(RXE_EXPECTED).index(name)
        assert r["client"].startswith(GUEST_RXE_ADDRESSES[1] + ":"), r


def test_two_node_siw_loopback_keeps_the_one_node_results(
        live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    served, client = run_pair(live_guest, GUEST_SIW_ADDRESS, f"--peer {GUEST_SIW_ADDRESS}",
                              SIW_PORT)
    checks = client["checks"]
    assert set(checks) == set(RXE_EXPECTED), client["raw"]
    failed = [c for c in checks.values() if c["result"] == "fail"]
    cell = CaseResult(
        initiator="ours-verbs@siw", responder="kernel-siw", provider="verbs",
        outcome=Outcome.FINDING if failed else Outcome.PASS,
        reason="deviation" if failed else None, group="verbs-check", check=TWO_NODE_ROW,
        peer=VERBS_SIW, negotiated=checks["read"].get("negotiated"),
        expected="every check as on one node",
        notes=[f"siw answers otherwise in {', '.join(c['check'] for c in failed)} (as on one "
               "node)"] if failed else [f"{len(checks)} checks pass"])
    if failed:
        cell.evidence.append(Evidence("text", "what verbs-check saw", "\n".join(
            f"{c['check']}: expected {c['expected']}, got {c['got']}: {c['detail']}"
            for c in failed)))
    attach_crashes(cell, client["crashes"])
    add_case(kernel_matrix, cell)
    for name in SIW_KEEPS:
        assert checks[name]["result"] == "pass", checks[name]
    for c in checks.values():
        assert c["device"] == "siw0" and c["transport"] == "iwarp", c
        assert c["result"] in ("pass", "fail"), c  # a device answer, not a harness error
    # iWARP: no retry counter, the dead peer's kernel closes the TCP connection.
    assert checks["dead-peer-read"]["expected"] == "flushed"
    # The serve's side is the same on iWARP: every server ended as its check needs.
    assert served["rc"] == 0, served["raw"]
    for name, r in served["checks"].items():
        assert r["ok"] and r["device"] == "siw0", r
        assert r["server"] == ("killed as requested" if name in KILLING_CHECKS else "exit 0"), r


def test_two_node_client_without_serve_errors_within_its_timeout(live_guest: Guest) -> None:
    start = time.monotonic()
    r = live_guest.run(f"{tool()} --peer {GUEST_RXE_ADDRESSES[0]} --address "
                       f"{GUEST_RXE_ADDRESSES[1]} --port {LONELY_PORT} --check send-recv "
                       f"--check dead-peer-read --timeout 3 --json", timeout=60)
    elapsed = time.monotonic() - start
    checks = lines_of(r.output)
    assert r.rc == 1, r.output
    assert set(checks) == {"send-recv", "dead-peer-read"}, r.output
    for c in checks.values():
        assert c["result"] == "error" and "nothing listens there" in c["detail"], c
        assert c["elapsed_ms"] <= 3000 + 1500, c
        assert c["server"] == "remote (verbs-check --serve)", c  # it never asked for a death
    assert elapsed < 30, elapsed


def test_two_node_serve_without_client_gives_up_and_exits_1(live_guest: Guest) -> None:
    start = time.monotonic()
    r = live_guest.run(f"{tool()} --serve --address {GUEST_RXE_ADDRESSES[0]} "
                       f"--port {LONELY_PORT} --check send-recv --check liveness-probe "
                       f"--timeout 2 --json", timeout=60)
    elapsed = time.monotonic() - start
    checks = lines_of(r.output)
    assert r.rc == 1, r.output
    assert set(checks) == {"send-recv", "liveness-probe"}, r.output
    for c in checks.values():
        assert c["result"] == "error" and c["server"] == "exit 2" and c["client"] is None, c
        assert "no client connected within 2 s" in c["detail"], c
    assert elapsed < 30, elapsed


def test_two_node_serve_stops_cleanly_on_sigterm(live_guest: Guest) -> None:
    serve = live_guest.spawn(f"exec {tool()} --serve --address {GUEST_RXE_ADDRESSES[0]} "
                             f"--port {LONELY_PORT} --timeout 60")
    time.sleep(1.5)  # its first server child is listening
    live_guest.check(f"kill -TERM $(cat /tmp/job-{serve.job_id}.pid)")
    done = serve.wait(timeout=10)
    assert done.rc == 0, done.output
    assert f"stopped by signal 15 after 1 of {len(RXE_EXPECTED)} check(s)" in done.output, \
        done.output
    # No server child is left behind.
    left = live_guest.run("ps -o args | grep -c '[v]erbs-check --serve'")
    assert left.output.strip() == "0", left.output
