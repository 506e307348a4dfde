"""rdma-mesh over verbs:// on the kernel's rxe (RoCE v2), in the guest: four nodes stream 64 B
messages to each other at a fixed rate; in one run the fourth is stopped (SIGSTOP) for the
middle of it. The three healthy nodes keep at least 95% of the rate they have between them in
the same run without the stall, nobody fails or sees an error, and the stalled node's senders
are refused (back-pressure reached them as credits, not as RNR NAKs or errors): issue 20's
stalled-peer figure on real verbs and the kernel's RDMA stack, not only on our tcp provider.

The guest is one TCG vCPU: four nodes share it, so the offered rate is low and the figure is
the ratio of two runs on the same guest, not an absolute rate. Two rxe devices on a veth pair
(10.9.0.1, 10.9.0.2) carry the connections, two nodes on each.
"""

from __future__ import annotations

import json
import shlex
import time
from itertools import permutations
from typing import Any

import pytest

from tests.support.guest import GUEST_RXE_ADDRESSES, Guest, guest_path
from tests.support.tools import built_tool

RATE = 40            # messages/s per ordered pair
DURATION = 10.0
STOP_AT = 3.0        # seconds from the start barrier (the reports' t)
CONT_AT = 8.5
MEASURE = (4.0, 8.0)  # the stall, once its senders' queues are full
NODES = {"n1": (GUEST_RXE_ADDRESSES[0], 7601), "n2": (GUEST_RXE_ADDRESSES[1], 7602),
         "n3": (GUEST_RXE_ADDRESSES[0], 7603), "n4": (GUEST_RXE_ADDRESSES[1], 7604)}
HEALTHY = ["n1", "n2", "n3"]
STALLED = "n4"


def _tool() -> str:
    return guest_path(built_tool("rdma-mesh"))


def _command(name: str) -> str:
    address, port = NODES[name]
    cmd = [_tool(), "node", "--name", name, "--listen", f"verbs://{address}:{port}", "--json",
           "--duration", str(DURATION), "--rate", str(RATE), "--size", "64", "--window", "16",
           "--queue-limit", "64", "--report-interval-ms", "250", "--drain-ms", "1500",
           "--setup-timeout", "60"]
    for peer, (peer_address, peer_port) in NODES.items():
        if peer != name:
            cmd += ["--peer", f"{peer}=verbs://{peer_address}:{peer_port}"]
    return "exec " + " ".join(shlex.quote(c) for c in cmd)


def _lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            out.append(doc)
    return out


def _run(guest: Guest, *, stall: bool) -> dict[str, list[dict[str, Any]]]:
    """One mesh run; every node's JSON lines."""
    jobs = {name: guest.spawn(_command(name)) for name in NODES}
    try:
        for job in jobs.values():
            job.wait_for_output('"event":"started"', timeout=90)
        started = time.monotonic()
        if stall:
            pid = next(d["pid"] for d in _lines(jobs[STALLED].output())
                       if d.get("event") == "listening")
            time.sleep(max(0.0, started + STOP_AT - time.monotonic()))
            guest.check(f"kill -STOP {pid}")
            time.sleep(max(0.0, started + CONT_AT - time.monotonic()))
            guest.check(f"kill -CONT {pid}")
        results = {name: job.wait(timeout=DURATION + 90) for name, job in jobs.items()}
    except BaseException:
        for job in jobs.values():
            job.kill()
        raise
    for name, r in results.items():
        assert r.rc == 0, f"{name} exited {r.rc}: {r.output[-1500:]}"
    return {name: _lines(r.output) for name, r in results.items()}


def _rate(lines: list[dict[str, Any]], peer: str) -> float:
    """Messages/s a node received from `peer` during MEASURE, from its reports."""
    window = [d for d in lines if d.get("event") == "report" and MEASURE[0] <= d["t"] <= MEASURE[1]]
    assert len(window) >= 2, "fewer than 2 reports in the measured window"
    a, b = window[0], window[-1]
    count = (int(b["peers"][peer]["app"]["stream_received"])
             - int(a["peers"][peer]["app"]["stream_received"]))
    return count / (b["t"] - a["t"])


def _healthy_rate(run: dict[str, list[dict[str, Any]]]) -> float:
    return sum(_rate(run[a], b) for a, b in permutations(HEALTHY, 2))


def _summary(lines: list[dict[str, Any]]) -> dict[str, Any]:
    found = [d for d in lines if d.get("event") == "summary"]
    assert found, "no summary line"
    return found[-1]


@pytest.fixture(scope="module")
def runs(guest: Guest) -> dict[str, dict[str, list[dict[str, Any]]]]:
    if not guest.alive():
        guest.restart()
    # Connections between the guest's own two addresses (see test_verbs_check_two_node.py).
    guest.check("for i in all veth-a veth-b; do sysctl -qw net.ipv4.conf.$i.accept_local=1 "
                "net.ipv4.conf.$i.rp_filter=0; done")
    return {"baseline": _run(guest, stall=False), "stalled": _run(guest, stall=True)}


def test_every_node_ends_ok_and_no_connection_fails(runs: dict[str, Any]) -> None:
    for label, run in runs.items():
        for name, lines in run.items():
            summary = _summary(lines)
            bad = {peer: p["state"] for peer, p in summary["peers"].items()
                   if p["state"] == "failed" or p["app"]["sequence_errors"]}
            assert not bad, f"{label}: {name}: {bad}"
            assert not [d for d in lines if d.get("event") == "peer_failed"], (label, name)


def test_healthy_nodes_keep_95_percent_while_one_is_stopped(runs: dict[str, Any]) -> None:
    baseline = _healthy_rate(runs["baseline"])
    stalled = _healthy_rate(runs["stalled"])
    offered = RATE * len(HEALTHY) * (len(HEALTHY) - 1)
    print(f"\n[mesh-verbs] rxe, healthy msgs/s: baseline {baseline:.1f}, with {STALLED} "
          f"stopped {stalled:.1f} (offered {offered}): {stalled / baseline:.3f}x", flush=True)
    assert baseline >= 0.8 * offered, f"the unstalled mesh carried {baseline:.1f} of {offered}"
    assert stalled >= 0.95 * baseline


def test_the_stalled_nodes_senders_were_refused_not_failed(runs: dict[str, Any]) -> None:
    for name in HEALTHY:
        peer = _summary(runs["stalled"][name])["peers"][STALLED]
        assert peer["state"] == "connected", peer
        assert peer["refused"] > 0, f"{name} was never refused by the stopped {STALLED}"
        assert peer["terminate_received"] is None and peer["terminate_sent"] is None
