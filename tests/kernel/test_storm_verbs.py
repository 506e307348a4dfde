"""rdma-storm through the verbs provider, in the guest: a connect storm from rxe1 (10.9.0.2)
against ``rdma-probe serve --listen verbs://10.9.0.1`` on rxe0 with a backlog of 2 and a slow
acceptor, reconciled one for one with the listener's counters as tests/storm does over tcp.

rdma_cm shows a listener each connect request (no TCP connection, no half-open stage), so
the server's "requests" counts the storm's tries where tcp's half_open_opened does; every
other sum is tcp's. The overflow Reject must carry the backlog-full marker through the
RoCE CM's REJ (zero-padded to 148 octets there): the storm counts overflow_rejected from
it, never app_rejected. The verbs listener has no drop policy: asked for one, serve must
refuse rather than quietly reject.

Eight client threads against 2 backlog slots, 2 serving workers and a 200 ms accept delay
keep the listener full from the start, so overflow Rejects are certain, not a race.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from tests.storm.storm_support import PERSONALITY, reconcile, storm_command, total
from tests.support.guest import GUEST_RXE_ADDRESSES, Guest, guest_path, json_lines
from tests.support.tools import built_tool

PORT = 7580
BACKLOG = 2
ACCEPT_DELAY_MS = 200
ATTEMPTS = 24
CONCURRENCY = 8
HOLD_MS = 200


def tool(name: str) -> str:
    return guest_path(built_tool(name))


def serve_command(uri: str, overflow: str) -> str:
    return (f"{tool('rdma-probe')} serve --json --listen {uri} --personality "
            f"{guest_path(PERSONALITY)} --backlog {BACKLOG} --overflow {overflow} "
            f"--accept-delay {ACCEPT_DELAY_MS} --exchange-timeout 2")


@pytest.fixture(scope="module")
def verbs_storm(guest: Guest) -> dict[str, Any]:
    """One storm against one serve; the storm's report, the serve's lines, its exit."""
    if not guest.alive():
        guest.restart()
    # Both rxe addresses are the guest's own: see test_verbs_check_two_node.py.
    guest.check("for i in all veth-a veth-b; do sysctl -qw net.ipv4.conf.$i.accept_local=1 "
                "net.ipv4.conf.$i.rp_filter=0; done")
    server, client = GUEST_RXE_ADDRESSES
    serve = guest.spawn("exec " + serve_command(f"verbs://{server}:{PORT}", "reject"))
    try:
        serve.wait_for_output('"event":"listening"', timeout=15)
        command = storm_command(tool("rdma-storm"),
                                f"verbs://{server}:{PORT}?source={client}", attempts=ATTEMPTS,
                                concurrency=CONCURRENCY, retries=0, hold_ms=HOLD_MS,
                                duration_limit_s=20, timeout_s=10)
        command[command.index("--personality") + 1] = guest_path(PERSONALITY)
        storm = guest.run(" ".join(shlex.quote(c) for c in command), timeout=60)
    finally:
        serve.kill("TERM")  # the serve prints its counters as it stops
    served = serve.wait(timeout=15)
    reports = [r for r in json_lines(storm.output) if r.get("schema") == "rdma-interop/storm/1"]
    lines = json_lines(served.output)
    return {"storm_rc": storm.rc, "storm_raw": storm.output, "report": reports[-1] if reports
            else None, "serve_rc": served.rc, "lines": lines, "serve_raw": served.output}


def test_verbs_storm_reconciles_with_the_listener_counters(verbs_storm: dict[str, Any]) -> None:
    assert verbs_storm["storm_rc"] == 0, verbs_storm["storm_raw"]
    report = verbs_storm["report"]
    assert report is not None, verbs_storm["storm_raw"]
    assert verbs_storm["serve_rc"] == 0, verbs_storm["serve_raw"]
    final = next((ln for ln in reversed(verbs_storm["lines"]) if ln.get("event") == "counters"),
                 None)
    assert final is not None, verbs_storm["serve_raw"]
    counters = {k: int(v) for k, v in final.items() if isinstance(v, int)}
    print(f"\n[storm verbs] outcomes={report['outcomes']} server accepted="
          f"{counters['accepted']} overflow_rejected={counters['overflow_rejected']} "
          f"requests={counters['requests']} high_water={counters['high_water']}")
    assert report["attempts"] == ATTEMPTS and not report["hit_duration_limit"], report
    reconcile([report], counters, per_try="requests")
    # The storm filled the backlog, so the Rejects proved something; and connects got in.
    assert counters["backlog"] == counters["high_water"] == BACKLOG, counters
    assert counters["overflow_rejected"] > 0, counters
    assert total([report], "connected") > 0, report
    # rdma_cm has no half-open stage and this listener no drop queue.
    assert counters["half_open_opened"] == counters["overflow_dropped"] == 0, counters


def test_verbs_overflow_rejects_are_the_serves_backlog_full_setup_failures(
        verbs_storm: dict[str, Any]) -> None:
    """Each overflow Reject the storm counted is one backlog_full line of the serve's."""
    rejected = [ln for ln in verbs_storm["lines"] if ln.get("event") == "connection"
                and (ln.get("error") or {}).get("failure") == "backlog_full"]
    report = verbs_storm["report"]
    assert report is not None
    assert len(rejected) == report["tries_by_outcome"]["overflow_rejected"], rejected
    assert report["outcomes"]["app_rejected"] == 0, report
    assert all(ln["peer"].startswith(GUEST_RXE_ADDRESSES[1] + ":") for ln in rejected), rejected


def test_verbs_serve_refuses_the_drop_policy_it_cannot_apply(live_guest: Guest) -> None:
    r = live_guest.run(serve_command(f"verbs://{GUEST_RXE_ADDRESSES[0]}:{PORT + 1}", "drop"),
                       timeout=30)
    assert r.rc == 2, r.output
    assert "the verbs listener has no drop policy" in r.output, r.output
