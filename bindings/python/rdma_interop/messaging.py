"""N:N messaging over RDMA Sends with end-to-end credits (``core/messaging/message_endpoint.h``).

One :class:`MessageEndpoint` talks to many peers, one connection each, over a provider. A
message goes only with a credit, that is onto a receive buffer the peer has posted for us,
so memory is bounded by configuration and a Send never finds no buffer (iWARP has no RNR
retry: that would be a fatal DDP "no buffer" Terminate). A peer that stops consuming runs
out of its own credits and fills only its own queue: :meth:`MessageEndpoint.send` to it says
``SendStatus.TRY_AGAIN`` while every other peer keeps going. Both sides announce their
credit numbers in the MPA private data, so a peer that does not speak credits is refused at
setup with a :class:`~rdma_interop.provider.ConnectError` that says so::

    provider = open_provider("tcp")
    policy = find_personality("siw").mpa
    got = queue.Queue()
    server = MessageEndpoint(on_message=lambda m: server.reply(m, b"pong:" + m.payload))
    client = MessageEndpoint(on_message=got.put)
    with provider.listen("tcp://127.0.0.1:0", policy) as listener:
        ...  # another thread: server.accept(listener.next_request(5000), "client")
        peer = client.connect(provider, listener.uri, policy, "server")
        assert client.send(peer, b"ping") is SendStatus.OK
        assert got.get(timeout=5).payload == b"pong:ping"

The endpoint processes messages and grants credits on the thread that read them (the
provider's); Python handlers run on a thread of their own, one at a time, in order:
``on_message(Message)``, ``on_ready(peer)`` (a peer that said TRY_AGAIN has room again),
``on_failure(peer, why)`` and ``on_close(peer, why)`` (the peer closed in order). They may
call :meth:`send`, :meth:`reply`, :meth:`hold` and :meth:`release`; an exception they raise
goes to ``sys.unraisablehook``. A message's payload is a copy (bytes); its receive buffer
goes back to the peer when the handler returns, unless the handler called :meth:`hold`:
then only after the later :meth:`reply` (or :meth:`release`). That is the receive hold-back
that makes a request/reply workload slow down to its slowest party instead of piling up
memory. Calls that wait (connect, accept, wait_ready, close_peer, close) release the GIL.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from rdma_interop import _core
from rdma_interop._core import CompletionBudgetCounters, CreditCounters, EndpointStats, PeerStats
from rdma_interop.messaging_enums import PeerState, SendStatus
from rdma_interop.provider import MpaPolicy, PendingConnection, Provider

__all__ = [
    "CompletionBudgetCounters",
    "CreditCounters",
    "EndpointConfig",
    "EndpointStats",
    "Message",
    "MessageEndpoint",
    "MessageId",
    "PeerId",
    "PeerState",
    "PeerStats",
    "SendStatus",
]

#: A peer of one endpoint; never reused by that endpoint.
PeerId = int
#: A received message, for :meth:`MessageEndpoint.reply`, ``hold`` and ``release``.
MessageId = int


# EndpointConfig stays the package's: publish and run_dir have no field in C++, whose config
# holds the telemetry publisher itself (a running object with a thread and files in run_dir).
# A value Python builds, compares and copies freely must not start one; _to_core makes it once,
# for the endpoint that is being created.
@dataclass(frozen=True)
class EndpointConfig:
    """An endpoint's numbers, the same for every peer. Memory per peer is
    ``(receive_window + control_receives + send_queue_depth) * (max_message + 4)`` octets;
    with ``publish`` the endpoint's connections appear in ``backlog-stat --connections``
    (``run_dir`` None: $RDMA_INTEROP_RUN_DIR or /run/rdma-interop)."""

    max_message: int = 4096  # largest payload, octets (the 4-octet credit header is extra)
    receive_window: int = 16  # data receives posted per peer (1..65535): the peer's credits
    control_receives: int = 2  # receives for standalone credit updates (1..255)
    send_queue_depth: int = 18  # sends posted per peer at once
    control_send_slots: int = 2  # of those, kept for credit updates (< send_queue_depth)
    send_queue_limit: int = 64  # messages waiting for a credit per peer; then TRY_AGAIN
    reply_reserve: int = 1  # credits toward a peer only replies may use (< receive_window)
    max_peers: int = 64
    publish: bool = False
    run_dir: str | None = None
    ignore_credits: bool = False  # test personality: send without credit, as a broken peer

    def _to_core(self) -> Any:
        core = _core.EndpointConfig()
        for name in ("max_message", "receive_window", "control_receives", "send_queue_depth",
                     "control_send_slots", "send_queue_limit", "reply_reserve", "max_peers",
                     "ignore_credits"):
            setattr(core, name, getattr(self, name))
        if self.publish:
            core.publish_to(self.run_dir or "")
        return core


@dataclass(frozen=True)
class Message:
    """A message from ``peer``; ``id`` names it for reply/hold/release."""

    peer: PeerId
    id: MessageId
    payload: bytes


# PeerStats and EndpointStats (with the counters in them) are the C++ value types themselves,
# bound once (bindings/messaging_bindings.cc); PeerState and SendStatus are
# rdma_interop.messaging_enums'.


MessageHandler = Callable[[Message], Any]
ReadyHandler = Callable[[PeerId], Any]
FailureHandler = Callable[[PeerId, str], Any]
CloseHandler = Callable[[PeerId, str], Any]


class MessageEndpoint:
    """An N:N message endpoint (see the module's documentation). Thread-safe. Close it (or
    use it as a context manager) to disconnect every peer and stop its handler thread; one
    still open at interpreter exit is closed then."""

    def __init__(
        self,
        config: EndpointConfig | None = None,
        *,
        on_message: MessageHandler | None = None,
        on_ready: ReadyHandler | None = None,
        on_failure: FailureHandler | None = None,
        on_close: CloseHandler | None = None,
    ) -> None:
        self.config = config or EndpointConfig()

        def message(peer: int, message_id: int, payload: bytes) -> None:
            assert on_message is not None
            on_message(Message(peer, message_id, payload))

        self._core = _core.MessageEndpoint(
            self.config._to_core(), None if on_message is None else message, on_ready,
            on_failure, on_close,
        )
        # At interpreter exit, before Python stops running handlers, not after.
        self._finalizer = weakref.finalize(self, self._core.close)

    def connect(
        self,
        provider: Provider,
        uri: str,
        policy: MpaPolicy,
        name: str,
        private_data: bytes = b"",
        timeout_ms: int = 15000,
        *,
        retries: int = 0,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 5000,
        retry_seed: int = 0,
    ) -> PeerId:
        """Connects to a listener whose side accepts with :meth:`accept`, exchanging credit
        parameters; ``private_data`` follows them (the peer finds it at offset 16 of the
        Request's private data). Retries as :meth:`Provider.connect` does. Raises
        ConnectError; kind ``"setup"`` with a detail saying so when the peer answers without
        credit parameters."""
        options = _core.ConnectOptions()
        options.policy = policy
        options.private_data = bytes(private_data)
        options.timeout_ms = timeout_ms
        options.retries = retries
        options.retry_backoff_ms = retry_backoff_ms
        options.retry_backoff_max_ms = retry_backoff_max_ms
        options.retry_seed = retry_seed
        return int(self._core.connect(provider._core, uri, options, name))

    def accept(self, pending: PendingConnection, name: str, private_data: bytes = b"") -> PeerId:
        """Accepts a Request that carries credit parameters. One without is rejected (the
        Reject's private data says why) and ConnectError (kind ``"setup"``) raised."""
        return int(self._core.accept(pending._core, name, bytes(private_data)))

    def send(self, peer: PeerId, payload: bytes) -> SendStatus:
        """Posts the message, or queues it until a credit comes; never waits. TRY_AGAIN when
        the peer's queue is full: nothing was taken, retry after :meth:`wait_ready` or
        ``on_ready``."""
        return SendStatus(self._core.send(peer, payload))

    def wait_ready(self, peer: PeerId, timeout_ms: int) -> bool:
        """Waits up to ``timeout_ms`` until :meth:`send` to ``peer`` would not say
        TRY_AGAIN. False on timeout or when the peer is gone."""
        return bool(self._core.wait_ready(peer, timeout_ms))

    def reply(self, message: Message | MessageId, payload: bytes) -> SendStatus:
        """Answers a received message (in its handler, or later after :meth:`hold`). The
        reply goes before queued requests and may use credits requests may not, so it never
        says TRY_AGAIN; the message's buffer goes back to the peer with it."""
        return SendStatus(self._core.reply(_id(message), payload))

    def hold(self, message: Message | MessageId) -> SendStatus:
        """Called in the handler: keep the message (and its buffer, so the peer's credit)
        after the handler returns, for a later :meth:`reply` or :meth:`release`."""
        return SendStatus(self._core.hold(_id(message)))

    def release(self, message: Message | MessageId) -> SendStatus:
        """Gives a held message's buffer back to the peer without replying."""
        return SendStatus(self._core.release(_id(message)))

    def close_peer(self, peer: PeerId, timeout_ms: int = 1000) -> None:
        """Ends one peer's connection (orderly close); its queued messages are counted lost."""
        self._core.close_peer(peer, timeout_ms)

    def peers(self) -> list[PeerId]:
        return [int(p) for p in self._core.peers()]

    def stats(self, peer: PeerId) -> PeerStats | None:
        """A snapshot of one peer; None for an unknown (or closed) peer."""
        return self._core.stats(peer)

    @property
    def endpoint_stats(self) -> EndpointStats:
        return self._core.endpoint_stats()

    @property
    def closed(self) -> bool:
        return bool(self._core.closed)

    def close(self) -> None:
        """Closes every peer and stops the handler thread; no handler runs after it
        returns. Idempotent. Must not be called from a handler."""
        self._finalizer()

    def __enter__(self) -> MessageEndpoint:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _id(message: Message | MessageId) -> int:
    return message.id if isinstance(message, Message) else int(message)
