"""Connect storms against a listener with backlog 64 and a deliberately slow acceptor, once
per overflow policy, and a half-open flood next to legitimate clients.

Four client hosts run rdma-storm at once (96 client threads against 64 slots, so the
listener is saturated all along); the server host runs `rdma-probe serve --backlog 64
--overflow drop|reject --accept-delay 5`. While the storm runs, backlog-stat --json is
polled in the server's namespace every 150 ms, and the serve's VmRSS with it.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.support.paths import DEBIAN_PYTHON

from .storm_support import (HALF_OPEN_FLOOD, OUTCOMES, StormServer, jain, reconcile, run_storms,
                            storm_command, total)

BACKLOG = 64
ACCEPT_DELAY_MS = 5
ATTEMPTS_PER_CLIENT = 750
CONCURRENCY_PER_CLIENT = 24
RETRIES = 3
#: Server memory: the serve's RSS may grow only by the state of the connections it holds at
#: once, which the configuration bounds: 64 pending + at most 256 half-open + the overflow
#: waiters of at most 240 client threads, ~560 connections, each an MPA session with its
#: buffers and queues well under 64 KiB: ~35 MiB at worst, 32 MiB in practice (measured:
#: under 1 MiB of growth). Everything else the serve holds is fixed. A leak of 4 KiB per
#: connection over a storm's ~8k connections would cross it.
RSS_GROWTH_LIMIT_KIB = 32 * 1024


def _report(title: str, **figures: Any) -> None:
    print(f"\n[storm] {title}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def _check_samples(server: StormServer) -> dict[str, Any]:
    sampled = [s.counters for s in server.samples if s.counters]
    assert sampled, f"backlog-stat never showed the listener: {server.sampler_errors[-3:]}"
    max_pending = max(int(c["pending"]) for c in sampled)
    max_high_water = max(int(c["high_water"]) for c in sampled)
    for c in sampled:
        assert int(c["backlog"]) == BACKLOG
        assert int(c["pending"]) <= BACKLOG, c
        assert int(c["high_water"]) <= BACKLOG, c
    # The storm must have filled the backlog, or the test proves nothing.
    assert max_high_water == BACKLOG, f"the storm never saturated the listener: {max_high_water}"
    events = server.backlog_events()
    max_event_pending = max((int(e["pending"]) for e in events), default=0)
    assert max_event_pending <= BACKLOG
    return {"samples": len(sampled), "max_pending_sampled": max_pending,
            "backlog_events": len(events), "max_pending_events": max_event_pending}


def _check_memory(server: StormServer) -> dict[str, Any]:
    rss = server.rss_kib()
    assert len(rss) >= 4, "too few VmRSS samples"
    baseline, peak = rss[0], max(rss)
    assert peak - baseline <= RSS_GROWTH_LIMIT_KIB, f"RSS grew {peak - baseline} KiB"
    return {"rss_start_kib": baseline, "rss_peak_kib": peak}


def _run_storm(lab: Any, tools: dict[str, str], run_dir: Any, *, overflow: str, port: int,
               accept_delay_ms: int, attempts: int, concurrency: int,
               retries: int) -> tuple[list[dict[str, Any]], dict[str, Any], StormServer, float]:
    """One serve on host 0, rdma-storm on every other host at once; every check that holds
    for any storm. Returns the reports, the server's final counters, the server, the time."""
    server_host, clients = lab.hosts[0], lab.hosts[1:]
    server = StormServer.start(server_host, tools["rdma-probe"], tools["backlog-stat"], run_dir,
                               port=port, backlog=BACKLOG, overflow=overflow,
                               accept_delay_ms=accept_delay_ms)
    try:
        time.sleep(0.5)  # a baseline RSS sample before the storm
        start = time.monotonic()
        commands = [storm_command(tools["rdma-storm"], server.uri, attempts=attempts,
                                  concurrency=concurrency, retries=retries,
                                  seed=100 * i + 1, duration_limit_s=75)
                    for i in range(len(clients))]
        reports = run_storms(clients, commands, timeout=120)
        storm_s = time.monotonic() - start
        settled = server.wait_settled(timeout=15)
    finally:
        final = server.stop()
    assert final is not None, f"serve printed no counters line: {server.stderr_lines[-3:]}"
    assert settled is not None, f"backlog-stat never settled: {server.sampler_errors[-3:]}"
    # backlog-stat's last view and the serve's own final word agree.
    for key in ("requests", "accepted", "rejected_by_app", "overflow_rejected",
                "overflow_dropped", "half_open_opened"):
        assert int(settled[key]) == int(final[key]), (key, settled, final)
    counters = {k: int(v) for k, v in final.items() if isinstance(v, int)}
    reconcile(reports, counters)
    return reports, counters, server, storm_s


