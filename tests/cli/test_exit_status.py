"""The one exit-status table (tools/common/exit_status.h), provoked for real: each tool and
command, each status it documents, from a process run the way an operator runs it. Every
status provoked here must also be one the command's --help lists under EXIT STATUS, in the
shared words.

   0 ok   1 failed   2 bad arguments   3 unreachable   4 not an iWARP peer   5 cannot run

(A bounded run cut short by SIGINT/SIGTERM is status 1: test_signals.py provokes that for
every long-running command.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES
from tests.support.tools import tool_or_skip as tool

from .local_servers import blackholed_port, free_port, http_server

EXIT_NAMES = {0: "ok", 1: "failed", 2: "bad arguments", 3: "unreachable", 4: "not an iWARP peer",
              5: "cannot run"}


def run(name: str, *args: Any, timeout: float = 60.0, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool(name)), *[str(a) for a in args]], capture_output=True,
                          text=True, timeout=timeout, **kw)


def documented(name: str, *command: str) -> dict[int, str]:
    """{status: text} of the EXIT STATUS section of `name command --help`."""
    page = run(name, *command, "--help").stdout.splitlines()
    rows: dict[int, str] = {}
    for line in page[page.index("EXIT STATUS") + 1:]:
        m = re.match(r"^  (\d)  (.*)$", line)
        if not m:
            if line.startswith("     "):
                continue
            break
        rows[int(m.group(1))] = m.group(2)
    return rows


def expect(done: subprocess.CompletedProcess[str], status: int, name: str, *command: str) -> None:
    assert done.returncode == status, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    rows = documented(name, *command)
    assert status in rows, f"{name} {' '.join(command)} --help does not list status {status}"
    assert rows[status].startswith(EXIT_NAMES[status]), rows[status]


# ---- rdma-probe URI (probe) ------------------------------------------------------------------

def test_probe_statuses(serve) -> None:
    server = serve(SHIPPED_PERSONALITIES / "siw.json")
    expect(run("rdma-probe", "--json", "-q", server.uri), 0, "rdma-probe", "probe")
    # A peer that stops answering mid-probe: failed.
    brief = serve(SHIPPED_PERSONALITIES / "siw.json", "--max-connections", "3")
    expect(run("rdma-probe", "--json", brief.uri), 1, "rdma-probe", "probe")
    expect(run("rdma-probe", "tcp://127.0.0.1"), 2, "rdma-probe", "probe")
    expect(run("rdma-probe", "--json", f"tcp://127.0.0.1:{free_port()}"), 3, "rdma-probe", "probe")
    with blackholed_port() as port:
        done = run("rdma-probe", "--json", "--timeout", "500ms", f"tcp://127.0.0.1:{port}")
    expect(done, 3, "rdma-probe", "probe")
    assert json.loads(done.stdout)["outcome"] == "unreachable"
    with http_server() as port:
        expect(run("rdma-probe", "--json", f"tcp://127.0.0.1:{port}"), 4, "rdma-probe", "probe")


# ---- rdma-probe connect ----------------------------------------------------------------------

def test_connect_statuses(serve, personality) -> None:
    server = serve(personality("siw"))
    expect(run("rdma-probe", "connect", server.uri, "-p", personality("siw"), "--json"), 0,
           "rdma-probe", "connect")
    write_only = serve(personality("siw", name="write-only", rtr_offer=["write"],
                                   rtr_preference=["write"]))
    failed = run("rdma-probe", "connect", write_only.uri, "-p", personality("cxgb4"), "--json")
    expect(failed, 1, "rdma-probe", "connect")
    assert json.loads(failed.stdout)["error"]["failure"] == "no_matching_rtr"
    expect(run("rdma-probe", "connect", "tcp://127.0.0.1:1", "-p", "nosuch"), 2, "rdma-probe",
           "connect")
    refused = run("rdma-probe", "connect", f"tcp://127.0.0.1:{free_port()}", "-p", "siw", "--json")
    expect(refused, 3, "rdma-probe", "connect")
    # A blackholed port (no SYN-ACK within --timeout): unreachable, as --help says, not 1.
    with blackholed_port() as port:
        start = time.monotonic()
        black = run("rdma-probe", "connect", f"tcp://127.0.0.1:{port}", "-p", "siw", "--json",
                    "--timeout", "700ms")
        took = time.monotonic() - start
    expect(black, 3, "rdma-probe", "connect")
    error = json.loads(black.stdout)["error"]
    assert error["kind"] == "unreachable" and "no answer" in error["detail"], error
    assert took < 5


# ---- rdma-probe serve ------------------------------------------------------------------------

def test_serve_statuses(rdma_probe, serve, personality) -> None:
    once = serve(personality("siw"), "--once")
    rdma_probe("connect", once.uri, "-p", str(personality("siw")))
    assert once.proc.wait(timeout=10) == 0
    assert 0 in documented("rdma-probe", "serve")

    failing = serve(personality("siw", name="write-only", rtr_offer=["write"],
                                rtr_preference=["write"]), "--once")
    rdma_probe("connect", failing.uri, "-p", str(personality("cxgb4")))
    assert failing.proc.wait(timeout=10) == 1
    assert 1 in documented("rdma-probe", "serve")

    expect(run("rdma-probe", "serve", "--listen", "tcp://127.0.0.1:0", "-p", "nosuch"), 2,
           "rdma-probe", "serve")


def test_serve_that_cannot_listen_exits_5_whatever_the_reason(personality, tmp_path: Path) -> None:
    # In use (EADDRINUSE) and not an address of this node (EADDRNOTAVAIL): the same status,
    # where EADDRINUSE gave 1 and EACCES 2 before.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        in_use = run("rdma-probe", "serve", "--listen", f"tcp://127.0.0.1:{port}", "-p", "siw")
    expect(in_use, 5, "rdma-probe", "serve")
    assert "in use" in in_use.stderr.lower(), in_use.stderr
    elsewhere = run("rdma-probe", "serve", "--listen", "tcp://192.0.2.1:7174", "-p", "siw")
    expect(elsewhere, 5, "rdma-probe", "serve")
    # A port below 1024 for a user without the capability (EACCES).
    if os.geteuid() != 0:
        denied = run("rdma-probe", "serve", "--listen", "tcp://127.0.0.1:80", "-p", "siw")
    else:
        # As nobody, from a directory nobody can reach (pytest's are root's alone).
        shared = Path(tempfile.mkdtemp(prefix="rdma-interop-eacces-"))
        try:
            shared.chmod(0o755)
            probe = shared / "rdma-probe"
            shutil.copy2(tool("rdma-probe"), probe)
            siw = shared / "siw.json"
            shutil.copy2(SHIPPED_PERSONALITIES / "siw.json", siw)
            siw.chmod(0o644)
            denied = subprocess.run(
                [str(probe), "serve", "--listen", "tcp://127.0.0.1:80", "--personality", str(siw)],
                capture_output=True, text=True, timeout=20, user=65534, group=65534,
                env={"RDMA_INTEROP_RUN_DIR": str(shared / "run")})
        finally:
            shutil.rmtree(shared)
    expect(denied, 5, "rdma-probe", "serve")
    assert "permission denied" in denied.stderr.lower(), denied.stderr


# ---- rdma-probe personalities, devices, xrc --------------------------------------------------

def test_listing_commands_statuses() -> None:
    expect(run("rdma-probe", "personalities"), 0, "rdma-probe", "personalities")
    expect(run("rdma-probe", "personalities", "--bogus"), 2, "rdma-probe", "personalities")
    expect(run("rdma-probe", "devices"), 0, "rdma-probe", "devices")
    expect(run("rdma-probe", "devices", "--device", "nosuch0"), 2, "rdma-probe", "devices")
    expect(run("rdma-probe", "xrc", "--simulate", "7"), 0, "rdma-probe", "xrc")
    expect(run("rdma-probe", "xrc", "--simulate", "7", "--probe", "bogus"), 2, "rdma-probe", "xrc")


# ---- rdma-storm ------------------------------------------------------------------------------

def test_storm_statuses(serve) -> None:
    server = serve(SHIPPED_PERSONALITIES / "siw.json")
    ran = run("rdma-storm", server.uri, "-n", "8", "-c", "2", "--progress", "0", "--json")
    expect(ran, 0, "rdma-storm")
    assert json.loads(ran.stdout)["outcomes"]["connected"] == 8
    expect(run("rdma-storm", "tcp://127.0.0.1:0"), 2, "rdma-storm")
    # Every attempt refused: nothing reached the listener. This ran and exited 0 before.
    refused = run("rdma-storm", f"tcp://127.0.0.1:{free_port()}", "-n", "4", "-c", "2",
                  "--progress", "0", "--json")
    expect(refused, 3, "rdma-storm")
    report = json.loads(refused.stdout)
    assert report["unreached"] == 4 and report["other"] == {"unreachable": 4}
    assert "no attempt reached" in refused.stderr


def test_a_storm_of_unanswered_syns_is_unreachable_and_not_expired() -> None:
    with blackholed_port() as port:
        done = run("rdma-storm", f"tcp://127.0.0.1:{port}", "-n", "2", "-c", "2", "--timeout",
                   "500ms", "--progress", "0", "--json")
    expect(done, 3, "rdma-storm")
    report = json.loads(done.stdout)
    # The network's (or the kernel accept queue's) doing, never the server's expiry.
    assert report["outcomes"]["tcp_timeout"] == 2, report["outcomes"]
    assert report["outcomes"]["expired"] == 0
    assert report["unreached"] == 2


def test_a_storm_with_nothing_connected_says_n_a_not_zero() -> None:
    done = run("rdma-storm", f"tcp://127.0.0.1:{free_port()}", "-n", "3", "-c", "3", "--progress",
               "0")
    assert done.returncode == 3
    text = done.stdout
    assert "p50 n/a p90 n/a p99 n/a max n/a (none connected)" in text, text
    assert "Jain's fairness index over 3 clients: n/a" in text, text
    assert "p50 0.00" not in text and "clients: 1.000" not in text, text
    as_json = json.loads(run("rdma-storm", f"tcp://127.0.0.1:{free_port()}", "-n", "3", "-c", "3",
                             "--progress", "0", "--json").stdout)
    assert as_json["jain_index"] is None
    assert as_json["latency_ms"]["connected"] == {"count": 0, "mean": None, "p50": None,
                                                  "p90": None, "p99": None, "max": None}


# ---- rdma-mesh -------------------------------------------------------------------------------

def test_mesh_statuses(tmp_path: Path) -> None:
    a, b = free_port(), free_port()
    env = {**os.environ, "RDMA_INTEROP_RUN_DIR": str(tmp_path / "run")}
    nodes = [subprocess.Popen(
        [str(tool("rdma-mesh")), "node", "--name", me, "--listen", f"tcp://127.0.0.1:{mine}",
         "--peer", f"{other}=tcp://127.0.0.1:{theirs}", "--duration", "1s", "--rate", "100",
         "--drain", "100ms", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=env) for me, mine, other, theirs in (("a", a, "b", b), ("b", b, "a", a))]
    for node in nodes:
        out, err = node.communicate(timeout=60)
        expect(subprocess.CompletedProcess(node.args, node.returncode, out, err), 0, "rdma-mesh",
               "node")
    alone = run("rdma-mesh", "node", "--name", "a", "--listen", f"tcp://127.0.0.1:{a}",
                "--peer", f"b=tcp://127.0.0.1:{b}", "--setup-timeout", "500ms", env=env)
    expect(alone, 1, "rdma-mesh", "node")
    expect(run("rdma-mesh", "node", "--name", "a"), 2, "rdma-mesh", "node")
    # An address it cannot listen on is 5, as rdma-probe serve's and rdma-stream serve's.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        in_use = run("rdma-mesh", "node", "--name", "a", "--listen",
                     f"tcp://127.0.0.1:{taken.getsockname()[1]}", "--peer",
                     f"b=tcp://127.0.0.1:{b}", "--setup-timeout", "500ms", env=env)
    expect(in_use, 5, "rdma-mesh", "node")
    assert "in use" in in_use.stderr.lower(), in_use.stderr


# ---- backlog-stat ----------------------------------------------------------------------------

def test_backlog_stat_statuses(tmp_path: Path, probe: Path, personality) -> None:
    expect(run("backlog-stat", "--run-dir", ""), 2, "backlog-stat")  # no directory at all
    run_dir = tmp_path / "run"
    server = subprocess.Popen(
        ["env", f"RDMA_INTEROP_RUN_DIR={run_dir}", str(probe), "serve", "--json", "--listen",
         "tcp://127.0.0.1:0", "--personality", str(personality("siw"))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        address = json.loads(server.stdout.readline())["address"]
        shown = run("backlog-stat", "--run-dir", run_dir)
        expect(shown, 0, "backlog-stat")
        assert address in shown.stdout
    finally:
        server.terminate()
        server.wait(timeout=10)
    # Nothing to list is an answer (ss -lnt exits 0), with the reason on stderr.
    nothing = run("backlog-stat", "--run-dir", run_dir)
    expect(nothing, 0, "backlog-stat")
    assert nothing.stdout == "" and "nothing to show" in nothing.stderr
    expect(run("backlog-stat", "--port", "0"), 2, "backlog-stat")
    link = tmp_path / "link"
    link.symlink_to(run_dir)
    refused = run("backlog-stat", "--run-dir", link)
    expect(refused, 5, "backlog-stat")
    assert "symbolic link" in refused.stderr


# ---- verbs-check -----------------------------------------------------------------------------

def test_verbs_check_statuses() -> None:
    expect(run("verbs-check", "--list"), 0, "verbs-check")
    # No RDMA device holds 127.0.0.1 here: the check cannot run, and says so.
    if Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir()):
        pytest.skip("this host has RDMA devices; the kernel tier runs verbs-check on them")
    failed = run("verbs-check", f"verbs://127.0.0.1:{free_port()}", "--check", "send-recv",
                 "--json", "--timeout", "2s")
    expect(failed, 1, "verbs-check")
    first = json.loads(failed.stdout.splitlines()[0])
    assert first["result"] == "error"
    # The server that could not listen ended by itself: not "killed after 0 ms".
    assert not first["server"].startswith("killed"), first
    expect(run("verbs-check", "tcp://127.0.0.1:7000"), 2, "verbs-check")
    expect(run("verbs-check"), 2, "verbs-check")
