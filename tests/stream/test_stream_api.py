"""Streams through the Python API (rdma_interop.stream_socket) between two namespace hosts:
tests/stream/stream_peer.py runs each side; each test asserts what it is named for."""

from __future__ import annotations

from typing import Any

from rdma_interop.lab import NamespaceLab
from tests.stream.stream_support import PythonRunner, result_of, wait_for_line

KIB = 1024
MIB = 1024 * KIB


def pair(lab: NamespaceLab, python: PythonRunner, port: int, server_role: str,
         client_role: str, *args: object) -> tuple[dict[str, Any], dict[str, Any]]:
    """Runs a server role on host 0 and its client on host 1; their results."""
    server = python.peer(lab[0], server_role, lab[0].address, port, *args)
    wait_for_line(server, "ready")
    client = python.peer(lab[1], client_role, lab[0].address, port, *args)
    client_result = result_of(client)
    return result_of(server), client_result


def test_random_send_sizes_arrive_in_order_by_copy_and_by_rdma_write(
        lab: NamespaceLab, python: PythonRunner) -> None:
    server = python.peer(lab[0], "serve-digest", lab[0].address, 19001)
    wait_for_line(server, "ready")
    client = result_of(python.peer(lab[1], "send-random", lab[0].address, 19001, 11, 24 * MIB))
    served = result_of(server)
    assert client["upgraded"] and served["upgraded"]
    assert client["received"] == {"sha256": client["sent_sha256"], "length": 24 * MIB}
    assert client["smallest"] < 16 * KIB <= client["largest"]  # both sides of the threshold
    counters = client["counters"]
    assert counters["bytes_copied"] > 0, counters
    assert counters["bytes_placed"] > 0 and counters["writes"] > 0, counters
    # Some Writes went straight from the sender's buffer, posted inline (not all: a send that
    # finds octets waiting for the window is copied behind them).
    assert 0 < counters["bytes_borrowed"] <= counters["bytes_placed"], counters


def test_urgent_octet_marks_its_place_after_a_small_and_after_a_large_send(
        lab: NamespaceLab, python: PythonRunner) -> None:
    served, client = pair(lab, python, 19002, "serve-urgent", "send-urgent")
    assert client["upgraded"]
    assert served["marks"] == [{"octet": "!", "before_mark": 100},
                               {"octet": "?", "before_mark": MIB}]
    assert served["after"] == len(b"tail")


def test_half_close_the_peer_reads_end_of_stream_and_still_answers(
        lab: NamespaceLab, python: PythonRunner) -> None:
    served, client = pair(lab, python, 19003, "serve-half-close", "half-close")
    assert client["upgraded"]
    assert served["got"] == "ping"
    assert client["answer"] == "after your end: ping"


def test_a_stalled_reader_does_not_block_another_stream_of_the_session(
        lab: NamespaceLab, python: PythonRunner) -> None:
    served, client = pair(lab, python, 19004, "serve-stalled", "stalled")
    assert client["upgraded"] == [True, True]
    assert client["hows"] == ["upgrade", "reuse"]  # one session carries both
    # A's writer stopped at what an unread stream may hold (its window and its send buffer,
    # SessionConfig's defaults; less when an unconfirmed RDMA Write pins its send ring) while
    # B carried 8 MiB past it.
    assert 0 < client["a_took"] < MIB + MIB, client["a_rounds"]
    assert client["b_ok"] and served["b_length"] == 8 * MIB
    assert served["a_length"] == 1 + client["a_took"]  # A's octets all arrived, after B's


def test_selectors_echo_server_serves_50_streams_at_once(
        lab: NamespaceLab, python: PythonRunner) -> None:
    served, client = pair(lab, python, 19005, "serve-echo", "echo", 50)
    assert served == {"accepted": 50, "closed": 50, "upgraded": 50}
    assert client["matched"] == 50 and client["upgraded"] == 50
    assert client["hows"] == sorted(["upgrade"] + ["reuse"] * 49)