def _fairness_and_report(title: str, reports: list[dict[str, Any]], counters: dict[str, Any],
                         server: StormServer, storm_s: float) -> None:
    sample_figures = _check_samples(server)
    memory = _check_memory(server)
    per_client = [int(r["outcomes"]["connected"]) for r in reports]
    per_thread = [int(t["connected"]) for r in reports for t in r["threads"]]
    fairness = jain(per_client)
    _report(title, attempts=sum(r["attempts"] for r in reports),
            tries=sum(r["tries"] for r in reports),
            **{k: total(reports, k) for k in OUTCOMES},
            server_accepted=counters["accepted"],
            server_overflow_rejected=counters["overflow_rejected"],
            server_overflow_dropped=counters["overflow_dropped"],
            server_half_open_expired=counters["half_open_expired"],
            server_half_open_evicted=counters["half_open_evicted"],
            jain_clients=round(fairness, 4), jain_threads=round(jain(per_thread), 4),
            storm_s=round(storm_s, 1), **sample_figures, **memory)
    # Fairness over the client hosts, each asking for the same number of attempts. (Per
    # thread the reject policy is a lottery of a few connects each: reported, not judged.)
    assert fairness >= 0.9, f"clients served unfairly: {per_client}"
    assert total(reports, "connected") > 0


@pytest.mark.parametrize("overflow", ["drop", "reject"])
def test_storm_is_served_within_the_backlog(lab: Any, tools: dict[str, str], run_dir: Any,
                                            overflow: str) -> None:
    reports, counters, server, storm_s = _run_storm(
        lab, tools, run_dir, overflow=overflow, port=7300, accept_delay_ms=ACCEPT_DELAY_MS,
        attempts=ATTEMPTS_PER_CLIENT, concurrency=CONCURRENCY_PER_CLIENT, retries=RETRIES)
    _fairness_and_report(f"policy {overflow}", reports, counters, server, storm_s)
    if overflow == "reject":
        assert counters["overflow_rejected"] > 0 and counters["overflow_dropped"] == 0
    else:
        assert counters["overflow_rejected"] == 0


def test_drop_storm_closes_requests_that_wait_too_long(lab: Any, tools: dict[str, str],
                                                      run_dir: Any) -> None:
    """An acceptor too slow for the queue: 240 clients against 64 slots at 20 accepts/s, so
    the last of the 176 waiting Requests would wait ~9 s, over the listener's 5 s overflow
    timeout. Those are closed unanswered (overflow_dropped), and each client sees exactly
    that attempt as expired, long before its own 20 s reply timeout (so the listener alone
    decides which attempts expire, and the two sides cannot race)."""
    reports, counters, server, storm_s = _run_storm(
        lab, tools, run_dir, overflow="drop", port=7302, accept_delay_ms=50, attempts=90,
        concurrency=60, retries=0)
    _fairness_and_report("policy drop, slow acceptor", reports, counters, server, storm_s)
    assert counters["overflow_dropped"] > 0
    assert total(reports, "expired") == counters["overflow_dropped"]
    assert counters["pending_aborted"] == 0


def test_half_open_flood_does_not_stop_legitimate_clients(lab: Any, tools: dict[str, str],
                                                         run_dir: Any) -> None:
    server_host, flooder, legit = lab.hosts[0], lab.hosts[1], lab.hosts[2:4]
    half_open_limit = 128
    flood_count, flood_hold_s = 400, 6.0
    server = StormServer.start(server_host, tools["rdma-probe"], tools["backlog-stat"], run_dir,
                               port=7301, backlog=BACKLOG, overflow="reject",
                               accept_delay_ms=ACCEPT_DELAY_MS,
                               extra=["--half-open-limit", str(half_open_limit)])
    flood = None
    try:
        flood = flooder.popen([DEBIAN_PYTHON, "-c", HALF_OPEN_FLOOD, server_host.address,
                               server.address.rsplit(":", 1)[1], str(flood_count),
                               str(flood_hold_s)])
        assert flood.stdout is not None
        opened = json.loads(flood.stdout.readline())
        assert opened["connected"] >= flood_count // 2, opened
        # The flood is in place: legitimate clients now, while it holds.
        commands = [storm_command(tools["rdma-storm"], server.uri, attempts=100, concurrency=4,
                                  retries=3, seed=7 + i, timeout_s=5, duration_limit_s=30)
                    for i in range(len(legit))]
        reports = run_storms(legit, commands, timeout=60)
        out, _ = flood.communicate(timeout=flood_hold_s + 30)
        flood_done = json.loads(out.strip().splitlines()[-1])
        settled = server.wait_settled(timeout=15)
    finally:
        if flood is not None and flood.poll() is None:
            flood.kill()
        final = server.stop()
    counters = final if final is not None else settled
    assert counters is not None, "no server counters"
    _check_memory(server)
    for r in reports:
        assert r["outcomes"]["connected"] == r["attempts"] == r["planned"], r["outcomes"]
        # Bound: a legitimate client never waits for a flood connection to expire
        # (request timeout 2 s): eviction of the oldest half-open makes room at once.
        assert r["latency_ms"]["connected"]["max"] < 2000, r["latency_ms"]
    _report("half-open flood", flood=opened, flood_done=flood_done,
            legit_connected=sum(r["outcomes"]["connected"] for r in reports),
            legit_p99_ms=max(r["latency_ms"]["connected"]["p99"] for r in reports),
            legit_max_ms=max(r["latency_ms"]["connected"]["max"] for r in reports),
            half_open_opened=counters["half_open_opened"],
            half_open_evicted=counters["half_open_evicted"],
            half_open_expired=counters["half_open_expired"],
            half_open_limit=counters["half_open_limit"])
    assert int(counters["half_open_limit"]) == half_open_limit
    assert int(counters["half_open_evicted"]) > 0
    assert int(counters["half_open_expired"]) > 0
    assert int(counters["half_open_opened"]) >= opened["connected"]
    assert int(counters["pending"]) <= BACKLOG
