"""A peer that dies, falls silent or talks nonsense at each step of MPA setup.

Our side survives every time: it reports a distinct error naming what happened, within the
configured timeout, and (for the server) keeps serving without leaking descriptors. The
misbehaving peer is a separate process killed with SIGKILL, so its socket is closed by the
kernel exactly as for a crashed stack.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from .fault_support import (REPLY_TIMEOUT_MS, REQUEST_TIMEOUT_MS, RTR_TIMEOUT_MS, SLACK_S,
                            ScriptedPeer, Serve)

PEER_GONE = {"connection_closed", "connection_reset"}


def setup_failure(event: dict) -> str:
    assert event["ok"] is False, event
    assert event["error"] is not None, event
    return event["error"]["failure"]


# ---- our responder (rdma-probe serve) survives a misbehaving initiator -------------------

@pytest.mark.parametrize("step", ["tcp", "request", "reply"])
def test_responder_reports_initiator_killed_at_each_step(serve: Serve, scripted, step: str):
    peer: ScriptedPeer = scripted("initiator", serve.host, str(serve.port), "--stop-after", step)
    peer.wait_for(f"at {step}")
    peer.kill()
    event, waited = serve.next_connection(timeout=REQUEST_TIMEOUT_MS / 1000 + SLACK_S)
    assert setup_failure(event) in PEER_GONE, event
    assert waited < REQUEST_TIMEOUT_MS / 1000, "a closed socket must not wait for a timer"


def test_responder_times_out_initiator_that_never_sends_its_request(serve: Serve, scripted):
    peer = scripted("initiator", serve.host, str(serve.port), "--stop-after", "tcp")
    peer.wait_for("at tcp")
    event, waited = serve.next_connection(timeout=REQUEST_TIMEOUT_MS / 1000 + SLACK_S)
    assert setup_failure(event) == "request_timeout", event
    assert REQUEST_TIMEOUT_MS / 1000 * 0.8 <= waited <= REQUEST_TIMEOUT_MS / 1000 + SLACK_S


def test_responder_times_out_initiator_that_never_sends_the_rtr(serve: Serve, scripted):
    peer = scripted("initiator", serve.host, str(serve.port), "--stop-after", "reply")
    peer.wait_for("at reply")
    event, waited = serve.next_connection(timeout=RTR_TIMEOUT_MS / 1000 + SLACK_S)
    assert setup_failure(event) == "rtr_timeout", event
    assert waited <= RTR_TIMEOUT_MS / 1000 + SLACK_S


@pytest.mark.parametrize("kind,failure,detail", [
    ("http", "malformed_frame", "neither"),
    ("oversized", "malformed_frame", "PD_Length"),
    ("truncated", "request_timeout", None),
])
def test_responder_answers_bad_mpa_frames(serve: Serve, scripted, kind, failure, detail):
    peer = scripted("garbage", serve.host, str(serve.port), "--kind", kind)
    peer.wait_for(f"at {kind}")
    event, _ = serve.next_connection(timeout=REQUEST_TIMEOUT_MS / 1000 + SLACK_S)
    assert setup_failure(event) == failure, event
    if detail:
        assert detail in event["error"]["detail"], event


def test_responder_keeps_serving_without_leaking_descriptors(serve: Serve, scripted,
                                                              rdma_probe: str,
                                                              personality: Path):
    baseline = serve.open_fds()
    for step in ["tcp", "request", "reply"]:
        peer = scripted("initiator", serve.host, str(serve.port), "--stop-after", step)
        peer.wait_for(f"at {step}")
        peer.kill()
        serve.next_connection(timeout=REQUEST_TIMEOUT_MS / 1000 + SLACK_S)
    for kind in ["http", "oversized"]:
        peer = scripted("garbage", serve.host, str(serve.port), "--kind", kind)
        peer.wait_for(f"at {kind}")
        serve.next_connection(timeout=REQUEST_TIMEOUT_MS / 1000 + SLACK_S)
        peer.kill()
    # A well-behaved peer is still served, and every descriptor came back.
    result = subprocess.run([rdma_probe, "connect", f"tcp://{serve.address}", "--personality",
                             str(personality), "--json", "--timeout", "10"],
                            capture_output=True, text=True, timeout=30)
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["ok"], result.stdout + result.stderr
    event, _ = serve.next_connection(timeout=5)
    assert event["ok"], event
    deadline = time.monotonic() + 5
    while serve.open_fds() != baseline and time.monotonic() < deadline:
        time.sleep(0.05)
    assert serve.open_fds() == baseline


# ---- our initiator (rdma-probe connect) survives a misbehaving responder -------------------

def run_connect(rdma_probe: str, personality: Path, port: int, timeout_s: float = 10):
    return subprocess.Popen([rdma_probe, "connect", f"tcp://127.0.0.1:{port}", "--personality",
                             str(personality), "--json", "--timeout", str(timeout_s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], within: float) -> tuple[dict, float]:
    start = time.monotonic()
    out, err = proc.communicate(timeout=within)
    assert proc.returncode == 1, f"expected exit 1 (failed, reported), got {proc.returncode}: {err}"
    return json.loads(out), time.monotonic() - start


@pytest.fixture()
def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("step", ["tcp", "request"])
def test_initiator_reports_responder_killed_before_its_reply(rdma_probe, personality, scripted,
                                                             free_port, step):
    peer = scripted("responder", "127.0.0.1", str(free_port), "--stop-after", step)
    peer.wait_for("listening")
    connect = run_connect(rdma_probe, personality, free_port)
    peer.wait_for(f"at {step}")
    peer.kill()
    report, waited = finish(connect, within=REPLY_TIMEOUT_MS / 1000 + SLACK_S)
    assert report["error"]["kind"] == "setup", report
    assert report["error"]["failure"] in PEER_GONE, report
    assert waited < REPLY_TIMEOUT_MS / 1000


def test_initiator_times_out_a_responder_that_never_replies(rdma_probe, personality, scripted,
                                                            free_port):
    peer = scripted("responder", "127.0.0.1", str(free_port), "--stop-after", "request")
    peer.wait_for("listening")
    connect = run_connect(rdma_probe, personality, free_port)
    peer.wait_for("at request")
    report, waited = finish(connect, within=REPLY_TIMEOUT_MS / 1000 + SLACK_S)
    assert report["error"]["failure"] == "reply_timeout", report
    assert waited <= REPLY_TIMEOUT_MS / 1000 + SLACK_S


def test_initiator_reports_responder_killed_after_its_reply(rdma_probe, personality, scripted,
                                                            free_port):
    peer = scripted("responder", "127.0.0.1", str(free_port), "--stop-after", "reply")
    peer.wait_for("listening")
    connect = run_connect(rdma_probe, personality, free_port)
    peer.wait_for("at reply")
    time.sleep(0.2)  # our side sends its RTR and first message into the void
    peer.kill()
    report, _ = finish(connect, within=10)
    # Setup succeeded (Write RTR: the initiator is established when it sends it); the
    # exchange then loses its peer.
    assert report["error"]["kind"] == "exchange", report
    assert report["negotiated"]["rtr"] == "write", report


def test_initiator_decodes_a_terminate_in_mid_transfer(rdma_probe, personality, scripted,
                                                       free_port):
    peer = scripted("responder", "127.0.0.1", str(free_port), "--stop-after", "terminate")
    peer.wait_for("listening")
    connect = run_connect(rdma_probe, personality, free_port)
    peer.wait_for("at terminate")
    report, _ = finish(connect, within=10)
    assert report["error"]["kind"] == "exchange", report
    assert report["error"]["terminate"] == {"layer": 0, "etype": 2, "code": 7}, report
