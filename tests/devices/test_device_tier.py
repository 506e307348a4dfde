"""The device tier across a two-guest lab: every group between the nodes' real kernel devices
(siw with siw, rxe with rxe) over real SSH, then a device that goes away and a node that dies.

Tests run in file order against one lab: the node-death test comes last.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

import pytest

from rdma_interop.device_groups import GROUPS
from rdma_interop.device_tier import TOOL_NAMES, DeviceTier, main
from rdma_interop.lab import SshHost

from tests.support.paths import results_dir

from .guest_lab import GuestLab

KINDS = {"siw0": "iwarp", "rxe0": "roce-v2"}
LINK = {"siw0": "198.18.4", "rxe0": "198.18.5"}


def groups(*names: str) -> list:
    chosen = [g for g in GROUPS if g.name in names]
    assert len(chosen) == len(names)
    return chosen


def on_cell(after: int, action: Callable[[], None]) -> Callable[[str], None]:
    """A progress callback that runs `action` once, after `after` cells have been reported."""
    seen = {"cells": 0, "done": False}

    def progress(line: str) -> None:
        print(line, flush=True)
        if " -> " in line and "round" not in line:
            seen["cells"] += 1
            if seen["cells"] == after and not seen["done"]:
                seen["done"] = True
                action()

    return progress


def test_each_node_lists_its_devices(lab_hosts: list[SshHost]) -> None:
    tier = DeviceTier(lab_hosts, [])
    tier.discover()
    for number, node in enumerate(tier.matrix.nodes, 1):
        assert node.status == "ok", node.detail
        by_name = {d["name"]: d for d in node.devices}
        assert set(KINDS) <= set(by_name), by_name.keys()
        for name, kind in KINDS.items():
            dev = by_name[name]
            assert dev["kind"] == kind
            ports = dev["ports"]
            assert ports[0]["state"] == "ACTIVE"
            assert any(a.split("/")[0] == f"{LINK[name]}.{number}" for a in ports[0]["addresses"])
            xrc = dev["capabilities"]["xrc"]
            assert not xrc["supported"] and xrc["detail"], xrc


def test_device_matrix(lab_hosts: list[SshHost]) -> None:
    matrix = DeviceTier(lab_hosts).run()
    # FINDINGs are JUnit failures only in a strict run (interop-run --strict).
    matrix.write(results_dir("devices"), strict=os.environ.get("RDMA_INTEROP_STRICT") == "1")
    print(matrix.render_text())
    assert matrix.schedule == [[("node1", "node2")], [("node2", "node1")]]
    cells = {(c.group, c.initiator, c.responder): c for c in matrix.cells}
    # siw's known deviations (a bad-rkey Read flushed, not remote_access_error; a Read to a
    # dead peer neither run nor flushed; success for a partly posted chain, sq-overflow) are
    # FINDINGs of verbs-check, with evidence.
    # Between two siw nodes some of verbs-check's connects failed in setup in every CI run
    # (RDMA_CM_EVENT_CONNECT_ERROR -22): its server spoke first, which MPA forbids a responder,
    # and siw's initiator read into that message behind the MPA Reply. Fixed (the client
    # says hello first); still let through as a FAIL that must say so, until runs show the
    # other suspect gone too: after a check that kills its server, the serve's next server
    # may stop waiting before the client comes (then "refused" while the serve listens).
    def known(c: object) -> bool:
        return (c.group == "verbs-check" and c.kind == "iwarp"  # type: ignore[attr-defined]
                and (c.verdict == "finding"  # type: ignore[attr-defined]
                     or (c.verdict == "fail" and "connect:" in c.detail)))  # type: ignore[attr-defined]

    bad = [c for c in matrix.cells if c.verdict not in ("pass", "skip") and not known(c)]
    assert not bad, "\n".join(f"{c.group} {c.initiator} -> {c.responder}: {c.verdict} {c.detail}"
                              for c in bad)
    for c in matrix.cells:
        if c.verdict == "finding":
            assert "expected" in c.detail and "got" in c.detail, c
    for group in GROUPS:
        for ini, res in (("node1", "node2"), ("node2", "node1")):
            for dev in KINDS:
                cell = cells[(group.name, f"{ini}/{dev}", f"{res}/{dev}")]
                if cell.verdict == "skip":
                    assert cell.detail, cell
    for tool in ("ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_send_lat", "ib_write_lat",
                 "ib_read_lat"):
        for dev in KINDS:
            cell = cells[(tool, f"node1/{dev}", f"node2/{dev}")]
            assert cell.verdict == "pass" and re.fullmatch(r"[\d.]+ (Gbit/s|µs)", cell.figure or "")
    for dev in KINDS:  # neither kernel device has XRC: the device's own answer is the reason
        xsrq = cells[("ibv_xsrq_pingpong", f"node1/{dev}", f"node2/{dev}")]
        assert xsrq.verdict == "skip" and "XRC" in xsrq.detail
    # The rdma-core tools that need no hand-made QPs ran on both kinds, both ways.
    for tool in ("rping", "ucmatose", "rdma_server/rdma_client", "rdma-probe exchange",
                 "rdma-probe probe", "rdma-storm", "rdma-mesh"):
        for ini, res in (("node1", "node2"), ("node2", "node1")):
            for dev in KINDS:
                assert cells[(tool, f"{ini}/{dev}", f"{res}/{dev}")].verdict == "pass"
    for ini, res in (("node1", "node2"), ("node2", "node1")):  # RoCE keeps every RC semantic
        assert cells[("verbs-check", f"{ini}/rxe0", f"{res}/rxe0")].verdict == "pass"


def test_a_device_that_goes_away_ends_in_a_clear_cell(guest_lab: GuestLab,
                                                      lab_hosts: list[SshHost]) -> None:
    node2 = guest_lab.guests[1]
    chosen = groups("rping", "ucmatose", "rdma_server/rdma_client")
    # The first pair's cells run siw0 first: after its first cell, siw0 leaves node2.
    tier = DeviceTier(lab_hosts, chosen,
                      progress=on_cell(1, lambda: node2.check("rdma link delete siw0")))
    try:
        matrix = tier.run()
    finally:
        node2.check("rdma link show siw0/1 >/dev/null 2>&1 || "
                    "rdma link add siw0 type siw netdev $(ip -o addr show to 198.18.4.2 | "
                    "awk '{print $2}')")
    print(matrix.render_text())
    siw = [c for c in matrix.cells if "siw0" in c.initiator and c.group != "cleanup"]
    after = siw[1:]  # the first ran before the device went
    assert siw[0].verdict == "pass"
    assert after[0].verdict == "fail" and "went away" in after[0].detail, after[0]
    assert all(c.verdict in ("fail", "skip") and "went away" in c.detail for c in after), after
    rxe = [c for c in matrix.cells if "rxe0" in c.initiator]
    assert rxe and all(c.verdict == "pass" for c in rxe), [(c.group, c.detail) for c in rxe]
    assert not [c for c in matrix.cells if c.group == "cleanup"]


def test_a_node_that_dies_ends_in_clear_cells_and_leaves_nothing_running(
        guest_lab: GuestLab, lab_hosts: list[SshHost]) -> None:
    node2 = guest_lab.guests[1]
    chosen = groups("rping", "ucmatose")
    tier = DeviceTier(lab_hosts, chosen, progress=on_cell(1, node2.stop))
    began = time.monotonic()
    matrix = tier.run()
    print(matrix.render_text())
    assert time.monotonic() - began < 240
    dead = [c for c in matrix.cells if c.verdict == "fail"]
    assert dead and all("node2 unreachable" in c.detail for c in dead), dead
    assert len(matrix.cells) == 2 * 2 * len(chosen)  # the rest of the matrix completed
    node1 = lab_hosts[0]
    left = node1.run(["sh", "-c", " ".join(f"pgrep -x {n};" for n in TOOL_NAMES)], timeout=30)
    assert left.stdout.strip() == "", f"left running on node1: {left.stdout}"


def test_schedule_and_estimates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--schedule", "4", "--pair-seconds", "30"]) == 0
    out = capsys.readouterr().out
    assert out.count("round ") == 6 and "12 ordered pairs" in out
