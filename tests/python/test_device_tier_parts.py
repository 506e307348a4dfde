"""The device tier's pure parts: the round-robin schedule, perftest's table, the matrix."""

from __future__ import annotations

import itertools
import json
import subprocess

import pytest

from rdma_interop.device_groups import VERBS_CHECKS, PairContext, perftest_figure
from rdma_interop.device_matrix import DeviceCell, DeviceMatrix, NodeInventory
from rdma_interop.device_tier import usable_devices
from rdma_interop.lab_schedule import estimate, round_robin

from tests.support.tools import tool_or_skip


@pytest.mark.parametrize("n", [2, 3, 4, 5, 12, 13, 48])
def test_every_ordered_pair_once_and_no_node_twice_in_a_round(n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = round_robin(nodes)
    pairs = [p for r in rounds for p in r]
    assert sorted(pairs) == sorted(itertools.permutations(nodes, 2))
    for r in rounds:
        seen = [x for p in r for x in p]
        assert len(seen) == len(set(seen))
    assert len(rounds) == (2 * (n - 1) if n % 2 == 0 else 2 * n)


def test_estimates_for_an_event() -> None:
    e12, e48 = estimate(12, 60.0), estimate(48, 60.0)
    assert (e12.pairs, e12.rounds) == (132, 22)
    assert (e48.pairs, e48.rounds) == (2256, 94)
    assert e48.speedup == pytest.approx(2256 / 94)


def test_perftest_tables() -> None:
    bw = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
          " 65536      100           0.056566            0.045875            0.000087\n")
    lat = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]"
           "    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]\n"
           " 2       200          214.97         4781.66      350.57   	       496.21      "
           "	459.24 		3188.61 		4781.66\n")
    assert perftest_figure(bw) == ("Gbit/s", 0.045875)
    assert perftest_figure(lat) == ("us", 496.21)
    assert perftest_figure("Unable to perform rdma_client function") is None


def test_gid_index_and_usable_devices() -> None:
    rxe = {"name": "rxe0", "kind": "roce-v2", "ports": [{
        "state": "ACTIVE", "addresses": ["198.18.5.1/24", "fe80::1/64"],
        "gids": [{"index": 0, "gid": "fe80::5054:ff:fe12:501", "type": "roce-v2"},
                 {"index": 1, "gid": "::ffff:198.18.5.1", "type": "roce-v2"}]}]}
    down = {"name": "rxe1", "kind": "roce-v2", "ports": [{"state": "DOWN",
                                                          "addresses": ["198.18.6.1/24"]}]}
    inv = NodeInventory("n1", "ok", "", [rxe, down])
    assert [(d["name"], a) for d, a in usable_devices(inv, None)] == [("rxe0", "198.18.5.1")]
    assert usable_devices(inv, ("mlx5_0",)) == []
    ctx = PairContext("n1", "n2", rxe, rxe, "198.18.5.1", "198.18.5.1", 20000)
    assert ctx.gid_index("initiator") == 1


def test_matrix_round_trips_and_fails_only_on_fail() -> None:
    m = DeviceMatrix()
    m.nodes = [NodeInventory("n1", "ok", "", [{"name": "siw0", "kind": "iwarp"}]),
               NodeInventory("n3", "no-device", "no RDMA device")]
    m.add(DeviceCell("rping", "n1/siw0", "n2/siw0", "iwarp", "pass"))
    m.add(DeviceCell("ibv_xsrq_pingpong", "n1/siw0", "n2/siw0", "iwarp", "skip",
                     "n1/siw0: no XRC: ibv_open_xrcd: Operation not supported"))
    assert m.ok()
    text = m.render_text()
    assert "n3: no RDMA device" in text and "SKIP n1/siw0: no XRC" in text
    again = DeviceMatrix.from_json(json.loads(json.dumps(m.to_json())))
    assert [c.to_json() for c in again.cells] == [c.to_json() for c in m.cells]
    m.add(DeviceCell("ucmatose", "n1/siw0", "n2/siw0", "iwarp", "fail", "client exit 1: \x1b[2J"))
    assert not m.ok()
    assert "\x1b" not in m.render_text()
    with pytest.raises(ValueError):
        DeviceCell("x", "a", "b", "iwarp", "ok")


def test_device_tables_fit_100_columns_or_fold_and_findings_fail_only_strict_junit() -> None:
    m = DeviceMatrix()
    devices = [f"node{n}/{d}" for n in (1, 2, 3) for d in ("siw0", "rxe0")]
    for a in devices:
        for b in devices:
            if a != b and a[-4:] == b[-4:]:
                m.add(DeviceCell("ib_send_bw", a, b, a[-4:-1], "pass", figure="1.52 Gbit/s"))
                m.add(DeviceCell("verbs-check", a, b, a[-4:-1],
                                 "finding" if "siw" in a else "pass",
                                 "bad-rkey-read: expected remote_access_error, got flushed: "
                                 "the peer's Terminate moved the queue pair to error" * 2))
    text = m.render_text()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "(responders 1-" in text  # 6 responders of ~35 columns each: folded
    assert sum(line.count("FINDING bad-rkey-read") for line in text.splitlines()
               if " | " in line) == 6  # each cell once, cut to fit its block
    assert m.ok() and not m.ok(strict=True)
    assert m.to_junit().getroot().find(".//failure") is None
    assert len(m.to_junit(strict=True).getroot().findall(".//failure")) == 6


def test_the_judges_count_of_verbs_checks_is_the_tools() -> None:
    """A verbs-check run that reports fewer than VERBS_CHECKS results did not finish: the
    count must be the tool's own (one line per check in --list)."""
    listed = subprocess.run([str(tool_or_skip("verbs-check")), "--list"], capture_output=True,
                            text=True, check=True).stdout.splitlines()
    assert VERBS_CHECKS == len(listed), listed
