"""A peer that sends without credits gets the protocol's Terminate, and only its connection
ends.

Node h is healthy but slow (each received message takes it 0.5 ms, one at a time), so the
credits it grants run out for a fast sender. Node m (--ignore-credits) sends to h as fast as it
can, beyond its credits: h must end that connection with a Terminate, DDP untagged buffer
error "no buffer" (RFC 5041 s7.2, layer 1, etype 2, code 0x02), which m receives. Nodes g1
and g2 exchange a fixed rate with h and each other all along: those connections keep their
throughput and never see a Terminate.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

from .mesh_support import NO_BUFFER_TERMINATE, Mesh, report


RATE = 200  # messages/s per ordered healthy pair
DURATION = 5.0
TOPOLOGY = {"g1": ["g2", "h"], "g2": ["g1", "h"], "h": ["g1", "g2", "m"], "m": ["h"]}
HEALTHY = ["g1", "g2", "h"]


def _cause(t: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if t is None else {k: t[k] for k in ("layer", "etype", "code")}


def test_peer_sending_without_credit_is_terminated_alone(lab: Any, tools: dict[str, str],
                                                         run_dir: Any) -> None:
    mesh = Mesh.start(lab.hosts[:4], tools["rdma-mesh"], run_dir, port=7321,
                      names=list(TOPOLOGY), topology=TOPOLOGY, duration=DURATION, rate=RATE,
                      size=64, report_interval_ms=250, drain_ms=500,
                      per_node={"h": {"handler_delay_us": 500},
                                "m": {"ignore_credits": True, "rate": 0}})
    try:
        mesh.wait_started(timeout=30)
        mesh.wait(timeout=DURATION + 30)
    except BaseException:
        mesh.kill()
        raise

    h, m = mesh.node("h"), mesh.node("m")
    # m's connection ended with the Terminate h sent it.
    h_view = h.summary()["peers"]["m"]
    m_view = m.summary()["peers"]["h"]
    assert h_view["state"] == "failed", h_view
    assert _cause(h_view["terminate_sent"]) == NO_BUFFER_TERMINATE, h_view
    assert m_view["state"] == "failed", m_view
    assert _cause(m_view["terminate_received"]) == NO_BUFFER_TERMINATE, m_view
    failed_at = [e["t"] for e in h.events("peer_failed") if e["peer"] == "m"]
    assert failed_at and failed_at[0] < 1.0, failed_at  # at once, not at the end of the run

    # Everyone else: untouched.
    rates = {}
    for a, b in permutations(HEALTHY, 2):
        node = mesh.node(a)
        rates[f"{a}<-{b}"] = node.rate_from(b, 1.0, DURATION)
        assert rates[f"{a}<-{b}"] >= 0.95 * RATE, (a, b, rates)
        p = node.summary()["peers"][b]
        assert p["state"] == "connected", (a, b, p)
        assert p["app"]["sequence_errors"] == 0
    for name in ("g1", "g2"):
        assert mesh.node(name).terminates() == [], mesh.node(name).terminates()
    assert [t for t in h.terminates() if t[0] != "m"] == [], h.terminates()

    report("misbehaving peer m (--ignore-credits) toward slow h",
           terminate=f"{h_view['terminate_sent']['text']}", terminated_at_s=failed_at[0],
           m_sent_before_terminate=m_view["sent"], h_received_from_m=h_view["received"],
           h_window=16, **{f"rate_{k}": v for k, v in rates.items()})
