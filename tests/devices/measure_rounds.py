"""Measures the device tier's round schedule against one pair at a time on a guest lab, and
computes what 12 and 48 nodes would take with each. A measurement, not a test (CI does not
run it: 4 TCG guests take several minutes):

    PYTHONPATH=build/python RDMA_INTEROP_BUILD=build /usr/bin/python3 \\
        -m tests.devices.measure_rounds [--nodes 4] [--group rping --group ib_send_bw ...]

(from the repository root: the guest lab is part of the tests package).

On this machine the guests share 2 cores, so pairs that run "at the same time" also share
them: the measured gain is a floor. Real lab nodes do not share CPUs, and the estimate for
12 and 48 nodes uses the measured time of one pair alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from rdma_interop.device_groups import GROUPS
from rdma_interop.device_tier import DeviceTier
from rdma_interop.lab import load_lab_file
from rdma_interop.lab_schedule import estimate

from tests.devices.guest_lab import GuestLab

DEFAULT_GROUPS = ["rping", "ucmatose", "rdma-probe exchange", "ib_send_bw", "ib_send_lat"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--group", action="append")
    parser.add_argument("--work", default="interop-results/device-rounds")
    args = parser.parse_args()
    names = args.group or DEFAULT_GROUPS
    groups = [g for g in GROUPS if g.name in names]
    with GuestLab(Path(args.work), nodes=args.nodes, memory_mb=512) as lab:
        print(f"{args.nodes} guests booted in {lab.boot_seconds:.0f} s", flush=True)
        hosts = load_lab_file(lab.lab_file).hosts
        quiet = lambda line: None  # noqa: E731
        timed = {}
        for label, alone in (("rounds", False), ("one pair at a time", True)):
            m = DeviceTier(hosts, groups, progress=quiet, one_pair_at_a_time=alone).run()
            fails = [c for c in m.cells if c.verdict == "fail"]
            timed[label] = m
            print(f"{label}: {len(m.schedule)} rounds, {len(m.cells)} cells, {len(fails)} FAIL, "
                  f"wall {m.wall_s:.1f} s", flush=True)
            for i, rnd in enumerate(m.schedule, 1):
                print(f"  round {i}: " + ", ".join(f"{a}->{b}" for a, b in rnd))
    pair_alone = statistics.median(timed["one pair at a time"].pair_seconds.values())
    print(f"\none pair alone: median {pair_alone:.1f} s "
          f"({len(groups)} groups x 2 device kinds)")
    print(f"measured here: rounds {timed['rounds'].wall_s:.1f} s, one pair at a time "
          f"{timed['one pair at a time'].wall_s:.1f} s")
    for n in (args.nodes, 12, 48):
        e = estimate(n, pair_alone)
        print(f"{n:3} nodes: {e.pairs:5} ordered pairs, {e.rounds:3} rounds: one pair at a time "
              f"{e.sequential_s / 60:7.1f} min, in rounds {e.rounds_s / 60:6.1f} min "
              f"({e.speedup:.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
