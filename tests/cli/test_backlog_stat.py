"""backlog-stat as an operator runs it, against real `rdma-probe serve` processes that publish
into a temporary run directory (RDMA_INTEROP_RUN_DIR).

The binary comes from the same build tree as rdma-probe ($RDMA_INTEROP_BUILD, else build/,
else PATH):

    RDMA_INTEROP_BUILD=build-e2 /usr/bin/python3 -m pytest tests/cli/test_backlog_stat.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES
from tests.support.waiting import eventually

from .probe_support import BACKLOG_STAT, ServeProcess, run_probe

SIW = SHIPPED_PERSONALITIES / "siw.json"


@pytest.fixture
def server(probe: Path, run_dir: Path) -> Iterator[Callable[..., ServeProcess]]:
    started: list[ServeProcess] = []

    def start(*extra: str) -> ServeProcess:
        s = ServeProcess(probe, SIW, *extra)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.stop()


def listeners(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["listeners"])


def entry_for(doc: dict[str, Any], address: str) -> dict[str, Any]:
    found = [entry for entry in doc["listeners"] if entry["local_address"] == address]
    assert len(found) == 1, doc
    return found[0]


COUNTER_NAMES = (
    "backlog", "pending", "high_water", "requests", "accepted", "rejected_by_app",
    "pending_expired", "pending_aborted", "overflow_rejected", "overflow_waiting",
    "overflow_dropped", "half_open", "half_open_limit", "half_open_opened",
    "half_open_completed", "half_open_expired", "half_open_aborted", "half_open_evicted",
)


def validate_document(doc: dict[str, Any], watch: bool = False) -> None:
    """The documented shape of --json (tools/backlog-stat/report.h); with --watch, each row
    also has "rates" and "changed" and the document "interval_s"."""
    assert doc["schema"] == "rdma-interop/backlog-stat/1"
    assert isinstance(doc["run_dir"], str)
    assert doc["kernel_status"] in {"not_asked", "ok", "no_rdma", "rdma_tool_missing", "error"}
    assert isinstance(doc["kernel"], list)
    assert ("interval_s" in doc) == watch
    counter_names = set(COUNTER_NAMES)
    for entry in doc["listeners"]:
        assert set(entry) == {"local_address", "scheme", "overflow", "pid", "process", "sequence",
                              "wall_ms", "counters"} | ({"rates", "changed"} if watch else set())
        assert entry["overflow"] in {"drop", "reject", None}
        assert set(entry["counters"]) == counter_names
        assert all(isinstance(v, int) and v >= 0 for v in entry["counters"].values())
        c = entry["counters"]
        assert c["pending"] <= c["backlog"] and c["high_water"] <= c["backlog"]


def test_a_serving_probe_is_listed_with_its_address_and_pid(backlog_stat, server) -> None:
    s = server("--backlog", "8", "--overflow", "drop")
    pid = s.proc.pid
    table = backlog_stat()
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:3] == ["Proto", "Local", "Address:Port"]
    row = next(r for r in rows if s.address in r)
    fields = row.split()
    assert fields[0] == "tcp"
    assert fields[2] == "0/8"
    assert str(pid) in fields and "rdma-probe" in fields and "drop" in fields

    doc = json.loads(backlog_stat("--json").stdout)
    validate_document(doc)
    entry = entry_for(doc, s.address)
    assert entry["pid"] == pid
    assert entry["process"] == "rdma-probe"
    assert entry["scheme"] == "tcp"
    assert entry["overflow"] == "drop"
    assert entry["counters"]["backlog"] == 8
    assert doc["kernel_status"] == "not_asked"


def test_counters_move_after_a_connection(backlog_stat, server, probe: Path) -> None:
    s = server()
    before = entry_for(json.loads(backlog_stat("--json").stdout), s.address)["counters"]
    assert before["accepted"] == 0 and before["requests"] == 0
    connect = run_probe(probe, "connect", s.uri, "--personality", str(SIW))
    assert connect.returncode == 0, connect.stderr
    assert s.next_event()["ok"] is True

    def accepted() -> bool:
        doc = json.loads(backlog_stat("--json").stdout)
        return bool(entry_for(doc, s.address)["counters"]["accepted"] == 1)

    # Published within the 100 ms polling interval.
    assert eventually(accepted, timeout=2.0)
    doc = json.loads(backlog_stat("--json").stdout)
    validate_document(doc)
    c = entry_for(doc, s.address)["counters"]
    assert c["requests"] == 1 and c["half_open_opened"] == 1 and c["high_water"] == 1
    assert c["pending"] == 0
    assert entry_for(doc, s.address)["sequence"] >= 2


def test_port_and_pid_filters(backlog_stat, server) -> None:
    a = server()
    b = server()
    port_a = a.address.rsplit(":", 1)[1]
    by_port = json.loads(backlog_stat("--json", "--port", port_a).stdout)
    assert [e["local_address"] for e in listeners(by_port)] == [a.address]
    by_pid = json.loads(backlog_stat("--json", "--pid", str(b.proc.pid)).stdout)
    assert [e["local_address"] for e in listeners(by_pid)] == [b.address]
    both = json.loads(backlog_stat("--json").stdout)
    assert {e["local_address"] for e in listeners(both)} == {a.address, b.address}

    nobody = backlog_stat("--port", port_a, "--pid", str(b.proc.pid))
    assert nobody.returncode == 0  # an empty answer, as ss gives one
    assert "no listener matches the filters" in nobody.stderr


def test_a_dead_servers_entry_disappears_and_its_file_is_cleaned(
    backlog_stat, server, run_dir: Path
) -> None:
    alive = server()
    dead = server()
    files = sorted(run_dir.glob("*.json"))
    assert len(files) == 2
    dead_file = next(f for f in files if f.name.startswith(f"{dead.proc.pid}-"))
    dead.proc.kill()  # no chance to remove its own file
    dead.proc.wait()
    assert dead_file.exists()

    doc = json.loads(backlog_stat("--json").stdout)
    assert [e["pid"] for e in listeners(doc)] == [alive.proc.pid]
    assert not dead_file.exists()


def test_a_stopped_server_removes_its_own_file(backlog_stat, server, run_dir: Path) -> None:
    s = server()
    assert len(list(run_dir.glob("*.json"))) == 1
    assert s.stop() == 0
    assert list(run_dir.glob("*.json")) == []
    gone = backlog_stat()
    assert gone.returncode == 0 and gone.stdout == ""
    assert "no listener is published" in gone.stderr


def test_malformed_files_are_ignored_and_left_in_place(
    backlog_stat, server, run_dir: Path
) -> None:
    s = server()
    junk = run_dir / f"{os.getpid()}-0000abcd.json"
    junk.write_text('{"schema": "rdma-interop/telemetry/1", "pid": ')
    doc = json.loads(backlog_stat("--json").stdout)
    assert [e["pid"] for e in listeners(doc)] == [s.proc.pid]
    assert junk.exists()  # torn or foreign: never ours to delete


def publish(run_dir: Path, pid: int, process: str, address: str = "127.0.0.1:7174") -> Path:
    """Writes one publisher's file by hand, as core/telemetry's Publisher names it."""
    counters = {name: 0 for name in COUNTER_NAMES}
    counters["backlog"] = 8
    doc = {"schema": "rdma-interop/telemetry/1", "pid": pid, "process": process, "sequence": 1,
           "monotonic_ns": 1, "wall_ms": 1718000000000,
           "listeners": [{"local_address": address, "scheme": "tcp", "overflow": "drop",
                          "counters": counters}]}
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / f"{pid}-0000beef.json"
    path.write_text(json.dumps(doc))
    return path


def test_foreign_json_files_in_the_run_dir_are_left_alone(backlog_stat, tmp_path: Path) -> None:
    project = tmp_path / "project"  # --run-dir pointed at the wrong directory
    project.mkdir()
    package = project / "package.json"
    package.write_text('{"name": "web", "version": "1.0.0"}\n')
    tsconfig = project / "tsconfig.json"
    tsconfig.write_text('{"compilerOptions": {"strict": true}}\n')
    r = backlog_stat("--run-dir", str(project))
    assert r.returncode == 0 and r.stdout == "", (r.stdout, r.stderr)
    assert package.read_text() == '{"name": "web", "version": "1.0.0"}\n'
    assert tsconfig.exists()


def test_a_symlinked_run_dir_is_refused(backlog_stat, tmp_path: Path) -> None:
    real = tmp_path / "real"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = publish(real, dead.pid, "gone")
    (real / "package.json").write_text("{}")
    link = tmp_path / "link"
    link.symlink_to(real)
    r = backlog_stat("--run-dir", str(link))
    assert r.returncode == 5, (r.stdout, r.stderr)  # cannot run: never followed
    assert "symbolic link" in r.stderr
    assert stale.exists() and (real / "package.json").exists()


def test_a_fifo_in_the_run_dir_does_not_hang_the_reader(backlog_stat, run_dir: Path) -> None:
    run_dir.mkdir()
    os.mkfifo(run_dir / "123-0000abcd.json")
    publish(run_dir, os.getpid(), "alive")
    r = backlog_stat("--json", timeout=10)
    assert r.returncode == 0, r.stderr
    assert [e["process"] for e in listeners(json.loads(r.stdout))] == ["alive"]


def test_escape_sequences_in_a_process_name_print_escaped_on_one_row(
    backlog_stat, run_dir: Path
) -> None:
    name = "evil\x1b[2J\n127.0.0.1:1 forged\u009b31m\\x"
    publish(run_dir, os.getpid(), name, address="127.0.0.1:7174\r\x07")
    r = subprocess.run([str(BACKLOG_STAT)], capture_output=True, timeout=10)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode("utf-8")  # valid UTF-8, whatever the file held
    lines = out.splitlines()
    assert len(lines) == 2, out  # the header and one row: nothing forged
    assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in lines[1])
    assert r"evil\x1b[2J\n127.0.0.1:1" in lines[1]
    assert "forged" in lines[1] and r"31m\\x" in lines[1]  # the C1 CSI escaped, "\" doubled
    assert r"127.0.0.1:7174\r\x07" in lines[1]

    doc = json.loads(backlog_stat("--json").stdout)  # the document keeps the exact text
    assert [e["process"] for e in listeners(doc)] == [name]


def test_json_output_stays_valid_for_a_run_dir_that_is_not_utf8(
    backlog_stat, tmp_path: Path
) -> None:
    odd = tmp_path / os.fsdecode(b"run-\xff\x1b[2J")
    r = subprocess.run([str(BACKLOG_STAT), "--json", "--run-dir", os.fsencode(odd)],
                       capture_output=True, timeout=10)
    assert r.returncode == 0
    doc = json.loads(r.stdout.decode("utf-8"))
    validate_document(doc)
    assert doc["listeners"] == []
    assert b"\x1b" not in r.stderr and rb"\x1b[2J" in r.stderr


def test_nothing_to_show_exits_0_with_a_reason(backlog_stat, run_dir: Path) -> None:
    # ss -lnt with no listener prints an empty table and exits 0: so does backlog-stat, with
    # the reason on stderr.
    missing = backlog_stat()
    assert missing.returncode == 0
    assert missing.stdout == ""
    assert "does not exist" in missing.stderr and str(run_dir) in missing.stderr

    run_dir.mkdir()
    empty = backlog_stat("--json")
    assert empty.returncode == 0
    doc = json.loads(empty.stdout)  # still one valid document
    validate_document(doc)
    assert doc["listeners"] == []
    assert "no listener is published" in empty.stderr


def test_kernel_listeners_say_when_the_kernel_has_no_rdma(backlog_stat, server) -> None:
    if Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir()):
        pytest.skip("this kernel has RDMA devices; the kernel tier's guest covers that case")
    s = server()
    table = backlog_stat("--kernel")
    assert table.returncode == 0
    assert "the kernel has no RDMA device" in table.stdout
    doc = json.loads(backlog_stat("--kernel", "--json").stdout)
    assert doc["kernel_status"] == "no_rdma" and doc["kernel"] == []
    assert entry_for(doc, s.address)["pid"] == s.proc.pid
    s.stop()
    alone = backlog_stat("--kernel")
    assert alone.returncode == 0
    assert "the kernel has no RDMA device" in alone.stderr


def test_bad_usage_exits_2(backlog_stat) -> None:
    for args in (["--port", "0"], ["--port", "x"], ["--pid", "-3"], ["--watch", "0"],
                 ["--frobnicate"], ["positional"]):
        r = backlog_stat(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr


def test_help_reads_like_a_man_page(backlog_stat) -> None:
    r = backlog_stat("--help")
    assert r.returncode == 0
    for section in ("Options:", "COLUMNS", "EXIT STATUS", "FILES", "ENVIRONMENT", "EXAMPLES"):
        assert f"\n{section}" in "\n" + r.stdout, section
    for option in ("--json", "--watch", "--port", "--pid", "--run-dir", "--kernel"):
        assert option in r.stdout
    # The default run directory is only its owner's to publish into: say what others do.
    assert "directory of your own" in " ".join(r.stdout.split())


def test_no_permission_to_read_the_run_dir_exits_5(backlog_stat, run_dir: Path) -> None:
    run_dir.mkdir()
    run_dir.chmod(0o700)
    assert BACKLOG_STAT is not None
    if os.geteuid() == 0:
        # Root reads anything: look as an unprivileged user, as an operator would.
        run_dir.parent.chmod(0o755)
        r = subprocess.run([str(BACKLOG_STAT), "--run-dir", str(run_dir)], capture_output=True,
                           text=True, timeout=10, user=65534, group=65534)
    else:
        run_dir.chmod(0)
        r = subprocess.run([str(BACKLOG_STAT)], capture_output=True, text=True, timeout=10)
        run_dir.chmod(0o700)
    assert r.returncode == 5, (r.stdout, r.stderr)  # cannot run here
    assert "Permission denied" in r.stderr or "permission denied" in r.stderr


def test_run_dir_option_overrides_the_environment(backlog_stat, server, run_dir: Path,
                                                   tmp_path: Path) -> None:
    s = server()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    empty = backlog_stat("--run-dir", str(elsewhere))
    assert empty.returncode == 0 and empty.stdout == ""
    doc = json.loads(backlog_stat("--json", "--run-dir", str(run_dir)).stdout)
    assert entry_for(doc, s.address)["pid"] == s.proc.pid


def test_watch_refreshes_until_ctrl_c_and_exits_0(server, run_dir: Path) -> None:
    if BACKLOG_STAT is None:
        pytest.skip("backlog-stat is not built")
    s = server()
    watch = subprocess.Popen([str(BACKLOG_STAT), "--watch", "0.1", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert watch.stdout is not None
    lines = [watch.stdout.readline() for _ in range(3)]  # three refreshes, one document each
    watch.send_signal(signal.SIGINT)
    assert watch.wait(timeout=5) == 0
    for line in lines:
        doc = json.loads(line)
        validate_document(doc, watch=True)
        assert entry_for(doc, s.address)["pid"] == s.proc.pid

    # The table form, no value (every second), with nothing to show yet: it keeps watching.
    s.stop()
    table = subprocess.Popen([str(BACKLOG_STAT), "--watch"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    table.send_signal(signal.SIGINT)
    out, _ = table.communicate(timeout=5)
    assert table.returncode == 0
    assert "backlog-stat" in out and "nothing to show" in out


def test_an_unusable_run_dir_turns_telemetry_off_but_serve_still_listens(
    probe: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("RDMA_INTEROP_RUN_DIR", str(blocker / "run"))
    s = ServeProcess(probe, SIW)
    try:
        connect = run_probe(probe, "connect", s.uri, "--personality", str(SIW))
        assert connect.returncode == 0, connect.stderr
        assert s.next_event()["ok"] is True
    finally:
        s.stop()
    assert s.stderr.count("telemetry off") == 1, s.stderr
