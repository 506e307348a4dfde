"""rdma-mesh as a command: argument errors, a setup that cannot complete, a stop by signal, and
what two nodes on loopback count. No lab needed: loopback addresses, fixed ports.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from typing import Any

import pytest

from rdma_interop.wire import MpaFrame, MpaKind


def _node(tool: str, run_dir: Any, name: str, port: int, peers: dict[str, int],
          *extra: str) -> list[str]:
    cmd = ["env", f"RDMA_INTEROP_RUN_DIR={run_dir}", tool, "node", "--name", name,
           "--listen", f"tcp://127.0.0.1:{port}", "--json", *extra]
    for peer, p in peers.items():
        cmd += ["--peer", f"{peer}=tcp://127.0.0.1:{p}"]
    return cmd


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("args, says", [
    (["--listen", "tcp://127.0.0.1:7390", "--peer", "b"], "expected NAME=URI"),
    (["--listen", "tcp://127.0.0.1:0", "--peer", "b=tcp://127.0.0.1:7391"], "fixed port"),
    (["--listen", "tcp://127.0.0.1:7390", "--peer", "a=tcp://127.0.0.1:7391"], "own --name"),
    (["--listen", "tcp://127.0.0.1:7390", "--peer", "b=tcp://127.0.0.1:7391",
      "--peer", "b=tcp://127.0.0.1:7392"], "given twice"),
    (["--listen", "tcp://127.0.0.1:7390", "--peer", "b=tcp://127.0.0.1:7391", "--size", "5000"],
     "over --max-message"),
    (["--listen", "tcp://127.0.0.1:7390", "--peer", "b=tcp://127.0.0.1:7391", "--window", "1"],
     "--window"),
    (["--listen", "tcp://127.0.0.1:7390", "--peer", "b=tcp://127.0.0.1:7391", "--mode", "x"],
     "--mode"),
])
def test_bad_arguments_exit_2_with_a_sentence(tools: dict[str, str], args: list[str],
                                              says: str) -> None:
    done = subprocess.run([tools["rdma-mesh"], "node", "--name", "a", *args],
                          capture_output=True, text=True, timeout=10)
    assert done.returncode == 2, done
    assert says in done.stderr, done.stderr
    assert done.stdout == ""


def test_setup_that_cannot_complete_exits_1_naming_the_peer(tools: dict[str, str],
                                                            run_dir: Any) -> None:
    # "b" sorts after "a": a connects to it and retries until the setup timeout; "0" sorts
    # before: a waits for it to call.
    start = time.monotonic()
    done = subprocess.run(_node(tools["rdma-mesh"], run_dir, "a", 7393, {"b": 7394, "0": 7395},
                                "--setup-timeout", "1.5"),
                          capture_output=True, text=True, timeout=30)
    elapsed = time.monotonic() - start
    assert done.returncode == 1, done
    error = [d for d in _lines(done.stdout) if d["event"] == "error"]
    assert error, done.stdout
    assert "b: connect to tcp://127.0.0.1:7394 failed" in error[0]["error"]
    assert "0: never connected to us" in error[0]["error"]
    assert 1.4 <= elapsed < 10, elapsed


def test_two_nodes_count_every_message_and_stop_on_sigterm(tools: dict[str, str],
                                                           run_dir: Any) -> None:
    a = subprocess.Popen(_node(tools["rdma-mesh"], run_dir, "a", 7396, {"b": 7397},
                               "--duration", "30", "--rate", "500",
                               "--report-interval-ms", "200"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(_node(tools["rdma-mesh"], run_dir, "b", 7397, {"a": 7396},
                               "--duration", "2", "--rate", "500", "--mode", "request-reply",
                               "--report-interval-ms", "200"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        b_out, b_err = b.communicate(timeout=30)
        # b ran its 2 s; a (30 s) is stopped by a signal and must still print its summary.
        a.send_signal(signal.SIGTERM)
        a_out, a_err = a.communicate(timeout=30)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert b.returncode == 0, b_err
    # a's 30 s run was cut short: its summary is printed, and the status says it did not run
    # its course (tools/common/exit_status.h).
    assert a.returncode == 1, a_err
    a_lines, b_lines = _lines(a_out), _lines(b_out)
    a_sum = next(d for d in a_lines if d["event"] == "summary")
    b_sum = next(d for d in b_lines if d["event"] == "summary")
    assert a_sum["stopped_by_signal"] is True
    assert b_sum["stopped_by_signal"] is False
    assert 1.9 <= b_sum["run_s"] <= 2.1
    # a streamed to b, b sent requests to a: each side counted what the other sent, in order,
    # and every request of b's was answered by a.
    a_app, b_app = a_sum["peers"]["b"]["app"], b_sum["peers"]["a"]["app"]
    assert b_app["stream_received"] > 0 and b_app["requests_sent"] > 0
    assert b_app["stream_received"] <= a_app["stream_sent"]
    assert a_app["requests_received"] == b_app["requests_sent"]
    assert a_app["replies_sent"] == b_app["requests_sent"] == b_app["replies_received"]
    assert a_app["sequence_errors"] == b_app["sequence_errors"] == 0
    # At 500/s for 2 s (plus a's send during b's drain): about 1000 requests.
    assert 900 <= b_app["requests_sent"] <= 1100, b_app
    for line in a_lines + b_lines:
        if line["event"] == "report":
            assert line["rss_kib"] > 0


def test_a_caller_whose_name_is_not_utf8_is_refused_and_the_node_lives_on(
        tools: dict[str, str], run_dir: Any) -> None:
    # Issue 17: the name after the 16 octets of credit parameters is bytes the peer chose. A
    # '\xff' in it used to abort the node (SIGABRT): the JSON writer threw on invalid UTF-8
    # inside setup, and the exception unwound past joinable connect threads.
    # "z" sorts after "b": a connect thread runs toward it (and retries) while the request
    # arrives, as when the old node aborted with "terminate called without an active
    # exception"; "a" sorts before: b waits for its call.
    node = subprocess.Popen(_node(tools["rdma-mesh"], run_dir, "b", 7398, {"a": 7399, "z": 7400},
                                  "--setup-timeout", "3"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                sock = socket.create_connection(("127.0.0.1", 7398), timeout=2)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "rdma-mesh never listened"
                time.sleep(0.05)
        with sock:
            name = b"\xff\x1b[2J\nforged"
            sock.sendall(MpaFrame(kind=MpaKind.REQUEST, revision=1, crc=True,
                                  private_data=bytes(16) + name).encode())
            answer = b""
            while len(answer) < MpaFrame.HEADER_LEN or len(answer) < MpaFrame.frame_length(
                    answer[:MpaFrame.HEADER_LEN]):
                chunk = sock.recv(4096)
                assert chunk, f"closed after {answer!r}"
                answer += chunk
            reply = MpaFrame.decode(answer[:MpaFrame.frame_length(answer[:MpaFrame.HEADER_LEN])])
        assert reply.reject, reply
        assert b"not a peer that calls us: '\\xff\\x1b[2J\\nforged'" in reply.private_data, reply
        out, err = node.communicate(timeout=30)
    finally:
        if node.poll() is None:
            node.kill()
            node.communicate()
    # It went on to its setup timeout and said why, like any setup that cannot complete.
    assert node.returncode == 1, (node.returncode, err)
    lines = _lines(out)
    notices = [d["notice"] for d in lines if d["event"] == "notice"]
    assert any("\\xff\\x1b[2J\\nforged" in n for n in notices), lines
    error = [d for d in lines if d["event"] == "error"]
    assert error and "a: never connected to us" in error[0]["error"], lines
