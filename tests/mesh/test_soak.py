"""A soak: four nodes exchange requests and replies for 50 s, one of them slow, and every
node's RSS is sampled every half second. After warmup memory must not trend upwards: the
endpoint allocates its buffers at setup and bounds every queue, so a leak per message (a
held message never freed, a queue that only grows) would show as a slope.

Each node sends and receives ~3,600 messages/s (requests and replies), ~160,000 after warmup:
a leak of even 8 octets per message would grow RSS by ~28 KiB/s, ~1.2 MiB over the soak, over
both limits below.
"""

from __future__ import annotations

from typing import Any

from .mesh_support import Mesh, report, slope_per_s

RATE = 300            # requests/s per ordered pair
DURATION = 50.0
WARMUP = 5.0
NAMES = ["n1", "n2", "n3", "n4"]
#: After warmup: the fitted RSS slope, and the growth from the first to the last 10 samples.
SLOPE_LIMIT_KIB_PER_S = 16.0    # 0.7 MiB over the soak
GROWTH_LIMIT_KIB = 1024


def test_soak_memory_does_not_grow(lab: Any, tools: dict[str, str], run_dir: Any) -> None:
    mesh = Mesh.start(lab.hosts[:4], tools["rdma-mesh"], run_dir, port=7331, names=NAMES,
                      duration=DURATION, rate=RATE, size=256, mode="request-reply",
                      report_interval_ms=500, drain_ms=1500,
                      per_node={"n4": {"handler_delay_us": 500}})
    try:
        mesh.wait_started(timeout=30)
        mesh.wait(timeout=DURATION + 40)
    except BaseException:
        mesh.kill()
        raise

    figures: dict[str, Any] = {}
    for n in mesh.nodes:
        rss = n.rss_after(WARMUP)
        assert len(rss) >= 80, f"{n.name}: only {len(rss)} RSS samples"
        slope = slope_per_s(rss)
        head = sum(v for _, v in rss[:10]) / 10
        tail = sum(v for _, v in rss[-10:]) / 10
        messages = sum(p["received"] + p["sent"] for p in n.summary()["peers"].values())
        figures[f"{n.name}_rss_kib"] = f"{rss[0][1]}->{rss[-1][1]}"
        figures[f"{n.name}_slope_kib_per_s"] = round(slope, 2)
        figures[f"{n.name}_messages"] = messages
        assert slope <= SLOPE_LIMIT_KIB_PER_S, (n.name, slope, rss)
        assert tail - head <= GROWTH_LIMIT_KIB, (n.name, head, tail)
        assert n.problems() == []
        assert n.terminates() == []
        for peer, p in n.summary()["peers"].items():
            app = p["app"]
            assert app["replies_received"] == app["requests_sent"], (n.name, peer, app)
    report(f"soak {DURATION:g} s, 4 nodes request/reply, n4 slow", **figures)
