"""A network partition during MPA setup, made with nftables inside a lab namespace.

The responder's namespace drops every TCP segment that carries data towards the listening
port (the handshake's SYN and ACKs pass, so TCP connects and the MPA Request vanishes). Our
initiator must give up with reply_timeout within its timeout and reset the connection (the
RST carries no data, so it crosses the partition); the responder (siw, whose 5 s request
timeout has not fired yet) reports that reset for the same connection and stays up; once the
partition heals the same pair connects again.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.namespace_lab import namespace_lab

from .fault_support import REPLY_TIMEOUT_MS, SLACK_S

PORT = 7174
TABLE = "rdmai_partition"


def nft(host, *rule: str) -> None:
    result = host.run(["nft", *rule], timeout=10)
    assert result.returncode == 0, f"nft {' '.join(rule)}: {result.stderr}"


@pytest.fixture()
def lab():
    with namespace_lab(2, prefix="rdmaf") as lab:
        yield lab


def connect(host, rdma_probe: str, address: str, personality: Path) -> tuple[dict, float]:
    start = time.monotonic()
    run = host.run([rdma_probe, "connect", f"tcp://{address}:{PORT}", "--personality",
                    str(personality), "--json", "--timeout", "10"], timeout=30)
    return json.loads(run.stdout), time.monotonic() - start


def test_initiator_reports_reply_timeout_across_a_partition_and_recovers(lab, rdma_probe,
                                                                          personality):
    client, server = lab.hosts
    serve = server.popen([rdma_probe, "serve", "--json", "--listen", f"tcp://{server.address}:{PORT}",
                          "--personality", "siw"])
    assert serve.stdout is not None
    assert json.loads(serve.stdout.readline())["event"] == "listening"

    nft(server, "add", "table", "inet", TABLE)
    nft(server, "add", "chain", "inet", TABLE, "input",
        "{ type filter hook input priority 0; policy accept; }")
    nft(server, "add", "rule", "inet", TABLE, "input", "tcp", "dport", str(PORT),
        "tcp", "flags", "&", "psh", "==", "psh", "drop")
    report, took = connect(client, rdma_probe, server.address, personality)
    assert report["ok"] is False, report
    assert report["error"]["failure"] == "reply_timeout", report
    assert took <= REPLY_TIMEOUT_MS / 1000 + SLACK_S, took
    assert serve.poll() is None, "the responder must survive the partition"
    event = json.loads(serve.stdout.readline())
    assert event["event"] == "connection" and event["ok"] is False, event
    assert event["error"]["failure"] == "connection_reset", event
    assert event["elapsed_ms"] < 5000, "before the responder's own request timeout"

    nft(server, "delete", "table", "inet", TABLE)
    report, _ = connect(client, rdma_probe, server.address, personality)
    assert report["ok"] is True, report
    serve.terminate()
    assert serve.wait(timeout=5) == 0
