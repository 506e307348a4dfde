"""backlog-stat --connections shows a running mesh node's credit figures: the connection to a
stalled peer with its credits gone, its queue at the limit and refused sends, next to a
connection that keeps moving.
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from .mesh_support import Mesh, report


RATE = 200
DURATION = 5.0
QUEUE_LIMIT = 64
REPLY_RESERVE = 1
NAMES = ["n1", "n2", "n3"]


def _connections(tool: str, run_dir: Any, pid: int) -> list[dict[str, Any]]:
    done = subprocess.run(["env", f"RDMA_INTEROP_RUN_DIR={run_dir}", tool, "--connections",
                           "--json", "--pid", str(pid)],
                          capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 0, (
        f"backlog-stat exit {done.returncode}: {done.stderr.strip()} (rdma-mesh passes a "
        f"telemetry::Publisher in EndpointConfig: the endpoint published no connection)")
    doc = json.loads(done.stdout)
    assert doc["schema"] == "rdma-interop/backlog-stat/connections/1", doc
    return doc["connections"]


def test_backlog_stat_shows_a_nodes_credit_figures(lab: Any, tools: dict[str, Any],
                                                  run_dir: Any) -> None:
    tool = tools["backlog-stat"]
    if tool is None:
        pytest.skip("backlog-stat is not built")
    help_text = subprocess.run([tool, "--help"], capture_output=True, text=True).stdout
    if "--connections" not in help_text:
        pytest.skip(f"{tool} has no --connections (an older build)")

    mesh = Mesh.start(lab.hosts[:3], tools["rdma-mesh"], run_dir, port=7341, names=NAMES,
                      duration=DURATION, rate=RATE, size=64, queue_limit=QUEUE_LIMIT,
                      report_interval_ms=250, drain_ms=500)
    try:
        mesh.wait_started(timeout=30)
        t0 = time.monotonic()
        n1 = mesh.node("n1")
        pid = int(n1.events("listening")[0]["pid"])
        time.sleep(1.0)
        mesh.node("n3").stop_process()
        time.sleep(1.5)  # n3's credits and then its queue at n1 run out within 0.4 s
        first = {c["peer"]: c for c in _connections(tool, run_dir, pid)}
        time.sleep(0.6)
        second = {c["peer"]: c for c in _connections(tool, run_dir, pid)}
        seen_at = time.monotonic() - t0
        mesh.node("n3").continue_process()
        mesh.wait(timeout=DURATION + 30)
    except BaseException:
        mesh.kill()
        raise

    assert set(first) == {"n2", "n3"}, first
    for c in first.values():
        assert c["state"] == "connected", c
        assert c["process"] == "rdma-mesh", c
        assert c["queue_limit"] == QUEUE_LIMIT, c
        assert c["scheme"] == "tcp", c
    stalled, moving = second["n3"], second["n2"]
    # The stalled peer: no credit left for data, the queue full, sends refused (and more of
    # them the second time: the sender keeps trying at its rate).
    assert stalled["credit"]["credits"] <= REPLY_RESERVE, stalled
    assert stalled["queued"] == QUEUE_LIMIT, stalled
    assert stalled["refused"] > first["n3"]["refused"] > 0, (first["n3"], stalled)
    # The other connection moves: messages sent between the two looks, none waiting long.
    sent_between = moving["credit"]["sent"] - first["n2"]["credit"]["sent"]
    assert sent_between > 0, (first["n2"], moving)
    assert moving["queued"] < QUEUE_LIMIT, moving
    # backlog-stat and the node's own report agree on what the node says about n3.
    own = [r["peers"]["n3"] for r in n1.reports() if 2.0 <= r["t"] <= seen_at - 0.3]
    assert own and all(p["queued"] == QUEUE_LIMIT for p in own), own
    report("backlog-stat --connections on n1 while n3 is stopped",
           n3_credits=stalled["credit"]["credits"], n3_queued=stalled["queued"],
           n3_refused=stalled["refused"], n2_sent_in_0_6s=sent_between,
           n2_credits=moving["credit"]["credits"])
