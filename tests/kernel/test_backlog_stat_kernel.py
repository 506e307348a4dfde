"""backlog-stat --kernel where the kernel has RDMA: the guest's rdma_cm listeners (kernel
rping on siw0, our verbs provider on rxe0) are listed from `rdma -j resource show cm_id`,
next to the published counters of our listeners, tcp's and verbs' alike. (rdma_cm frees the
kernel's slot when a request is read; our verbs listener's own backlog holds it until the
application decides, and that is what its published counters say.)"""

from __future__ import annotations

import json

from tests.support.guest import GUEST_RXE_ADDRESSES, GUEST_SIW_ADDRESS, Guest, guest_path
from tests.support.paths import build_dir


def test_backlog_stat_lists_kernel_and_our_listeners_in_the_guest(live_guest: Guest) -> None:
    rping = live_guest.spawn(f"exec rping -s -a {GUEST_SIW_ADDRESS} -p 7005 -C 1")
    verbs = live_guest.spawn(
        f"RDMA_INTEROP_RUN_DIR=/tmp/rdma-run exec {guest_path(build_dir())}/tools/rdma-probe "
        f"serve --json --listen verbs://{GUEST_RXE_ADDRESSES[0]}:7006 --personality siw "
        "--personality-dir /host/tools/personalities --backlog 4")
    serve = live_guest.spawn(
        f"RDMA_INTEROP_RUN_DIR=/tmp/rdma-run exec {guest_path(build_dir())}/tools/rdma-probe serve --json "
        f"--listen tcp://127.0.0.1:7007 --personality siw "
        "--personality-dir /host/tools/personalities --backlog 8")
    try:
        serve.wait_for_output('"listening"', 30)
        verbs.wait_for_output('"listening"', 30)
        out = ""
        for _ in range(50):  # the listeners appear within a publish interval
            r = live_guest.run(f"RDMA_INTEROP_RUN_DIR=/tmp/rdma-run "
                               f"{guest_path(build_dir())}/tools/backlog-stat/backlog-stat --kernel --json")
            out = r.output
            doc = json.loads(out[out.index("{"):])
            ports = {k["local_address"].rsplit(":", 1)[-1] for k in doc["kernel"]}
            if {"7005", "7006"} <= ports and len(doc["listeners"]) >= 2:
                break
        else:
            raise AssertionError(f"listeners not all shown:\n{out}")
        kernel = {k["local_address"]: k for k in doc["kernel"]}
        siw = kernel[f"{GUEST_SIW_ADDRESS}:7005"]
        assert (siw["process"], siw["device"]) == ("rping", "siw0"), kernel
        rxe = kernel[f"{GUEST_RXE_ADDRESSES[0]}:7006"]
        assert (rxe["process"], rxe["device"]) == ("rdma-probe", "rxe0"), kernel
        ours = {listener["local_address"]: listener for listener in doc["listeners"]}
        tcp = ours["127.0.0.1:7007"]
        assert (tcp["scheme"], tcp["process"]) == ("tcp", "rdma-probe"), tcp
        assert (tcp["counters"]["backlog"], tcp["counters"]["pending"]) == (8, 0), tcp
        published = ours[f"{GUEST_RXE_ADDRESSES[0]}:7006"]
        assert (published["scheme"], published["process"]) == ("verbs", "rdma-probe"), published
        assert (published["counters"]["backlog"], published["counters"]["pending"]) == (4, 0)
        table = live_guest.check(f"RDMA_INTEROP_RUN_DIR=/tmp/rdma-run "
                                 f"{guest_path(build_dir())}/tools/backlog-stat/backlog-stat --kernel")
        assert "rping" in table and "7005" in table, table
    finally:
        serve.kill()
        verbs.kill()
        rping.kill()
