"""backlog-stat --connections, the `ss -tn` next to the listener view's `ss -lnt`: every
credit-managed connection a process publishes, with its credit figures.

The snapshot files are written here by hand in the documented schema
(core/telemetry/listener_snapshot.h and connection_snapshot.h), for processes that are alive
(a `sleep` child and this test process), so these tests check the reader and the report
against the schema and not against the C++ writer. The Python messaging tests and the mesh
tier check a running endpoint end to end.

    RDMA_INTEROP_BUILD=build-params /usr/bin/python3 -m pytest tests/cli -k backlog
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .probe_support import BACKLOG_STAT

CREDIT_COUNTERS = (
    "credits", "control_credits", "data_slots_in_use", "control_slots_in_use",
    "credits_granted_total", "sent", "updates_sent", "stalls_no_credit", "stalls_no_slot",
    "update_stalls", "posted", "granted", "pending_grant", "control_posted",
    "control_return_pending", "granted_total", "received", "updates_received",
)
CONNECTION_KEYS = {"local_address", "peer_address", "scheme", "peer", "state", "queued",
                   "queue_limit", "held", "refused", "pid", "process", "sequence", "wall_ms",
                   "credit"}
_tokens = itertools.count(1)


def connection(peer: str, local: str, remote: str, *, state: str = "connected", credits: int = 12,
               queued: int = 0, held: int = 0, refused: int = 0, stalls: tuple[int, int] = (0, 0),
               sent: int = 100, received: int = 90) -> dict[str, Any]:
    """One entry of a file's "connections" array; every credit counter distinct."""
    credit = {name: 1000 + i for i, name in enumerate(CREDIT_COUNTERS)}
    credit.update(credits=credits, control_credits=2, stalls_no_credit=stalls[0],
                  stalls_no_slot=stalls[1], sent=sent, received=received, updates_sent=7,
                  updates_received=8)
    return {"local_address": local, "peer_address": remote, "scheme": "tcp", "peer": peer,
            "state": state, "queued": queued, "queue_limit": 64, "held": held,
            "refused": refused, "credit": credit}


def publish(run_dir: Path, pid: int, process: str, connections: list[dict[str, Any]] | None,
            listeners: list[dict[str, Any]] | None = None) -> Path:
    """Writes one publisher's file, as core/telemetry's Publisher names and lays it out.
    `connections=None` leaves the key out, as files written before connections did."""
    run_dir.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"schema": "rdma-interop/telemetry/1", "pid": pid, "process": process,
                           "sequence": 3, "monotonic_ns": 123456789,
                           "wall_ms": 1718000000000, "listeners": listeners or []}
    if connections is not None:
        doc["connections"] = connections
    path = run_dir / f"{pid}-{next(_tokens):08x}.json"
    path.write_text(json.dumps(doc))
    return path


def listener(address: str) -> dict[str, Any]:
    names = ("backlog", "pending", "high_water", "requests", "accepted", "rejected_by_app",
             "pending_expired", "pending_aborted", "overflow_rejected", "overflow_waiting",
             "overflow_dropped", "half_open", "half_open_limit", "half_open_opened",
             "half_open_completed", "half_open_expired", "half_open_aborted",
             "half_open_evicted")
    counters = {n: 0 for n in names}
    counters["backlog"] = 16
    return {"local_address": address, "scheme": "tcp", "overflow": "drop", "counters": counters}


