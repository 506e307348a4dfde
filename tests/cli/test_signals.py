"""SIGINT and SIGTERM in every long-running command (issue 22): each is stopped at a point where
it has partial results, and must print them and exit with its documented status (0 for a
server or --watch, whose normal end a signal is; 1 for a bounded run cut short), never die
with 130 or 143 and nothing printed. A likely cause of that was the provider's event thread
being started before SignalWatch blocked the signals (tools/common/signal_watch.h).
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES
from tests.support.tools import tool_or_skip as tool

from .local_servers import blackholed_port, free_port

SIGNALS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM")]


class Lines:
    """A process's stdout, line by line, read on a thread (so a wait never blocks forever)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.seen: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def next(self, timeout: float = 10.0) -> str:
        line = self._q.get(timeout=timeout)
        assert line is not None, f"the process ended ({self.proc.poll()}) after {self.seen}"
        self.seen.append(line)
        return line

    def wait_for(self, text: str, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            line = self.next(timeout=max(0.1, deadline - time.monotonic()))
            if text in line:
                return line

    def rest(self, timeout: float = 15.0) -> list[str]:
        """Every line until the process ends."""
        deadline = time.monotonic() + timeout
        out = []
        while True:
            line = self._q.get(timeout=max(0.1, deadline - time.monotonic()))
            if line is None:
                return out
            self.seen.append(line)
            out.append(line)


def start(*cmd: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def stop(proc: subprocess.Popen[str], sig: int, within: float) -> tuple[int, str, float]:
    """Sends `sig`; returns the exit status, stderr and how long the process took to end."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(timeout=within + 10)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {within + 10} s after the signal") from None
    took = time.monotonic() - t0
    err = proc.stderr.read() if proc.stderr else ""
    assert took <= within, f"took {took:.1f} s to stop (allowed {within} s): {err}"
    return proc.returncode, err, took


@contextmanager
def running(*cmd: Any) -> Iterator[subprocess.Popen[str]]:
    proc = start(*cmd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def serve_json(personality: Path | str, *extra: str) -> tuple[subprocess.Popen[str], Lines, str]:
    proc = start(tool("rdma-probe"), "serve", "--json", "--listen", "tcp://127.0.0.1:0",
                 "--personality", personality, *extra)
    lines = Lines(proc)
    listening = json.loads(lines.next())
    assert listening["event"] == "listening", listening
    return proc, lines, listening["address"]


@pytest.mark.parametrize("sig", SIGNALS)
def test_probe_prints_what_it_found_and_exits_1(sig: int) -> None:
    server, served, address = serve_json(SHIPPED_PERSONALITIES / "siw.json")
    try:
        with running(tool("rdma-probe"), "--json", "--rtr-wait", "2500ms",
                     f"tcp://{address}") as probe:
            served.wait_for('"event":"connection"')  # the probe has made its first connections
            time.sleep(0.8)
            status, err, _ = stop(probe, sig, within=8)
            assert probe.stdout is not None
            report = json.loads(probe.stdout.read())
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    assert status == 1, err
    assert report["outcome"] == "probed", report["detail"]
    assert "stopped early by a signal" in report["detail"]
    assert report["stopped_by_signal"] is True, "the outcome is only what it had so far"
    verdicts = {c["id"]: c["verdict"] for c in report["capabilities"]}
    assert verdicts["iwarp"] == "ok"  # found before the signal
    assert "not_tested" in verdicts.values(), verdicts  # the probes never made
    assert report["connections"] < 20, report["connections"]


@pytest.mark.parametrize("sig", SIGNALS)
def test_connect_in_its_exchange_prints_the_report_so_far_and_exits_1(sig: int,
                                                                       personality) -> None:
    # A responder waiting 10 s for an RTR that a never-RTR initiator never sends: the
    # initiator is connected and inside its exchange when the signal comes.
    server, served, address = serve_json(personality("siw", rtr_timeout_ms=10000))
    try:
        with running(tool("rdma-probe"), "connect", f"tcp://{address}", "--personality",
                     personality("never-rtr"), "--json", "--timeout", "30s") as connect:
            time.sleep(1.0)
            status, err, _ = stop(connect, sig, within=3)
            assert connect.stdout is not None
            report = json.loads(connect.stdout.read())
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    assert status == 1, err
    assert report["ok"] is False
    assert report["negotiated"] is not None and report["negotiated"]["peer_to_peer"] is True
    assert report["error"]["kind"] == "interrupted", report["error"]
    assert report["error"]["detail"] == f"stopped by signal {int(sig)} during the exchange"
    assert report["exchange"] is not None


@pytest.mark.parametrize("sig", SIGNALS)
def test_connect_stuck_in_its_tcp_connect_prints_the_report_and_exits_1(sig: int) -> None:
    with blackholed_port() as port:
        with running(tool("rdma-probe"), "connect", f"tcp://127.0.0.1:{port}", "-p", "siw",
                     "--json", "--timeout", "60") as connect:
            time.sleep(1.0)
            # The provider's connect cannot be cut short: past the grace (1 s) the watcher
            # prints the report so far and ends the process.
            status, err, _ = stop(connect, sig, within=4)
            assert connect.stdout is not None
            report = json.loads(connect.stdout.read())
    assert status == 1, err
    assert report["ok"] is False and report["negotiated"] is None
    assert report["error"]["kind"] == "interrupted"
    assert "during the TCP connect and MPA setup" in report["error"]["detail"], report["error"]
    assert "stopping on signal" in err


@pytest.mark.parametrize("sig", SIGNALS)
@pytest.mark.parametrize("as_json", [False, True], ids=["log", "json"])
def test_serve_prints_its_counters_and_exits_0(sig: int, as_json: bool, personality) -> None:
    cmd = [tool("rdma-probe"), "serve", "--listen", "tcp://127.0.0.1:0", "--personality",
           personality("siw")] + (["--json"] if as_json else [])
    with running(*cmd) as serve:
        lines = Lines(serve)
        first = lines.next()
        address = json.loads(first)["address"] if as_json else first.split()[3]
        connect = subprocess.run([str(tool("rdma-probe")), "connect", f"tcp://{address}", "-p",
                                  str(personality("siw")), "--timeout", "5"],
                                 capture_output=True, text=True, timeout=20)
        assert connect.returncode == 0, connect.stdout + connect.stderr
        lines.wait_for("connection")
        status, err, took = stop(serve, sig, within=2)
        rest = lines.rest()
    assert status == 0, err
    assert took < 1.5
    assert f"stopped by signal {int(sig)} after 1 connection(s)" in err
    if as_json:
        counters = json.loads(rest[-1])
        assert counters["event"] == "counters" and counters["accepted"] == 1, counters
    else:
        # The last entry of the log, its continuation lines joined.
        last = " ".join(" ".join(rest).split()).rsplit(" counters: ", 1)
        assert len(last) == 2, rest
        assert last[1].startswith("overflow reject, backlog 16,"), rest
        assert "accepted 1," in last[1], rest


@pytest.mark.parametrize("sig", SIGNALS)
def test_storm_prints_the_report_of_what_was_done_and_exits_1(sig: int) -> None:
    # One slot, a slow acceptor: the storm takes far longer than the test waits.
    server, _, address = serve_json(SHIPPED_PERSONALITIES / "siw.json", "--backlog", "1",
                                    "--accept-delay", "150ms", "--exchange-timeout", "1s")
    try:
        with running(tool("rdma-storm"), f"tcp://{address}", "--attempts", "500",
                     "--concurrency", "2", "--timeout", "5s", "--progress", "0",
                     "--json") as storm:
            time.sleep(1.5)
            status, err, _ = stop(storm, sig, within=8)
            assert storm.stdout is not None
            report = json.loads(storm.stdout.read())
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=10)
    assert status == 1, err
    assert report["stopped_by_signal"] is True and report["hit_duration_limit"] is False
    assert 0 < report["attempts"] < report["planned"] == 500, report["attempts"]
    assert sum(report["outcomes"].values()) == report["attempts"]
    assert report["outcomes"]["connected"] > 0
    assert report["latency_ms"]["connected"]["p50"] is not None
    assert f"stopped by signal {int(sig)} after {report['attempts']} of 500 attempts" in err


@pytest.mark.parametrize("sig", SIGNALS)
def test_mesh_node_prints_its_summary_and_exits_1(sig: int, tmp_path: Path) -> None:
    ports = {"a": free_port(), "b": free_port()}

    def node(name: str, other: str) -> list[Any]:
        return [tool("rdma-mesh"), "node", "--name", name, "--listen",
                f"tcp://127.0.0.1:{ports[name]}", "--peer", f"{other}=tcp://127.0.0.1:{ports[other]}",
                "--duration", "60s", "--rate", "200", "--report-interval", "200ms", "--drain", "100ms",
                "--json"]

    env_dir = tmp_path / "run"
    with running("env", f"RDMA_INTEROP_RUN_DIR={env_dir}", *node("a", "b")) as a, \
            running("env", f"RDMA_INTEROP_RUN_DIR={env_dir}", *node("b", "a")) as b:
        a_lines, b_lines = Lines(a), Lines(b)
        a_lines.wait_for('"event":"report"', timeout=20)  # running, with figures
        status_a, err_a, _ = stop(a, sig, within=8)
        status_b, err_b, _ = stop(b, sig, within=8)
        a_lines.rest()
        b_lines.rest()
        a_out, b_out = a_lines.seen, b_lines.seen
    for status, err, out in ((status_a, err_a, a_out), (status_b, err_b, b_out)):
        assert status == 1, err
        summary = [json.loads(line) for line in out if '"event":"summary"' in line]
        assert len(summary) == 1, out[-3:]
        assert summary[0]["stopped_by_signal"] is True
        assert 0 < summary[0]["run_s"] < 60
    a_summary = json.loads(next(line for line in a_out if '"event":"summary"' in line))
    assert a_summary["peers"]["b"]["app"]["stream_sent"] > 0


@pytest.mark.parametrize("sig", SIGNALS)
def test_mesh_setup_against_a_blackholed_peer_stops_on_a_signal_and_at_its_deadline(
        sig: int) -> None:
    """Setup tries one connect at a time within what is left of --setup-timeout, and looks
    for a signal between tries: against a peer whose SYNs go unanswered it ended ten times
    past its deadline, and held a signal for the 15 s grace."""
    with blackholed_port() as port:
        def node(timeout: str) -> list[Any]:
            return [tool("rdma-mesh"), "node", "--name", "a", "--listen",
                    f"tcp://127.0.0.1:{free_port()}", "--peer", f"b=tcp://127.0.0.1:{port}",
                    "--setup-timeout", timeout, "--json"]

        t0 = time.monotonic()
        done = subprocess.run([str(a) for a in node("2s")], capture_output=True, text=True,
                              timeout=60)
        took = time.monotonic() - t0
        assert done.returncode == 1, done
        assert took < 4, f"setup of 2 s took {took:.1f} s"
        assert "mesh setup incomplete" in done.stdout, done.stdout

        with running(*node("60s")) as a:
            lines = Lines(a)
            lines.wait_for('"event":"listening"')
            time.sleep(1)  # inside a connect attempt that gets no answer
            status, err, took = stop(a, sig, within=7)
            lines.rest()
        assert status == 1, err
        errors = [json.loads(line) for line in lines.seen if '"event":"error"' in line]
        assert len(errors) == 1 and "stopped by a signal" in errors[0]["error"], lines.seen


@pytest.mark.parametrize("sig", SIGNALS)
def test_backlog_stat_watch_keeps_its_screens_and_exits_0(sig: int, tmp_path: Path,
                                                          personality) -> None:
    run_dir = tmp_path / "run"
    with running("env", f"RDMA_INTEROP_RUN_DIR={run_dir}", tool("rdma-probe"), "serve", "--json",
                 "--listen", "tcp://127.0.0.1:0", "--personality", personality("siw")) as serve:
        address = json.loads(Lines(serve).next())["address"]
        with running(tool("backlog-stat"), "--watch", "0.2", "--run-dir", run_dir) as watch:
            lines = Lines(watch)
            lines.wait_for(address)
            lines.wait_for("Every 0.2s")  # a second screen
            status, err, _ = stop(watch, sig, within=2)
            lines.rest()
            out = "".join(lines.seen)
    assert status == 0, err
    assert out.count("Every 0.2s: backlog-stat") >= 2
    assert address in out and "Acc/s" in out


@pytest.mark.parametrize("sig", SIGNALS)
def test_verbs_check_prints_the_checks_so_far_and_exits_1(sig: int) -> None:
    # Two-node form against a serve that never comes: each check's client tries to connect
    # until --timeout, so the run takes checks x 3 s; the signal comes after the first.
    port = free_port()
    with running(tool("verbs-check"), "--peer", f"verbs://127.0.0.1:{port}", "--timeout", "3s",
                 "--json") as check:
        lines = Lines(check)
        try:
            first = json.loads(lines.next(timeout=30))
        except AssertionError:
            pytest.fail(f"verbs-check ended before its first check: {check.stderr.read()}")
        time.sleep(0.5)
        if check.poll() is not None:
            pytest.fail("verbs-check finished every check before the signal: nothing to cut short")
        status, err, _ = stop(check, sig, within=3)
        results = [first] + [json.loads(line) for line in lines.rest()]
    assert status == 1, err
    assert first["check"] == "send-recv" and first["result"] == "error"
    stopped = results[-1]
    assert stopped.get("stopped") is True, results
    assert stopped["detail"].startswith(f"stopped by signal {int(sig)} before the check finished")
    listed = subprocess.run([str(tool("verbs-check")), "--list"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert len(results) < len(listed)
    assert f"stopped by signal {int(sig)} after {len(results)} of {len(listed)} check(s)" in err
