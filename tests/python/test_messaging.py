"""The credit-managed message endpoint from Python: endpoints over the tcp provider on
127.0.0.1, real sockets, in one process (accepts on a helper thread). Messages both ways,
replies at once and after a hold, back-pressure as TRY_AGAIN toward a peer that does not
consume while another peer keeps going, a peer without credit parameters refused at setup,
a peer sending without credit terminated with DDP "no buffer", and the connections visible
to backlog-stat. Every wait is bounded."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rdma_interop.errors import TermLayer
from rdma_interop.messaging import (
    EndpointConfig,
    Message,
    MessageEndpoint,
    PeerId,
    PeerState,
    SendStatus,
)
from rdma_interop.provider import (
    Connection,
    ConnectError,
    MpaPolicy,
    Provider,
    find_personality,
    open_provider,
)

from tests.support.tools import find_tool
from tests.support.waiting import eventually

from .provider_support import SETUP_MS, pattern

WAIT_S = 5.0


def settled(sender: Node, to_receiver: PeerId, receiver: Node, to_sender: PeerId,
            held: int = 0, window: int = 16) -> bool:
    """Nothing in flight and every buffer accounted for: the receiver has its whole window
    posted but the held ones, and the sender's credits are exactly what the receiver has
    announced (grants still pending are batched, not lost)."""
    s, r = sender.endpoint.stats(to_receiver), receiver.endpoint.stats(to_sender)
    assert s is not None and r is not None
    return (r.credit.posted == window - held and s.credit.credits == r.credit.granted
            and r.credit.granted + r.credit.pending_grant == window - held)


def drain(q: queue.Queue[Any]) -> list[Any]:
    got = []
    while True:
        try:
            got.append(q.get_nowait())
        except queue.Empty:
            return got


def take(q: queue.Queue[Any], n: int, seconds: float = WAIT_S) -> list[Any]:
    """Exactly n items within `seconds`, or the test fails saying how many came."""
    deadline = time.monotonic() + seconds
    got: list[Any] = []
    while len(got) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            pytest.fail(f"{len(got)} of {n} within {seconds} s")
        try:
            got.append(q.get(timeout=min(left, 0.2)))
        except queue.Empty:
            pass
    return got


def send_all(sender: Node, peer: PeerId, payloads: list[bytes]) -> int:
    """Sends every payload in order, waiting whenever the peer's queue is full, as an
    application does with EAGAIN; returns how many times it had to wait."""
    waits = 0
    for payload in payloads:
        while (status := sender.endpoint.send(peer, payload)) is SendStatus.TRY_AGAIN:
            waits += 1
            assert sender.endpoint.wait_ready(peer, timeout_ms=SETUP_MS), "peer never ready"
        assert status is SendStatus.OK, status
    return waits


@dataclass
class Node:
    """An endpoint whose handler puts every message on `inbox` (and then does `also`)."""

    endpoint: MessageEndpoint
    inbox: queue.Queue[Message] = field(default_factory=queue.Queue)
    ready: queue.Queue[PeerId] = field(default_factory=queue.Queue)
    failures: queue.Queue[tuple[PeerId, str]] = field(default_factory=queue.Queue)
    closes: queue.Queue[tuple[PeerId, str]] = field(default_factory=queue.Queue)


@pytest.fixture(scope="module")
def provider() -> Provider:
    return open_provider("tcp")


@pytest.fixture(scope="module")
def policy() -> MpaPolicy:
    return find_personality("siw").mpa


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="messaging-test") as executor:
        yield executor


@pytest.fixture
def node() -> Iterator[Callable[..., Node]]:
    """node(config, also=fn(node, message)) -> a Node; every endpoint is closed afterwards."""
    made: list[Node] = []

    def make(config: EndpointConfig | None = None,
             also: Callable[[Node, Message], object] | None = None) -> Node:
        box: list[Node] = []

        def on_message(m: Message) -> None:
            box[0].inbox.put(m)
            if also is not None:
                also(box[0], m)

        endpoint = MessageEndpoint(
            config, on_message=on_message,
            on_ready=lambda peer: box[0].ready.put(peer),
            on_failure=lambda peer, why: box[0].failures.put((peer, why)),
            on_close=lambda peer, why: box[0].closes.put((peer, why)),
        )
        n = Node(endpoint)
        box.append(n)
        made.append(n)
        return n

    yield make
    for n in made:
        n.endpoint.close()


@pytest.fixture
def link(provider: Provider, policy: MpaPolicy,
         pool: ThreadPoolExecutor) -> Iterator[Callable[[Node, Node], tuple[PeerId, PeerId]]]:
    """link(a, b) connects a to b (b accepts on a helper thread): (a's id of b, b's id of a)."""
    listeners = []

    def connect(a: Node, b: Node, a_name: str = "a", b_name: str = "b") -> tuple[PeerId, PeerId]:
        listener = provider.listen("tcp://127.0.0.1:0", policy)
        listeners.append(listener)

        def accept() -> PeerId:
            pending = listener.next_request(timeout_ms=SETUP_MS)
            assert pending is not None, "no MPA Request"
            return b.endpoint.accept(pending, a_name)

        accepted = pool.submit(accept)
        to_b = a.endpoint.connect(provider, listener.uri, policy, b_name, timeout_ms=SETUP_MS)
        return to_b, accepted.result(timeout=2 * SETUP_MS / 1000)

    yield connect
    for listener in listeners:
        listener.close()


# ---- messages ----------------------------------------------------------------------------


def test_messages_flow_both_ways_in_order(node, link) -> None:
    a, b = node(), node()
    to_b, to_a = link(a, b)
    count = 500  # well over the window and queue: credits must come back for the rest to go
    with ThreadPoolExecutor(max_workers=2) as senders:
        waits = [senders.submit(send_all, a, to_b, [pattern(i, 100 + i) for i in range(count)]),
                 senders.submit(send_all, b, to_a, [pattern(1000 + i, 50) for i in range(count)])]
        [w.result(timeout=30) for w in waits]
    at_b = take(b.inbox, count)
    at_a = take(a.inbox, count)
    assert [m.payload for m in at_b] == [pattern(i, 100 + i) for i in range(count)]
    assert [m.payload for m in at_a] == [pattern(1000 + i, 50) for i in range(count)]
    assert {m.peer for m in at_b} == {to_a} and {m.peer for m in at_a} == {to_b}

    sa, sb = a.endpoint.stats(to_b), b.endpoint.stats(to_a)
    assert sa is not None and sb is not None
    assert sa.state is PeerState.CONNECTED and sa.name == "b" and sb.name == "a"
    assert sa.terminate_sent is None and sa.terminate_received is None and sa == sa.replace()
    assert sa.messages_sent == sb.messages_received == count
    assert sa.bytes_sent == sb.bytes_received == sum(100 + i for i in range(count))
    assert sa.writes_sent == sa.bytes_written == 0  # no tagged writes from Python
    assert sa.credit.sent == sb.credit.received == count
    assert sa.local_address == sb.peer_address and sa.peer_address == sb.local_address
    # Every buffer comes back once every message is consumed.
    assert eventually(lambda: settled(a, to_b, b, to_a) and settled(b, to_a, a, to_b))
    budget = a.endpoint.endpoint_stats.budget
    assert budget.high_water <= budget.cq_entries
    assert a.endpoint.endpoint_stats.cq.overruns == 0
    assert a.endpoint.peers() == [to_b]


def test_reply_in_the_handler_answers_each_request(node, link) -> None:
    b = node(also=lambda n, m: n.endpoint.reply(m, b"re:" + m.payload))
    a = node()
    to_b, _ = link(a, b)
    send_all(a, to_b, [b"q%d" % i for i in range(200)])
    assert [m.payload for m in take(a.inbox, 200)] == [b"re:q%d" % i for i in range(200)]
    assert b.endpoint.reply(take(b.inbox, 200)[0], b"late") is SendStatus.NOT_HELD


def test_hold_keeps_the_credit_until_the_later_reply(node, link) -> None:
    b = node(also=lambda n, m: n.endpoint.hold(m))
    a = node()
    to_b, to_a = link(a, b)
    for i in range(5):
        assert a.endpoint.send(to_b, b"req%d" % i) is SendStatus.OK
    held = take(b.inbox, 5)
    assert b.endpoint.stats(to_a).held == 5
    # Held buffers are not granted back: a's credits toward b stay 5 short.
    time.sleep(0.2)
    assert a.endpoint.stats(to_b).credit.credits == 16 - 5
    for m in reversed(held):
        assert b.endpoint.reply(m, b"ans:" + m.payload) is SendStatus.OK
    assert sorted(m.payload for m in take(a.inbox, 5)) == sorted(b"ans:req%d" % i for i in range(5))
    assert b.endpoint.stats(to_a).held == 0
    assert eventually(lambda: settled(a, to_b, b, to_a))
    assert b.endpoint.reply(held[0], b"twice") is SendStatus.NOT_HELD
    assert b.endpoint.release(held[0]) is SendStatus.NOT_HELD


def test_release_gives_a_held_buffer_back_without_a_reply(node, link) -> None:
    b = node(also=lambda n, m: n.endpoint.hold(m))
    a = node()
    to_b, to_a = link(a, b)
    assert a.endpoint.send(to_b, b"x") is SendStatus.OK
    [m] = take(b.inbox, 1)
    assert b.endpoint.stats(to_a).held == 1
    assert b.endpoint.release(m) is SendStatus.OK
    assert b.endpoint.stats(to_a).held == 0
    assert eventually(lambda: settled(a, to_b, b, to_a))
    assert a.inbox.empty()


# ---- back-pressure -----------------------------------------------------------------------


def test_try_again_toward_a_peer_that_does_not_consume_while_others_keep_going(node, link) -> None:
    config = EndpointConfig(receive_window=8, send_queue_limit=10, reply_reserve=1)
    stalled = node(config, also=lambda n, m: n.endpoint.hold(m))  # holds everything
    healthy = node(config)
    sender = node(config)
    to_stalled, to_sender = link(sender, stalled, "sender", "stalled")
    to_healthy, _ = link(sender, healthy, "sender", "healthy")

    statuses = [sender.endpoint.send(to_stalled, b"m%d" % i) for i in range(40)]
    # Requests may use all credits but the reply reserve, then queue up to the limit.
    accepted = (8 - 1) + 10
    assert statuses[:accepted] == [SendStatus.OK] * accepted
    assert statuses[accepted:] == [SendStatus.TRY_AGAIN] * (40 - accepted)
    s = sender.endpoint.stats(to_stalled)
    assert (s.queued, s.refused, s.credit.credits) == (10, 40 - accepted, 1)
    assert not sender.endpoint.wait_ready(to_stalled, timeout_ms=100)
    assert eventually(lambda: stalled.endpoint.stats(to_sender).held == 8 - 1)

    # The other peer is not behind the stalled one: 300 messages go through meanwhile.
    send_all(sender, to_healthy, [b"h%d" % i for i in range(300)])
    assert [m.payload for m in take(healthy.inbox, 300)] == [b"h%d" % i for i in range(300)]
    assert sender.endpoint.stats(to_stalled).queued == 10

    # The stalled peer catches up: its queue drains, on_ready fires, sends go again.
    for m in take(stalled.inbox, 8 - 1):
        assert stalled.endpoint.release(m) is SendStatus.OK
    assert eventually(lambda: to_stalled in drain(sender.ready))
    assert sender.endpoint.wait_ready(to_stalled, timeout_ms=SETUP_MS)
    assert sender.endpoint.send(to_stalled, b"again") is SendStatus.OK
    # Seven buffers came back, so seven of the queued ten went (and are held in turn).
    later = take(stalled.inbox, 7)
    assert [m.payload for m in later] == [b"m%d" % i for i in range(7, 14)]
    s = sender.endpoint.stats(to_stalled)
    assert (s.queued, s.lost) == (3 + 1, 0)


def test_statuses_for_what_cannot_be_sent(node, link) -> None:
    a = node(EndpointConfig(max_message=1024))
    b = node(EndpointConfig(max_message=256))
    to_b, to_a = link(a, b)
    assert a.endpoint.send(to_b, bytes(256)) is SendStatus.OK  # b's max_message
    assert a.endpoint.send(to_b, bytes(257)) is SendStatus.TOO_LONG
    assert b.endpoint.send(to_a, bytes(1024)) is SendStatus.OK
    assert a.endpoint.send(9999, b"x") is SendStatus.UNKNOWN_PEER
    assert a.endpoint.hold(12345) is SendStatus.NOT_HELD
    assert a.endpoint.stats(9999) is None
    a.endpoint.close_peer(to_b, timeout_ms=1000)
    assert a.endpoint.send(to_b, b"x") is SendStatus.UNKNOWN_PEER
    assert a.endpoint.peers() == []


# ---- setup -------------------------------------------------------------------------------


def test_a_peer_without_credit_parameters_is_refused(node, provider: Provider, policy: MpaPolicy,
                                                      pool: ThreadPoolExecutor) -> None:
    server = node()
    with provider.listen("tcp://127.0.0.1:0", policy) as listener:
        def accept() -> PeerId:
            pending = listener.next_request(timeout_ms=SETUP_MS)
            assert pending is not None
            return server.endpoint.accept(pending, "plain")

        accepted = pool.submit(accept)
        with pytest.raises(ConnectError) as plain:
            provider.connect(listener.uri, policy, b"hello, no credits here", timeout_ms=SETUP_MS)
        with pytest.raises(ConnectError) as at_server:
            accepted.result(timeout=2 * SETUP_MS / 1000)
    assert at_server.value.kind == "setup"
    assert "credit parameters" in at_server.value.detail
    assert "magic" in at_server.value.detail  # which check failed, in a sentence
    # The plain peer is rejected, and the Reject's private data says why.
    assert plain.value.failure == "peer_rejected"
    assert plain.value.peer_private_data is not None
    assert b"no credit parameters" in plain.value.peer_private_data
    assert server.endpoint.peers() == []


def test_connecting_to_a_peer_that_answers_without_credit_parameters_fails(
    node, provider: Provider, policy: MpaPolicy, pool: ThreadPoolExecutor
) -> None:
    client = node()
    with provider.listen("tcp://127.0.0.1:0", policy) as listener:
        def plain_accept() -> Connection:
            pending = listener.next_request(timeout_ms=SETUP_MS)
            assert pending is not None
            return pending.accept(b"")  # an application that knows nothing of credits

        accepted = pool.submit(plain_accept)
        with pytest.raises(ConnectError) as e:
            client.endpoint.connect(provider, listener.uri, policy, "plain", timeout_ms=SETUP_MS)
        conn = accepted.result(timeout=2 * SETUP_MS / 1000)
        conn.disconnect(timeout_ms=500)
    assert e.value.kind == "setup"
    assert "did not offer credit parameters" in e.value.detail
    assert "shorter than the 16-octet credit parameters" in e.value.detail
    assert client.endpoint.peers() == []


def test_private_data_rides_after_the_credit_parameters(node, provider: Provider,
                                                        policy: MpaPolicy,
                                                        pool: ThreadPoolExecutor) -> None:
    server, client = node(), node()
    with provider.listen("tcp://127.0.0.1:0", policy) as listener:
        def accept() -> tuple[bytes, PeerId]:
            pending = listener.next_request(timeout_ms=SETUP_MS)
            assert pending is not None
            request_data = pending.request.private_data
            return request_data, server.endpoint.accept(pending, "client", b"server-hello")

        accepted = pool.submit(accept)
        client.endpoint.connect(provider, listener.uri, policy, "server", b"I am node7",
                                timeout_ms=SETUP_MS)
        request_data, _ = accepted.result(timeout=2 * SETUP_MS / 1000)
    assert request_data[:4] == b"RICR" and request_data[4] == 1  # magic, version
    assert request_data[16:] == b"I am node7"


def test_bad_config_is_refused_when_a_peer_is_added(node, provider: Provider,
                                                    policy: MpaPolicy) -> None:
    a = node(EndpointConfig(reply_reserve=16, receive_window=16))
    with pytest.raises(ConnectError) as e:  # before any socket: nothing listens there
        a.endpoint.connect(provider, "tcp://127.0.0.1:9", policy, "nobody", timeout_ms=SETUP_MS)
    assert e.value.kind == "invalid_argument" and "reply_reserve" in e.value.detail


# ---- a peer that breaks the protocol -----------------------------------------------------


def test_a_peer_sending_without_credit_gets_ddp_no_buffer(node, link) -> None:
    victim = node(EndpointConfig(receive_window=4), also=lambda n, m: n.endpoint.hold(m))
    rogue = node(EndpointConfig(receive_window=4, ignore_credits=True))
    to_victim, to_rogue = link(rogue, victim, "rogue", "victim")
    for i in range(10):
        rogue.endpoint.send(to_victim, b"flood%d" % i)
    peer, why = take(victim.failures, 1)[0]
    assert peer == to_rogue and "credit" in why
    s = victim.endpoint.stats(to_rogue)
    assert s.state is PeerState.FAILED
    assert s.terminate_sent is not None
    assert (s.terminate_sent.layer, s.terminate_sent.etype, s.terminate_sent.code) == \
        (TermLayer.DDP, 0x2, 0x02)  # untagged buffer error, no buffer (RFC 5041 s7.2)
    assert eventually(lambda: rogue.endpoint.stats(to_victim).terminate_received is not None)
    got = rogue.endpoint.stats(to_victim).terminate_received
    assert got is not None and (got.layer, got.code) == (TermLayer.DDP, 0x02)
    # Its connection fails too once the flushed work requests complete.
    assert eventually(lambda: rogue.endpoint.stats(to_victim).state is PeerState.FAILED)
    assert victim.endpoint.send(to_rogue, b"x") is SendStatus.PEER_FAILED


# ---- threads and lifetime ----------------------------------------------------------------


def test_a_handler_exception_goes_to_unraisablehook_and_delivery_goes_on(
    node, link, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))

    def explode(n: Node, m: Message) -> None:
        if m.payload == b"boom":
            raise RuntimeError("handler failed")

    b = node(also=explode)
    a = node()
    to_b, to_a = link(a, b)
    for payload in (b"one", b"boom", b"two"):
        assert a.endpoint.send(to_b, payload) is SendStatus.OK
    assert [m.payload for m in take(b.inbox, 3)] == [b"one", b"boom", b"two"]
    assert eventually(lambda: len(seen) == 1)
    assert isinstance(seen[0], RuntimeError)
    assert eventually(lambda: settled(a, to_b, b, to_a))  # boom's buffer came back too


def test_blocking_calls_release_the_gil_for_handlers(node, link) -> None:
    """wait_ready blocks this thread while the peer's handlers (which need the GIL) must run
    for the wait to end."""
    config = EndpointConfig(receive_window=2, send_queue_limit=1, reply_reserve=1)
    b = node(config, also=lambda n, m: time.sleep(0.01))
    a = node(config)
    to_b, _ = link(a, b)
    sent = 0
    while sent < 30:
        status = a.endpoint.send(to_b, b"%d" % sent)
        if status is SendStatus.TRY_AGAIN:
            assert a.endpoint.wait_ready(to_b, timeout_ms=SETUP_MS)
        else:
            assert status is SendStatus.OK
            sent += 1
    assert [m.payload for m in take(b.inbox, 30)] == [b"%d" % i for i in range(30)]


def test_calls_that_wait_for_the_handler_thread_refuse_in_a_handler(node, link) -> None:
    errors: queue.Queue[str] = queue.Queue()

    def try_waiting(n: Node, m: Message) -> None:
        for call in (lambda: n.endpoint.close(), lambda: n.endpoint.wait_ready(m.peer, 10),
                     lambda: n.endpoint.close_peer(m.peer, 10)):
            try:
                call()
                errors.put("no error")
            except ValueError as e:
                errors.put(str(e))

    b = node(also=try_waiting)
    a = node()
    to_b, to_a = link(a, b)
    assert a.endpoint.send(to_b, b"x") is SendStatus.OK
    got = take(errors, 3)
    assert all("cannot be called from a handler" in e for e in got), got
    assert not b.endpoint.closed and b.endpoint.stats(to_a).state is PeerState.CONNECTED
    assert a.endpoint.send(to_b, b"still fine") is SendStatus.OK
    assert [m.payload for m in take(b.inbox, 2)] == [b"x", b"still fine"]


def test_a_peer_that_closes_in_order_is_reported_closed_not_failed(node, link) -> None:
    a, b = node(), node()
    to_b, to_a = link(a, b)
    assert a.endpoint.send(to_b, b"last") is SendStatus.OK
    assert [m.payload for m in take(b.inbox, 1)] == [b"last"]
    a.endpoint.close_peer(to_b)
    peer, why = b.closes.get(timeout=SETUP_MS / 1000)
    assert peer == to_a and why
    assert b.endpoint.stats(to_a).state is PeerState.CLOSED
    assert b.failures.empty()
    assert b.endpoint.send(to_a, b"x") is SendStatus.UNKNOWN_PEER


def test_a_slow_python_handler_slows_its_sender_through_credits(node, link) -> None:
    """Python handlers run on a thread of their own; a message waiting for it keeps its
    buffer, so a handler slower than the sender runs the sender out of credit instead of
    piling messages up."""
    config = EndpointConfig(receive_window=4, send_queue_limit=2, reply_reserve=1)
    b = node(config, also=lambda n, m: time.sleep(0.05))
    a = node(config)
    to_b, to_a = link(a, b)
    accepted = 0
    while a.endpoint.send(to_b, b"%d" % accepted) is SendStatus.OK:
        accepted += 1
    assert accepted == (4 - 1) + 2  # credits beyond the reply reserve + the queue limit
    # The messages waiting for the Python thread are held: their buffers are not granted.
    assert eventually(lambda: b.endpoint.stats(to_a).held >= 1)
    assert [m.payload for m in take(b.inbox, accepted)] == [b"%d" % i for i in range(accepted)]
    assert eventually(lambda: b.endpoint.stats(to_a).held == 0)


def test_close_stops_handlers_and_the_peer_sees_it(node, link) -> None:
    a, b = node(), node()
    to_b, to_a = link(a, b)
    b.endpoint.close()
    assert b.endpoint.closed
    b.endpoint.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        b.endpoint.send(to_a, b"x")
    assert eventually(lambda: a.endpoint.stats(to_b).state is not PeerState.CONNECTED)
    assert a.endpoint.send(to_b, b"x") in (SendStatus.PEER_FAILED, SendStatus.UNKNOWN_PEER)
    with MessageEndpoint() as c:
        assert not c.closed
    assert c.closed


# ---- telemetry ---------------------------------------------------------------------------


def test_published_connections_show_in_backlog_stat(node, link, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    config = EndpointConfig(publish=True, run_dir=str(run_dir), send_queue_limit=5)
    stalled = node(also=lambda n, m: n.endpoint.hold(m))
    a = node(config)
    to_stalled, _ = link(a, stalled, "a", "node5")
    for i in range(30):
        a.endpoint.send(to_stalled, b"x")

    def published() -> dict[str, Any] | None:
        files = list(run_dir.glob("*.json"))
        if len(files) != 1:
            return None
        doc = json.loads(files[0].read_text())
        conns = doc["connections"]
        return conns[0] if conns and conns[0]["queued"] == 5 else None

    assert eventually(lambda: published() is not None)
    c = published()
    assert c is not None
    assert c["peer"] == "node5" and c["state"] == "connected" and c["scheme"] == "tcp"
    assert c["queue_limit"] == 5 and c["refused"] == 30 - 15 - 5
    assert c["credit"]["credits"] == 1  # the reply reserve

    tool = find_tool("backlog-stat")
    if tool is None:
        return  # the file is what the tool reads; the CLI tests cover the tool itself
    r = subprocess.run([str(tool), "--connections", "--json", "--run-dir", str(run_dir)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["connections"]
    assert row["peer"] == "node5" and row["queued"] == 5 and row["credit"]["credits"] == 1
    a.endpoint.close()
    assert list(run_dir.glob("*.json")) == []  # the file goes with the endpoint


def test_accepted_peers_publish_their_provider_scheme(node, link, tmp_path: Path) -> None:
    # The accepting side learns the scheme from the connection, not from a connect URI.
    run_dir = tmp_path / "run"
    acceptor = node(EndpointConfig(publish=True, run_dir=str(run_dir)))
    initiator = node()
    link(initiator, acceptor, "initiator", "acceptor")

    def published() -> dict[str, Any] | None:
        files = list(run_dir.glob("*.json"))
        if len(files) != 1:
            return None
        conns = json.loads(files[0].read_text())["connections"]
        return conns[0] if conns else None

    assert eventually(lambda: published() is not None)
    c = published()
    assert c is not None
    assert (c["peer"], c["state"], c["scheme"]) == ("initiator", "connected", "tcp")
