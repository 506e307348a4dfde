"""Request/reply across a four-node mesh where every received request is answered, and one
node is slow (each message takes it 2 ms, one at a time): no deadlock, every request gets its
reply, a node never holds more of a peer's messages than its window, memory stays bounded,
and nobody sees a Terminate.

The slow node is offered 3 x 200 requests/s but can answer about 450/s: its senders run out
of credits toward it and their sends are refused (the workload slows to its slowest party),
while it keeps getting, and answering, requests of its own. A deadlock (two sides each
holding the other's requests, no buffer left for a reply) would show as a pair whose replies
stop; the endpoint's reply reserve is what prevents it.
"""

from __future__ import annotations

from itertools import permutations
from typing import Any

from .mesh_support import Mesh, report


RATE = 200             # requests/s per ordered pair
DURATION = 8.0
DRAIN_MS = 3000        # long enough for the slow node to answer everything it accepted
WINDOW = 16
QUEUE_LIMIT = 64
DELAY_US = 2000
SLOW = "n4"
NAMES = ["n1", "n2", "n3", "n4"]
WARMUP = 2.0
RSS_GROWTH_LIMIT_KIB = 4 * 1024


def test_request_reply_with_a_slow_party_answers_everything(lab: Any, tools: dict[str, str],
                                                            run_dir: Any) -> None:
    mesh = Mesh.start(lab.hosts[:4], tools["rdma-mesh"], run_dir, port=7311, names=NAMES,
                      duration=DURATION, rate=RATE, size=64, mode="request-reply",
                      window=WINDOW, queue_limit=QUEUE_LIMIT, report_interval_ms=250,
                      drain_ms=DRAIN_MS, per_node={SLOW: {"handler_delay_us": DELAY_US}})
    try:
        mesh.wait_started(timeout=30)
        mesh.wait(timeout=DURATION + DRAIN_MS / 1000 + 30)
    except BaseException:
        mesh.kill()
        raise

    # No deadlock: on every pair, replies keep arriving in every second of the run, to the end.
    slowest = float("inf")
    for a, b in permutations(NAMES, 2):
        node = mesh.node(a)
        t = 1.0
        while t + 1.0 <= DURATION + 0.01:
            rate = node.rate_from(b, t, t + 1.0, key="app.replies_received")
            assert rate > 0, f"{a} got no reply from {b} in [{t}, {t + 1}] s"
            slowest = min(slowest, rate)
            t += 1.0

    # Every request accepted by send() was delivered and answered, once, in order.
    answered = 0
    for a, b in permutations(NAMES, 2):
        mine = mesh.node(a).summary()["peers"][b]["app"]
        theirs = mesh.node(b).summary()["peers"][a]["app"]
        assert mine["requests_sent"] > 0
        assert theirs["requests_received"] == mine["requests_sent"], (a, b, mine, theirs)
        assert theirs["replies_sent"] == mine["requests_sent"], (a, b, mine, theirs)
        assert mine["replies_received"] == mine["requests_sent"], (a, b, mine, theirs)
        answered += mine["replies_received"]
    for n in mesh.nodes:
        assert n.problems() == []
        assert n.terminates() == [], n.terminates()

    # Hold-back is bounded by the window; memory by configuration.
    max_held = 0
    rss_growth = []
    for n in mesh.nodes:
        for r in n.reports():
            for peer, p in r["peers"].items():
                assert p["held"] <= WINDOW, (n.name, peer, r["t"], p["held"])
                max_held = max(max_held, p["held"])
        rss = n.rss_after(WARMUP)
        rss_growth.append(max(v for _, v in rss) - rss[0][1])
        assert rss_growth[-1] <= RSS_GROWTH_LIMIT_KIB, (n.name, rss)

    slow = mesh.node(SLOW)
    slow_replies_per_s = sum(mesh.node(p).rate_from(SLOW, WARMUP, DURATION,
                                                    key="app.replies_received")
                             for p in NAMES if p != SLOW)
    refused_to_slow = sum(mesh.node(p).summary()["peers"][SLOW]["refused"] for p in NAMES if p != SLOW)
    fast_pair = mesh.node("n1").rate_from("n2", WARMUP, DURATION, key="app.replies_received")
    to_slow = mesh.node("n1").rate_from(SLOW, WARMUP, DURATION, key="app.replies_received")
    report("request/reply, n4 slow (2 ms per message)",
           replies_total=answered, slow_node_replies_per_s=slow_replies_per_s,
           n1_from_n2_replies_per_s=fast_pair, n1_from_n4_replies_per_s=to_slow,
           refused_toward_slow=refused_to_slow, max_held=max_held,
           min_pair_replies_per_s=slowest, max_rss_growth_kib=max(rss_growth))
    # The slow party limits its own pairs, not the others.
    assert fast_pair >= 0.95 * RATE
    assert to_slow < 0.9 * RATE
    # Its senders felt it as refused sends, not as memory.
    assert refused_to_slow > 0
    # Held messages are the hold-back at work: the slow node holds while it works.
    assert max(r["peers"][p]["held"] for r in slow.reports() for p in r["peers"]) > 0
