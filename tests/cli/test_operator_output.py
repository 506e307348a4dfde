"""What an operator reads (issue 22): `rdma-probe serve` writes a log for people by default and
JSON lines with --json (the same events, said the same way), and `backlog-stat --watch` shows
per-interval rates and marks what changed since the last refresh.
"""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.tools import tool_or_skip

LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d (.*)$")


def read_lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    q: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            q.put(line.rstrip("\n"))
        q.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return q


def next_line(q: queue.Queue[str | None], timeout: float = 10.0) -> str:
    line = q.get(timeout=timeout)
    assert line is not None, "the process ended"
    return line


def serve_and_connect(probe: Path, personality, *serve_args: str,
                      client: str = "siw") -> tuple[int, list[str]]:
    """A serve --once, one connect against it; the serve's status and stdout lines."""
    proc = subprocess.Popen([str(probe), "serve", "--listen", "tcp://127.0.0.1:0", "--personality",
                             str(personality("siw")), "--once", *serve_args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    q = read_lines(proc)
    first = next_line(q)
    address = json.loads(first)["address"] if "--json" in serve_args else first.split()[3]
    subprocess.run([str(probe), "connect", f"tcp://{address}", "-p", str(personality(client)),
                    "--timeout", "5"], capture_output=True, timeout=20)
    status = proc.wait(timeout=10)
    lines = [first]
    while (line := q.get(timeout=5)) is not None:
        lines.append(line)
    return status, lines


def test_serve_writes_a_log_for_people_by_default(probe: Path, personality) -> None:
    status, lines = serve_and_connect(probe, personality)
    assert status == 0
    texts = []
    for line in lines:
        m = LOG_LINE.match(line)
        if m is None:  # a continuation, indented under the time
            assert line.startswith(" " * 9), line
            texts[-1] += " " + line.strip()
            continue
        texts.append(m.group(1))
    assert re.fullmatch(r"listening on 127\.0\.0\.1:\d+ as quick-siw \(pid \d+\)", texts[0]), texts[0]
    connection = texts[1]
    assert re.match(r"connection from 127\.0\.0\.1:\d+: ok, revision 2, ", connection), connection
    assert "196608 bytes verified" in connection and connection.endswith(" ms)"), connection
    assert texts[-1].startswith("counters: overflow reject, backlog 16, pending 0,"), texts[-1]
    assert "accepted 1," in texts[-1]
    assert not any(t.startswith("{") for t in texts)
    assert max(len(line) for line in lines) <= 101


def test_serve_log_says_why_a_connection_failed(probe: Path, personality) -> None:
    proc = subprocess.Popen([str(probe), "serve", "--listen", "tcp://127.0.0.1:0", "--personality",
                             str(personality("siw", name="write-only", rtr_offer=["write"],
                                             rtr_preference=["write"])), "--once"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    q = read_lines(proc)
    address = next_line(q).split()[3]
    subprocess.run([str(probe), "connect", f"tcp://{address}", "-p", str(personality("cxgb4")),
                    "--timeout", "5"], capture_output=True, timeout=20)
    assert proc.wait(timeout=10) == 1
    entry = next_line(q)
    while (line := q.get(timeout=5)) is not None and line.startswith(" "):
        entry += " " + line.strip()  # a long entry continues under the time
    text = " ".join(entry.split())
    assert re.search(r"connection from 127\.0\.0\.1:\d+: FAILED setup no_matching_rtr: ", text), text
    assert "(Terminate layer 2 etype 0 code 7)" in text, text


def test_serve_json_prints_the_same_events_as_objects(probe: Path, personality) -> None:
    status, lines = serve_and_connect(probe, personality, "--json")
    assert status == 0
    events = [json.loads(line) for line in lines]
    assert [e["event"] for e in events] == ["listening", "connection", "counters"]
    assert events[1]["ok"] is True and events[1]["exchange"]["bytes_verified"] == 196608
    assert events[2]["accepted"] == 1


def watch(run_dir: Path, *args: str) -> subprocess.Popen[str]:
    stat = tool_or_skip("backlog-stat")
    return subprocess.Popen([str(stat), "--run-dir", str(run_dir), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def connect_n(probe: Path, address: str, personality, n: int) -> None:
    for _ in range(n):
        done = subprocess.run([str(probe), "connect", f"tcp://{address}", "-p",
                               str(personality("siw")), "--timeout", "5"],
                              capture_output=True, text=True, timeout=20)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def published(probe: Path, personality, tmp_path: Path) -> Any:
    """A serve publishing its listener into a run directory of its own: (run_dir, address)."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(["env", f"RDMA_INTEROP_RUN_DIR={run_dir}", str(probe), "serve", "--json",
                             "--listen", "tcp://127.0.0.1:0", "--personality",
                             str(personality("siw"))],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    q = read_lines(proc)
    address = json.loads(next_line(q))["address"]
    yield run_dir, address
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


def test_watch_json_gives_each_listener_its_rates_and_what_changed(published, probe: Path,
                                                                  personality) -> None:
    run_dir, address = published
    w = watch(run_dir, "--watch", "0.5", "--json")
    q = read_lines(w)
    try:
        first = json.loads(next_line(q))
        assert first["interval_s"] is None
        row = first["listeners"][0]
        assert row["rates"] is None  # nothing to compare with yet
        connect_n(probe, address, personality, 3)
        moved = None
        deadline = time.monotonic() + 10
        while moved is None and time.monotonic() < deadline:
            doc = json.loads(next_line(q))
            row = next(r for r in doc["listeners"] if r["local_address"] == address)
            if "accepted" in row["changed"]:
                moved = (doc, row)
        assert moved, "no refresh saw the connections"
        doc, row = moved
        assert 0.3 < doc["interval_s"] < 2.0
        assert row["rates"]["accepted"] > 0 and row["rates"]["requests"] > 0
        # A rate is the change over the interval: at most the 3 accepted, per that interval.
        assert row["rates"]["accepted"] * doc["interval_s"] <= 3.01
        assert "pending" not in row["rates"]  # a gauge has no rate
        still = json.loads(next_line(q))
        quiet = next(r for r in still["listeners"] if r["local_address"] == address)
        assert quiet["rates"]["accepted"] == 0 and "accepted" not in quiet["changed"]
    finally:
        w.send_signal(signal.SIGINT)
        assert w.wait(timeout=5) == 0


def test_watch_table_marks_changed_figures_and_shows_rates(published, probe: Path,
                                                           personality) -> None:
    run_dir, address = published
    w = watch(run_dir, "--watch", "0.4")
    q = read_lines(w)
    try:
        next_line(q)  # the first screen: no rates yet
        time.sleep(0.5)
        connect_n(probe, address, personality, 2)
        seen = []
        deadline = time.monotonic() + 10
        marked = None
        while marked is None and time.monotonic() < deadline:
            line = next_line(q)
            seen.append(line)
            if line.startswith("tcp ") and address in line and "*" in line:
                marked = line
        assert marked, "\n".join(seen)
    finally:
        w.send_signal(signal.SIGINT)
        w.wait(timeout=5)
    header = next(line for line in reversed(seen) if line.startswith("Proto "))
    assert header.split()[-6:] == ["Req/s", "Acc/s", "Rej/s", "Policy", "PID", "Process"], header
    cells = marked.split()
    columns = header.replace("Local Address:Port", "Local").split()
    accepted = cells[columns.index("Accepted")]
    assert accepted.endswith("*"), marked  # changed since the last refresh
    assert float(cells[columns.index("Acc/s")]) > 0, marked
    assert any(line.startswith("* changed since the last refresh; rates per second over the last")
               for line in seen), seen
