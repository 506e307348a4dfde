"""rdma-probe xrc: the node's devices, and the XRC lifetime engine on a simulated node.

This machine has no RDMA device (the kernel tier asks siw and rxe in the guest), so the
device half checks the empty answer and bad input here; the simulation half runs for real.
"""

from __future__ import annotations

from typing import Any, Callable

from .probe_support import Run

RunProbe = Callable[..., Run]


def test_xrc_without_devices_says_so(rdma_probe: RunProbe) -> None:
    text = rdma_probe("xrc")
    assert text.returncode == 0, text.stderr
    assert "no RDMA devices" in text.stdout
    report = rdma_probe("xrc", "--json")
    assert report.returncode == 0
    assert report.json() == {"schema": "rdma-interop/xrc-devices/1", "devices": []}


def test_xrc_unknown_device_is_a_usage_error(rdma_probe: RunProbe) -> None:
    r = rdma_probe("xrc", "--device", "mlx5_9")
    assert r.returncode == 2
    assert "no RDMA device 'mlx5_9'" in r.stderr


def test_simulated_node_keeps_every_guarantee_and_shows_its_state(rdma_probe: RunProbe) -> None:
    r = rdma_probe("xrc", "--simulate", "58130", "--events", "--json")
    assert r.returncode == 0, r.stdout
    report: dict[str, Any] = r.json()
    assert report["schema"] == "rdma-interop/xrc-sim/1"
    assert report["ok"] is True and report["violation"] is None
    assert report["reaps_checked"] > 0
    busiest = report["busiest"]
    assert busiest["tqps"], "the busiest moment must show target QPs"
    # Every TQP shown lives in a domain shown, and its references name processes.
    domains = {d["domain"] for d in busiest["domains"]}
    for tqp in busiest["tqps"]:
        assert tqp["domain"] in domains
        assert tqp["sender_state"] in ("alive", "suspect", "dead")
        assert all(ref["refs"] > 0 for ref in tqp["refs"])
    reaped = [e for e in report["events"] if e["event"] == "tqp_reaped"]
    assert len(reaped) == report["counters"]["tqps_reaped"]
    assert all(e["reason"] in ("sender_dead", "sender_disconnected") for e in reaped)
    assert report["probe"]["detection_bound_ms"] == (
        report["probe"]["interval_ms"] * (report["probe"]["retries"] + 1)
        + report["probe"]["timeout_ms"])


def test_a_seed_replays_to_the_same_trace(rdma_probe: RunProbe) -> None:
    first = rdma_probe("xrc", "--simulate", "11", "--json").json()
    again = rdma_probe("xrc", "--simulate", "11", "--json").json()
    other = rdma_probe("xrc", "--simulate", "12", "--json").json()
    assert first["trace_hash"] == again["trace_hash"]
    assert first == again
    assert other["trace_hash"] != first["trace_hash"]


def test_simulation_table_names_the_verdict(rdma_probe: RunProbe) -> None:
    r = rdma_probe("xrc", "--simulate", "58130", "--probe", "zero_length_read",
                   "--probe-interval", "100", "--probe-retries", "1")
    assert r.returncode == 0, r.stdout
    assert "probe: zero_length_read every 100 ms" in r.stdout
    assert "TQP    DOMAIN  REFS (pid:n)" in r.stdout
    assert "verdict: every lifetime guarantee held" in r.stdout


def test_bad_probe_settings_are_usage_errors(rdma_probe: RunProbe) -> None:
    bad_kind = rdma_probe("xrc", "--simulate", "1", "--probe", "ping")
    assert bad_kind.returncode == 2
    assert "--probe must be zero_length_read or invalid_rkey_read" in bad_kind.stderr
    bad_interval = rdma_probe("xrc", "--simulate", "1", "--probe-interval", "0")
    assert bad_interval.returncode == 2
