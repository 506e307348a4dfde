"""The guest itself: it runs the kernel stacks the other kernel tests rely on, and its
console watcher recognises a kernel crash."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time

from tests.support.guest import (AGENT_PORT, GUEST_SIW_ADDRESS, RC_MARK, Guest, guest_path,
                                 parse_crashes)
from tests.support.paths import build_dir

SAMPLE_OOPS = """\
[   12.345678] siw: QP[3]: connection established
[   13.000001] BUG: kernel NULL pointer dereference, address: 0000000000000008
[   13.000002] #PF: supervisor read access in kernel mode
[   13.000003] Oops: 0000 [#1] PREEMPT SMP NOPTI
[   13.000004] RIP: 0010:siw_qp_llp_data_ready+0x2a/0x90 [siw]
[   13.000005] Call Trace:
[   13.000006]  <TASK>
[   13.000007]  tcp_data_ready+0x3a/0xd0
[   13.000008] ---[ end trace 0000000000000000 ]---
[   14.000000] rdma-guest: still running
"""


def test_crash_parser_finds_one_report_with_its_trace() -> None:
    crashes = parse_crashes(SAMPLE_OOPS)
    assert len(crashes) == 1
    assert crashes[0].title.startswith("BUG: kernel NULL pointer dereference")
    assert "siw_qp_llp_data_ready" in crashes[0].trace
    assert "still running" not in crashes[0].trace
    assert parse_crashes("[    1.0] siw: all fine\n") == []


def test_guest_has_kernel_siw_and_rxe_devices(guest: Guest) -> None:
    links = guest.check("rdma link")
    for dev, netdev in (("siw0", "eth0"), ("rxe0", "veth-a"), ("rxe1", "veth-b")):
        line = next((ln for ln in links.splitlines() if f"link {dev}/" in ln), "")
        assert "state ACTIVE" in line and f"netdev {netdev}" in line, links
    devices = guest.check("ibv_devinfo -l")
    assert "siw0" in devices and "rxe0" in devices
    assert guest.crashes_since(0) == [], guest.console()


def test_host_build_runs_inside_the_guest(guest: Guest) -> None:
    out = guest.check(f"{guest_path(build_dir() / 'tools' / 'rdma-probe')} --version")
    assert out.startswith("rdma-probe ")


def test_forwarded_port_reaches_a_guest_listener(guest: Guest) -> None:
    """The only way in: a host connection to 127.0.0.1:host_port() lands in the guest."""
    job = guest.spawn("echo listening; nc -l -p 7008 > /tmp/fwd-test.txt")
    job.wait_for_output("listening", 10)
    port = guest.host_port(7008)
    for _ in range(50):  # slirp accepts before the guest listens; retry until data lands
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(b"through hostfwd\n")
        time.sleep(0.2)
        if guest.run("cat /tmp/fwd-test.txt").output.strip() == "through hostfwd":
            break
    assert guest.check("cat /tmp/fwd-test.txt").strip() == "through hostfwd"
    assert GUEST_SIW_ADDRESS in guest.check("ip -br addr show eth0")
    job.kill()


def test_start_waits_for_an_agent_that_resets_its_first_connection(tmp_path) -> None:
    """/init prints its ready mark just after it starts the agent in the background; under
    TCG the first connection can come before the agent listens, and the guest resets it
    (a CI run lost the kernel tier to that, on a restart after a crash). The host keeps
    asking until the agent answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    answered = []

    def agent() -> None:
        for n in range(3):
            conn, _ = listener.accept()
            with conn:
                if n == 0:  # no listener yet: a reset, as slirp passes it on
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
                    continue
                conn.recv(4096)
                conn.sendall(f"{RC_MARK}0\n".encode())
                answered.append(n)
                return

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    guest = Guest(log_dir=tmp_path)
    guest._proc = subprocess.Popen(["sleep", "60"])  # stands in for qemu
    guest._ports = {AGENT_PORT: listener.getsockname()[1]}
    try:
        guest._await_agent(time.monotonic() + 10)
        assert answered == [1]
    finally:
        guest.stop()
        listener.close()
        thread.join(5)