@pytest.fixture
def node() -> Iterator[subprocess.Popen[bytes]]:
    """A live process other than ours to own a file (its pid must be alive to be listed)."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def validate(doc: dict[str, Any], watch: bool = False) -> None:
    """The documented shape of --connections --json (tools/backlog-stat/report.h); with
    --watch, each row also has "rates" and "changed" and the document "interval_s"."""
    assert doc["schema"] == "rdma-interop/backlog-stat/connections/1"
    assert isinstance(doc["run_dir"], str)
    assert set(doc) == {"schema", "run_dir", "connections"} | ({"interval_s"} if watch else set())
    for entry in doc["connections"]:
        assert set(entry) == CONNECTION_KEYS | ({"rates", "changed"} if watch else set())
        assert entry["state"] in {"connected", "failed", "closed"}
        assert set(entry["credit"]) == set(CREDIT_COUNTERS)
        assert all(isinstance(v, int) and v >= 0 for v in entry["credit"].values())


def mesh_node(run_dir: Path, pid: int) -> None:
    """A node with a healthy peer and a stalled one (0 credits, queue at its limit)."""
    publish(run_dir, pid, "rdma-mesh", [
        connection("node2", "198.18.0.1:40122", "198.18.0.2:7300", credits=12, sent=5000,
                   received=4990),
        connection("node5", "198.18.0.1:40124", "198.18.0.5:7300", credits=0, queued=64,
                   held=1, refused=321, stalls=(77, 3), sent=800, received=790),
    ])


def test_connections_are_listed_like_ss_with_their_credit_figures(backlog_stat, run_dir: Path,
                                                                  node) -> None:
    mesh_node(run_dir, node.pid)
    table = backlog_stat("--connections")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["Proto", "Local", "Address:Port", "Peer", "Address:Port", "Peer",
                              "State", "Credits", "Ctl", "Queued/Limit", "Held", "Refused",
                              "NoCredit", "NoSlot", "Sent", "Received", "Updates", "PID",
                              "Process"]
    assert len(rows) == 2
    healthy, stalled = (r.split() for r in rows)
    assert healthy == ["tcp", "198.18.0.1:40122", "198.18.0.2:7300", "node2", "connected", "12",
                       "2", "0/64", "0", "0", "0", "0", "5000", "4990", "7/8", str(node.pid),
                       "rdma-mesh"]
    assert stalled == ["tcp", "198.18.0.1:40124", "198.18.0.5:7300", "node5", "connected", "0",
                       "2", "64/64", "1", "321", "77", "3", "800", "790", "7/8", str(node.pid),
                       "rdma-mesh"]
    # Columns line up: every row's Credits column ends where the header's does.
    end = header.index("Credits") + len("Credits")
    assert all(r[end - 2:end].strip().isdigit() and r[end:end + 1] == " " for r in rows)


def test_json_has_every_credit_counter_of_every_connection(backlog_stat, run_dir: Path,
                                                           node) -> None:
    mesh_node(run_dir, node.pid)
    r = backlog_stat("--connections", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    validate(doc)
    assert doc["run_dir"] == str(run_dir)
    healthy, stalled = doc["connections"]
    assert healthy["peer"] == "node2" and stalled["peer"] == "node5"
    assert stalled["pid"] == node.pid and stalled["process"] == "rdma-mesh"
    assert stalled["sequence"] == 3 and stalled["wall_ms"] == 1718000000000
    assert (stalled["queued"], stalled["queue_limit"], stalled["held"], stalled["refused"]) == \
        (64, 64, 1, 321)
    expected = connection("node5", "", "", credits=0, stalls=(77, 3), sent=800,
                          received=790)["credit"]
    assert stalled["credit"] == expected


def test_filters_by_pid_port_at_either_end_and_peer_name(backlog_stat, run_dir: Path,
                                                         node) -> None:
    mesh_node(run_dir, node.pid)
    publish(run_dir, os.getpid(), "pytest", [
        connection("node1", "198.18.0.2:7300", "198.18.0.1:40122"),
    ])

    def peers(*args: str) -> list[str]:
        r = backlog_stat("--connections", "--json", *args)
        return [c["peer"] for c in json.loads(r.stdout)["connections"]]

    # Ordered by process: the lower pid's connections first, each file in its own order.
    everyone = ["node2", "node5", "node1"] if node.pid < os.getpid() else ["node1", "node2", "node5"]
    assert peers() == everyone
    assert peers("--pid", str(node.pid)) == ["node2", "node5"]
    assert peers("--pid", str(os.getpid())) == ["node1"]
    assert sorted(peers("--port", "7300")) == ["node1", "node2", "node5"]  # local or peer port
    assert sorted(peers("--port", "40122")) == ["node1", "node2"]
    assert peers("--peer", "node5") == ["node5"]
    assert peers("--peer", "node5", "--pid", str(os.getpid())) == []

    nobody = backlog_stat("--connections", "--peer", "node9")
    assert nobody.returncode == 0 and nobody.stdout == ""
    assert "no connection matches the filters" in nobody.stderr


def test_failed_connection_shows_its_state(backlog_stat, run_dir: Path, node) -> None:
    publish(run_dir, node.pid, "rdma-mesh", [
        connection("rogue", "198.18.0.1:7300", "198.18.0.9:40000", state="failed", credits=0),
    ])
    row = backlog_stat("--connections").stdout.splitlines()[1].split()
    assert row[3:6] == ["rogue", "failed", "0"]


def test_a_file_without_connections_reads_as_none(backlog_stat, run_dir: Path, node) -> None:
    publish(run_dir, node.pid, "rdma-probe", None, listeners=[listener("127.0.0.1:7174")])
    listeners = backlog_stat("--json")
    assert listeners.returncode == 0, listeners.stderr
    assert [e["local_address"] for e in json.loads(listeners.stdout)["listeners"]] == \
        ["127.0.0.1:7174"]
    none = backlog_stat("--connections", "--json")
    assert none.returncode == 0
    doc = json.loads(none.stdout)  # still one valid document
    validate(doc)
    assert doc["connections"] == []
    assert "no connection is published" in none.stderr
    table = backlog_stat("--connections")
    assert table.returncode == 0 and table.stdout == ""


def test_listener_view_is_unchanged_and_points_at_connections(backlog_stat, run_dir: Path,
                                                              node) -> None:
    mesh_node(run_dir, node.pid)
    r = backlog_stat()
    assert r.returncode == 0 and r.stdout == ""
    assert "no listener is published" in r.stderr
    assert "2 message connections are: see --connections" in r.stderr
    doc = json.loads(backlog_stat("--json").stdout)
    assert doc["schema"] == "rdma-interop/backlog-stat/1" and "connections" not in doc

    publish(run_dir, os.getpid(), "rdma-mesh", [], listeners=[listener("198.18.0.1:7300")])
    both = backlog_stat()
    assert both.returncode == 0
    assert "198.18.0.1:7300" in both.stdout and "node5" not in both.stdout


def test_a_dead_processes_connections_disappear(backlog_stat, run_dir: Path) -> None:
    proc = subprocess.Popen(["true"])
    proc.wait()
    stale = publish(run_dir, proc.pid, "rdma-mesh", [connection("node2", "a:1", "b:2")])
    r = backlog_stat("--connections")
    assert r.returncode == 0 and r.stdout == ""
    assert not stale.exists()


def test_missing_run_dir_says_so(backlog_stat, run_dir: Path) -> None:
    r = backlog_stat("--connections")
    assert r.returncode == 0 and r.stdout == ""
    assert "does not exist" in r.stderr and "no process has published a connection" in r.stderr


def test_connections_do_not_combine_with_kernel_and_peer_needs_connections(backlog_stat) -> None:
    kernel = backlog_stat("--connections", "--kernel")
    assert kernel.returncode == 2
    assert "--kernel" in kernel.stderr and "--connections" in kernel.stderr
    peer = backlog_stat("--peer", "node2")
    assert peer.returncode == 2
    assert "add --connections" in peer.stderr


def test_help_documents_the_connection_view(backlog_stat) -> None:
    r = backlog_stat("--help")
    assert r.returncode == 0
    assert "\nCONNECTION COLUMNS (--connections)\n" in r.stdout
    for column in ("Credits", "Ctl", "Queued/Limit", "Held", "Refused", "NoCredit, NoSlot",
                   "Sent, Received", "Updates"):
        assert f"\n  {column} " in r.stdout, column
    for option in ("--connections", "--peer NAME"):
        assert option in r.stdout
    assert "backlog-stat --connections --json" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 100


def test_watch_connections_prints_a_document_per_refresh(run_dir: Path, node) -> None:
    if BACKLOG_STAT is None:
        pytest.skip("backlog-stat is not built")
    mesh_node(run_dir, node.pid)
    watch = subprocess.Popen([str(BACKLOG_STAT), "--connections", "--watch", "0.1", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert watch.stdout is not None
    first = json.loads(watch.stdout.readline())
    # Another process publishes a connection: the next refreshes show it.
    publish(run_dir, os.getpid(), "pytest", [connection("node9", "x:1", "y:2")])
    later = [json.loads(watch.stdout.readline()) for _ in range(3)]
    watch.send_signal(signal.SIGINT)
    assert watch.wait(timeout=5) == 0
    validate(first, watch=True)
    assert len(first["connections"]) == 2
    assert any(len(d["connections"]) == 3 for d in later)
