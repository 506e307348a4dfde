"""Shared completion queues and Connection.terminate from Python, over the tcp provider and
real loopback sockets: connections completing into one queue, a queue too small that
overruns, wake(), and a Terminate with the application's cause seen by both sides."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from rdma_interop.errors import TerminateCause, TermLayer
from rdma_interop.provider import (
    Access,
    CompletionQueue,
    CompletionQueueCounters,
    Connection,
    ConnectionState,
    InitialRecv,
    Listener,
    Provider,
    QpCaps,
    WcOpcode,
    WcStatus,
    WorkCompletion,
    WrOpcode,
    find_personality,
    open_provider,
)

from tests.support.waiting import eventually

from .provider_support import SETUP_MS, collect

#: RFC 5041 s7.2: DDP, untagged buffer error (2), "no buffer" (2): what a peer that sends
#: beyond its credits gets.
NO_BUFFER = TerminateCause(TermLayer.DDP, 2, 2)

@pytest.fixture(scope="module")
def provider() -> Provider:
    return open_provider("tcp")


@pytest.fixture
def listener(provider: Provider) -> Iterator[Listener]:
    with provider.listen("tcp://127.0.0.1:0", find_personality("siw").mpa) as lst:
        yield lst


@pytest.fixture
def connect(provider: Provider, listener: Listener) -> Iterator[Callable[..., tuple[Connection, Connection]]]:
    """(initiator, responder) of a new connection to `listener`; the responder accepts with
    `responder_caps`. Both are disconnected afterwards."""
    made: list[Connection] = []
    siw = find_personality("siw")

    def make(responder_caps: QpCaps | None = None) -> tuple[Connection, Connection]:
        with ThreadPoolExecutor(max_workers=1) as pool:
            connected = pool.submit(provider.connect, listener.uri, siw.mpa, b"", None, SETUP_MS)
            pending = listener.next_request(timeout_ms=SETUP_MS)
            assert pending is not None, f"no MPA Request within {SETUP_MS} ms"
            responder = pending.accept(b"", responder_caps)
            initiator = connected.result(timeout=2 * SETUP_MS / 1000)
        made.extend((initiator, responder))
        return initiator, responder

    yield make
    for conn in made:
        conn.disconnect(timeout_ms=500)


def send(conn: Connection, payload: bytes, wr_id: int) -> bytearray:
    """Posts one signaled Send of `payload`; returns the buffer (keep it alive)."""
    buffer = bytearray(payload)
    conn.post_send(WrOpcode.SEND, conn.register(buffer), wr_id=wr_id)
    return buffer


# ---- a shared completion queue ---------------------------------------------------------


def test_two_connections_complete_into_one_shared_queue(
    connect: Callable[..., tuple[Connection, Connection]],
) -> None:
    shared = CompletionQueue(16)
    inbox_a, inbox_b = bytearray(256), bytearray(256)
    ini_a, res_a = connect(QpCaps(initial_recvs=(InitialRecv(inbox_a, 11),), cq=shared))
    ini_b, res_b = connect(QpCaps(initial_recvs=(InitialRecv(inbox_b, 22),), cq=shared))
    # The initiators send first (a responder without peer-to-peer waits for them).
    keep = [send(ini_a, b"to a" * 10, 1), send(ini_b, b"to b" * 5, 2)]

    assert eventually(lambda: shared.counters.depth == 2), shared.counters
    # Both receives come through the first connection's handle...
    got = collect(res_a.poll_completions, 2)
    assert sorted((wc.wr_id, wc.opcode, wc.status, wc.byte_len) for wc in got) == [
        (11, WcOpcode.RECV, WcStatus.SUCCESS, 40),
        (22, WcOpcode.RECV, WcStatus.SUCCESS, 20),
    ]
    assert inbox_a[:40] == keep[0] and inbox_b[:20] == keep[1]
    # ...and the next ones through the other's, or the queue itself.
    rx = bytearray(64)
    res_a.post_recv(res_a.register(rx, Access.LOCAL_WRITE), wr_id=12)
    keep.append(send(ini_a, b"again", 3))
    [again] = collect(res_b.poll_completions, 1)
    assert (again.wr_id, again.byte_len) == (12, 5) and rx[:5] == b"again"
    assert shared.poll(max=4, timeout_ms=50) == []
    assert shared.counters == CompletionQueueCounters(
        entries=16, depth=0, high_water=2, pushed=3, polled=3, overruns=0)
    assert not shared.overrun
    # The initiators, with queues of their own, saw only their own sends.
    assert [wc.wr_id for wc in collect(ini_a.poll_completions, 2)] == [1, 3]
    assert [wc.wr_id for wc in collect(ini_b.poll_completions, 1)] == [2]


def test_a_queue_too_small_and_not_polled_overruns(
    connect: Callable[..., tuple[Connection, Connection]],
) -> None:
    small = CompletionQueue(1)
    inboxes = [bytearray(64) for _ in range(3)]
    ini, res = connect(QpCaps(initial_recvs=tuple(InitialRecv(b, 30 + i) for i, b in enumerate(inboxes)),
                              cq=small))
    keep = [send(ini, bytes([i]) * 8, i) for i in range(3)]
    assert eventually(lambda: small.counters.pushed + small.counters.overruns == 3), small.counters
    assert small.overrun
    assert (small.counters.pushed, small.counters.overruns) == (1, 2)
    # Every message was placed; only the first completion survived.
    assert [bytes(b[:8]) for b in inboxes] == [bytes(k) for k in keep]
    [first] = collect(res.poll_completions, 1)
    assert first.wr_id == 30
    assert res.poll_completions(max=4, timeout_ms=100) == []
    assert small.overrun  # sticky


def test_wake_ends_a_poll_waiting_on_another_thread() -> None:
    cq = CompletionQueue()
    result: list[list[WorkCompletion]] = []
    waiter = threading.Thread(target=lambda: result.append(cq.poll(max=1, timeout_ms=10000)))
    start = time.monotonic()
    waiter.start()
    while waiter.is_alive() and time.monotonic() - start < 5:
        cq.wake()  # the poll releases the GIL while it waits, so this thread runs
        waiter.join(timeout=0.05)
    assert not waiter.is_alive(), "wake() did not end the poll"
    assert result == [[]]
    assert time.monotonic() - start < 5


# ---- Connection.terminate ----------------------------------------------------------------


def test_terminate_sends_the_cause_and_flushes_both_sides(
    connect: Callable[..., tuple[Connection, Connection]],
) -> None:
    ini, res = connect()
    ini_rx, res_rx = bytearray(64), bytearray(128)
    ini.post_recv(ini.register(ini_rx, Access.LOCAL_WRITE), wr_id=61)
    res_mr = res.register(res_rx, Access.LOCAL_WRITE)
    res.post_recv(res_mr, 0, 64, wr_id=51)
    res.post_recv(res_mr, 64, 64, wr_id=52)

    res.terminate(NO_BUFFER)
    assert res.state is ConnectionState.ERROR
    assert res.terminate_sent is not None and res.terminate_sent.cause == NO_BUFFER
    assert res.terminate_sent.ddp_header == b""  # it names no segment
    assert "sent a Terminate" in res.error_detail
    flushed = collect(res.poll_completions, 2)
    assert [(wc.wr_id, wc.status, wc.terminate) for wc in flushed] == [
        (51, WcStatus.FLUSHED, NO_BUFFER), (52, WcStatus.FLUSHED, NO_BUFFER)]

    assert eventually(lambda: ini.terminate_received is not None)
    received = ini.terminate_received
    assert received is not None
    assert (received.layer, received.code) == (TermLayer.DDP, 0x02)
    assert received.cause == NO_BUFFER
    [theirs] = collect(ini.poll_completions, 1)
    assert (theirs.wr_id, theirs.status, theirs.terminate) == (61, WcStatus.FLUSHED, NO_BUFFER)
    assert ini.state is ConnectionState.ERROR
    assert ini.terminate_sent is None


def test_terminate_takes_a_plain_tuple_and_refuses_what_a_terminate_cannot_carry(
    connect: Callable[..., tuple[Connection, Connection]],
) -> None:
    ini, res = connect()
    with pytest.raises(ValueError, match="layer"):
        res.terminate((5, 0, 0))
    with pytest.raises(ValueError, match="error type"):
        res.terminate((1, 16, 0))
    assert res.state is ConnectionState.CONNECTED
    res.terminate((1, 2, 2))
    assert eventually(lambda: ini.terminate_received is not None)
    assert ini.terminate_received is not None and ini.terminate_received.cause == NO_BUFFER
