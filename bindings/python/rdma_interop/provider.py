"""Queue pairs over a provider: listen, connect, accept, reject; register, post, poll.

The verbs-like API of ``core/transport/provider.h`` (rdma-core's ``rdma_cma.h`` plus
``verbs.h``, cut down to what interop testing needs). A provider is opened by URI scheme;
a passive side listens with an MPA policy and decides on each Request; an active side
connects with one. A connection is a queue pair with a completion queue of its own, or one
it shares with other connections (``QpCaps(cq=CompletionQueue(entries))``), as queue pairs
share an ibv_cq. Every call that waits (connect, next_request, accept, reject,
poll_completions, CompletionQueue.poll, disconnect, close) releases the GIL, so other
Python threads run meanwhile::

    provider = open_provider("tcp")
    siw = find_personality("siw")
    with provider.listen("tcp://127.0.0.1:0", siw.mpa) as listener:
        ...  # another thread: provider.connect(listener.uri, cxgb4.mpa)
        pending = listener.next_request(timeout_ms=5000)
        conn = pending.accept(siw.private_data)
        buf = bytearray(65536)
        mr = conn.register(buf, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        conn.post_recv(mr, 0, 4096, wr_id=1)
        [wc] = conn.poll_completions(timeout_ms=1000)

Registered memory is any writable buffer (bytearray, writable memoryview, mmap). The
provider writes into it from its event thread, as an RNIC does by DMA, so the connection
pins it: a registered bytearray cannot be resized nor an mmap closed until the region is
deregistered or the connection is gone. Work requests name memory as (region, offset,
length); bounds are checked here, rights by the provider. A peer names a region by its
STag and ``mr.tagged_offset`` (advertise ``(mr.stag, mr.tagged_offset + offset)``): 0 on the
tcp provider, so nothing advertised shows an address, the address itself on verbs or with
``Access.TAGGED_OFFSET_IS_ADDRESS``.

Setup failures raise :class:`ConnectError` (``.failure`` is the CmFailure name, e.g.
``"no_matching_rtr"``); a work request the queue pair cannot take raises
:class:`PostError`. Errors during data transfer are completions, as in verbs.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from rdma_interop import _core
from rdma_interop._core import (
    BacklogCounters,
    CompletionQueueCounters,
    ConnectionInfo,
    ListenOptions,
    MpaPolicy,
    NegotiatedParams,
    Personality,
    ReceiveCounters,
    WorkCompletion,
)
from rdma_interop.completion_enums import WcOpcode, WcStatus
from rdma_interop.errors import TerminateCause, TermLayer
from rdma_interop.policy_enums import (
    Crc,
    NoCommonRtr,
    OnMalformed,
    OnNewerRevision,
    Overflow,
    PeerToPeer,
    Refusal,
    Rtr,
    RtrCheck,
    RtrFromReply,
    RtrReply,
)
from rdma_interop.wire import MpaFrame, Terminate

__all__ = [
    "Access",
    "BACKLOG_FULL_MARKER",
    "BacklogCounters",
    "BacklogEvent",
    "CompletionQueue",
    "CompletionQueueCounters",
    "Connection",
    "ConnectionInfo",
    "ConnectionState",
    "ConnectError",
    "Crc",
    "FAILURE_NAMES",
    "InitialRecv",
    "Listener",
    "ListenOptions",
    "ListenerCounters",
    "Overflow",
    "MemoryRegion",
    "MpaPolicy",
    "NegotiatedParams",
    "NoCommonRtr",
    "OnMalformed",
    "OnNewerRevision",
    "PeerToPeer",
    "PendingConnection",
    "Personality",
    "PostError",
    "Provider",
    "QpCaps",
    "ReceiveCounters",
    "Refusal",
    "Rtr",
    "RtrCheck",
    "RtrFromReply",
    "RtrReply",
    "WcOpcode",
    "WcStatus",
    "WorkCompletion",
    "WrOpcode",
    "find_personality",
    "list_personalities",
    "open_provider",
]

#: Anything with the writable buffer protocol: bytearray, writable memoryview, mmap
#: (typing has no name for "writable buffer" before Python 3.12's collections.abc.Buffer).
WritableBuffer = Any

#: Every ConnectError.failure name, in the C++ declaration order (core/cm/cm_failure.h).
FAILURE_NAMES: tuple[str, ...] = tuple(_core.failure_names())

#: The private data of the Reject a listener sends when its backlog is full (policy
#: ``Overflow.REJECT``); our initiators report it as failure ``"backlog_full"``.
BACKLOG_FULL_MARKER: bytes = _core.BACKLOG_FULL_MARKER


# ---- errors -------------------------------------------------------------------------------


class ConnectError(Exception):
    """A listen, connect or accept did not succeed.

    Attributes:
        kind: ``"setup"`` (MPA setup failed: see ``failure``), ``"unreachable"`` (TCP
            refused, or no answer to the SYN in time), ``"address_in_use"``,
            ``"invalid_argument"`` or ``"timeout"`` (the TCP connection was made but MPA
            setup did not finish before the deadline).
        failure: the CmFailure name when kind is ``"setup"``, e.g. ``"peer_rejected"``,
            ``"no_matching_rtr"``; otherwise None.
        detail: one sentence for a human.
        terminate: the Terminate cause sent or received during setup, or None.
        peer_frame: the peer's MPA Reply when it sent one (e.g. with the Reject flag).
        peer_private_data: that Reply's private data, or None without a Reply.
        attempts: for connect, the attempts made (1 + the retries used); 0 otherwise.

    A listener over its backlog (overflow policy REJECT) makes a connect fail with failure
    ``"backlog_full"`` (the Reject carries BACKLOG_FULL_MARKER), never ``"peer_rejected"``.
    """

    kind: str
    failure: str | None
    detail: str
    terminate: TerminateCause | None
    peer_frame: MpaFrame | None
    peer_private_data: bytes | None
    attempts: int

    def __init__(
        self,
        message: str,
        kind: str,
        failure: str | None = None,
        detail: str = "",
        terminate: tuple[int, int, int] | None = None,
        peer_frame: MpaFrame | None = None,
        attempts: int = 0,
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.kind = kind
        self.failure = failure
        self.detail = detail
        self.terminate = _cause(terminate)
        self.peer_frame = peer_frame
        self.peer_private_data = None if peer_frame is None else peer_frame.private_data

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles whole (e.g. across a process pool), not just the message.
        args = (
            str(self), self.kind, self.failure, self.detail, self.terminate, self.peer_frame,
            self.attempts,
        )
        return (type(self), args)


class PostError(Exception):
    """The queue pair did not take a work request.

    ``name`` is ``"queue_full"`` (max_send_wr / max_recv_wr reached; ENOMEM in verbs),
    ``"invalid_request"`` (EINVAL: e.g. an unknown lkey) or ``"not_connected"`` (the
    queue pair is in error or closed).
    """

    name: str

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name,))


def _cause(cause: tuple[int, int, int] | None) -> TerminateCause | None:
    if cause is None:
        return None
    layer, etype, code = cause
    return TerminateCause(TermLayer(layer), etype, code)


# ---- MPA policy and personalities (core/cm/mpa_policy.h, personality.h) --------------------
# MpaPolicy, Personality, NegotiatedParams, ListenOptions, ConnectionInfo (what setup settled
# on), WorkCompletion and the counters are the C++ value types themselves, bound once
# (bindings/value_class.h: keyword constructor, ==, repr, replace()); their enums are
# rdma_interop.policy_enums' (whose values are the file's names) and
# rdma_interop.completion_enums'.


def find_personality(name_or_path: str, dirs: Sequence[str] | None = None) -> Personality:
    """A personality by name (NAME.json, first of ``dirs`` that has it) or by path (contains
    a '/' or ends in .json). ``dirs`` defaults to $RDMA_INTEROP_PERSONALITY_DIR, the
    installed share directory, then the source tree. Raises ValueError naming what is wrong
    (for a missing name: the known names and the directories searched)."""
    return _core.find_personality(name_or_path, None if dirs is None else list(dirs))


def list_personalities(dirs: Sequence[str] | None = None) -> list[Personality]:
    """Every personality in ``dirs`` (default as for find_personality), sorted by name;
    files that fail to load are left out."""
    found, _problems = _core.list_personalities(None if dirs is None else list(dirs))
    return list(found)


# ---- work requests and completions (core/rdmap/work_request.h) -------------------------------


class Access(enum.IntFlag):
    """Rights a region grants (ibv_access_flags). Local read is always granted.

    TAGGED_OFFSET_IS_ADDRESS is no right: the region's tagged offsets are its addresses (the
    verbs convention) instead of starting at 0 (core/rdmap/memory_registry.h)."""

    LOCAL_WRITE = _core.ACCESS_LOCAL_WRITE
    REMOTE_WRITE = _core.ACCESS_REMOTE_WRITE
    REMOTE_READ = _core.ACCESS_REMOTE_READ
    TAGGED_OFFSET_IS_ADDRESS = _core.ACCESS_TAGGED_OFFSET_IS_ADDRESS


class WrOpcode(enum.Enum):
    """What a send-queue work request does (ibv_wr_opcode)."""

    SEND = "send"
    SEND_WITH_INVALIDATE = "send_with_invalidate"
    SEND_WITH_SOLICITED_EVENT = "send_with_solicited_event"
    SEND_WITH_SOLICITED_EVENT_AND_INVALIDATE = "send_with_solicited_event_and_invalidate"
    RDMA_WRITE = "rdma_write"
    RDMA_READ = "rdma_read"


@dataclass(frozen=True)
class InitialRecv:
    """A receive posted before the connection carries data (as a verbs user posts receives
    before rdma_connect/rdma_accept): the whole of ``buffer``, which the connection pins."""

    buffer: WritableBuffer
    wr_id: int = 0


class CompletionQueue:
    """A completion queue that several connections may share (``QpCaps(cq=...)``), as
    queue pairs share an ibv_cq: every connection on it completes into it, and polling it, or
    any of those connections, returns all of their completions (tell them apart by wr_id).

    ``entries`` is its size (0: unbounded). A completion that finds it full is lost and
    counted, and :attr:`overrun` stays True: size it for every work request that can be
    outstanding on its connections.
    """

    def __init__(self, entries: int = 0) -> None:
        self._core = _core.CompletionQueue(entries)

    @property
    def entries(self) -> int:
        return int(self._core.entries)

    def poll(self, max: int = 16, timeout_ms: int = 0) -> list[WorkCompletion]:
        """Waits up to ``timeout_ms`` for at least one completion (GIL released), then
        returns what is there, up to ``max``, oldest first. Empty on timeout or :meth:`wake`."""
        return list(self._core.poll(max, timeout_ms))

    def wake(self) -> None:
        """Makes every waiting :meth:`poll` (and ``poll_completions``) return at once."""
        self._core.wake()

    @property
    def overrun(self) -> bool:
        """True from the first completion lost to a full queue on."""
        return bool(self._core.overrun)

    @property
    def counters(self) -> CompletionQueueCounters:
        """A consistent snapshot of the queue's figures."""
        return self._core.counters

    def __repr__(self) -> str:
        return f"CompletionQueue(entries={self.entries})"


# QpCaps and InitialRecv stay the package's: what they hold is Python's. An initial receive is
# a Python buffer the connection must pin for its whole life (bindings/provider_bindings.cc
# holds a Py_buffer per connection), not the raw address and length transport::QpCaps carries,
# and cq is the package's CompletionQueue. _to_core hands the binding the sizes and the
# buffers separately, so it pins them with the connection it creates.
@dataclass(frozen=True)
class QpCaps:
    """Queue pair sizes, the receives to post before the first FPDU is processed, and the
    completion queue to complete into (None: one of the connection's own, unbounded)."""

    max_send_wr: int = 256
    max_recv_wr: int = 256
    max_ulpdu: int = 65000
    initial_recvs: tuple[InitialRecv, ...] = field(default=())
    cq: CompletionQueue | None = None

    def _to_core(self) -> tuple[Any, list[tuple[int, Any]]]:
        core = _core.QpCaps()
        core.max_send_wr = self.max_send_wr
        core.max_recv_wr = self.max_recv_wr
        core.max_ulpdu = self.max_ulpdu
        core.cq = None if self.cq is None else self.cq._core
        return core, [(r.wr_id, r.buffer) for r in self.initial_recvs]


class ConnectionState(enum.Enum):
    CONNECTED = "connected"
    ERROR = "error"  # a Terminate was sent or received, or the connection was reset
    CLOSED = "closed"


# ---- the objects -----------------------------------------------------------------------


class MemoryRegion:
    """Registered memory: the STag (lkey == rkey) of a buffer on one connection.

    Keeps the buffer and the connection alive. ``addr`` is the address of octet 0, which
    local work requests use; ``tagged_offset`` is what a peer names octet 0 by: advertise
    ``(mr.stag, mr.tagged_offset + offset)`` for remote access. The tcp provider starts
    every region at tagged offset 0, so no address leaves the process, unless registered
    with ``Access.TAGGED_OFFSET_IS_ADDRESS`` (the verbs convention, tagged offset = addr,
    which the verbs provider always uses).
    """

    def __init__(self, connection: Connection, buffer: WritableBuffer, access: Access) -> None:
        view = memoryview(buffer)  # holds an export: the buffer cannot move or shrink
        if view.readonly:
            raise TypeError("register needs a writable buffer (bytearray, memoryview, mmap)")
        self.buffer: memoryview = view.cast("B") if view.format != "B" or view.ndim != 1 else view
        self.connection = connection
        self.access = Access(access)
        self.stag: int = connection._core.register_memory(self.buffer, int(access))
        self.addr: int = _core.buffer_address(self.buffer)
        offset = connection._core.tagged_offset(self.stag, self.addr)
        if offset is None:
            raise RuntimeError(f"the provider does not know the STag {self.stag:#x} it just returned")
        self.tagged_offset: int = offset

    @property
    def length(self) -> int:
        return self.buffer.nbytes

    def sge(self, offset: int = 0, length: int | None = None) -> Any:
        """The scatter/gather element for ``[offset, offset + length)``; ValueError when
        that is not inside the region."""
        if length is None:
            length = self.length - offset
        if offset < 0 or length < 0 or offset + length > self.length:
            raise ValueError(f"[{offset}, {offset + length}) is outside the {self.length}-octet region")
        return _core.Sge(self.addr + offset, length, self.stag)

    def deregister(self) -> None:
        self.connection.deregister(self)

    def __repr__(self) -> str:
        return (f"MemoryRegion(stag={self.stag:#x}, addr={self.addr:#x}, "
                f"tagged_offset={self.tagged_offset:#x}, length={self.length}, access={self.access!r})")


class Connection:
    """A connected queue pair, completing into its own completion queue or a shared one."""

    def __init__(self, core: Any) -> None:
        self._core = core

    @property
    def info(self) -> ConnectionInfo:
        return self._core.info

    @property
    def negotiated(self) -> NegotiatedParams:
        return self.info.params

    def register(self, buffer: WritableBuffer, access: Access = Access.LOCAL_WRITE) -> MemoryRegion:
        """Registers a writable buffer for the given rights; the connection pins it until
        :meth:`deregister` or the connection is destroyed."""
        return MemoryRegion(self, buffer, access)

    def deregister(self, region: MemoryRegion) -> bool:
        """Stops local and remote access to the region and unpins it; False if unknown."""
        return bool(self._core.deregister_memory(region.stag))

    def post_send(
        self,
        opcode: WrOpcode,
        region: MemoryRegion | None = None,
        offset: int = 0,
        length: int | None = None,
        *,
        wr_id: int = 0,
        remote_stag: int = 0,
        remote_addr: int = 0,
        invalidate_stag: int = 0,
        signaled: bool = True,
    ) -> None:
        """Queues a Send (from the region), RDMA Write (region to the peer's
        ``(remote_stag, remote_addr)``) or RDMA Read (the peer's into the region);
        ``remote_addr`` is a tagged offset the peer advertised (its
        ``MemoryRegion.tagged_offset`` plus an offset), not necessarily an address.
        No region means zero length. Raises ValueError out of bounds, PostError when
        the queue pair does not take it."""
        wr = _core.SendWr()
        wr.wr_id = wr_id
        wr.opcode = getattr(_core.WrOpcode, WrOpcode(opcode).name)
        if region is not None:
            wr.sge = region.sge(offset, length)
        elif length:
            raise ValueError("a work request with data needs a region")
        wr.remote_stag = remote_stag
        wr.remote_addr = remote_addr
        wr.invalidate_stag = invalidate_stag
        wr.signaled = signaled
        self._core.post_send(wr)

    def post_recv(
        self, region: MemoryRegion, offset: int = 0, length: int | None = None, *, wr_id: int = 0
    ) -> None:
        """Queues ``[offset, offset + length)`` of the region for one incoming Send.
        Raises ValueError out of bounds, PostError when the queue pair does not take it."""
        wr = _core.RecvWr()
        wr.wr_id = wr_id
        wr.sge = region.sge(offset, length)
        self._core.post_recv(wr)

    def poll_completions(self, max: int = 16, timeout_ms: int = 0) -> list[WorkCompletion]:
        """Waits up to ``timeout_ms`` for at least one completion (GIL released), then
        returns what is there, up to ``max``. Empty on timeout. With a shared completion
        queue (``QpCaps.cq``) these include other connections' completions."""
        return list(self._core.poll_completions(max, timeout_ms))

    @property
    def state(self) -> ConnectionState:
        return ConnectionState(self._core.state.name.lower())

    @property
    def error_detail(self) -> str:
        """Why the connection left CONNECTED (Terminate received or sent, reset, closed)."""
        return str(self._core.error_detail)

    @property
    def terminate_received(self) -> Terminate | None:
        return self._core.terminate_received

    @property
    def terminate_sent(self) -> Terminate | None:
        return self._core.terminate_sent

    @property
    def receive_counters(self) -> ReceiveCounters:
        """Reads, octets read, and of them those read straight into the registered memory
        an RDMA Write named (direct data placement; zero on verbs, whose device places)."""
        return self._core.receive_counters

    def disconnect(self, timeout_ms: int = 1000) -> None:
        """Orderly close: outstanding FPDUs go out, then TCP FIN. Waits up to timeout_ms."""
        self._core.disconnect(timeout_ms)

    def terminate(self, cause: TerminateCause | tuple[int, int, int]) -> None:
        """Ends the connection at once for an error the application found, e.g. a peer
        that sent beyond its credits: ``TerminateCause(TermLayer.DDP, 2, 2)``, DDP untagged
        buffer error "no buffer" (RFC 5041 s7.2). A Terminate carrying ``cause`` goes out,
        everything outstanding completes flushed, :attr:`state` becomes ERROR and
        :attr:`terminate_sent` shows it; the peer's :attr:`terminate_received` shows the
        cause. Does not wait; no effect once the connection left CONNECTED. The verbs
        provider cannot send a Terminate from user space: it disconnects and moves the queue
        pair to error instead, and :attr:`error_detail` says so. ValueError for a layer or
        error type the Terminate cannot carry."""
        layer, etype, code = cause
        self._core.terminate(int(layer), etype, code)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


class PendingConnection:
    """A valid MPA Request waiting for the application's decision (responder side)."""

    def __init__(self, core: Any) -> None:
        self._core = core

    @property
    def request(self) -> MpaFrame:
        return self._core.request

    @property
    def peer_address(self) -> str:
        return str(self._core.peer_address)

    def accept(self, private_data: bytes = b"", caps: QpCaps | None = None) -> Connection:
        """Sends the Reply and returns once the connection is established (in peer-to-peer
        mode: once the RTR arrived). Raises ConnectError when the listener's policy cannot
        meet the Request or the RTR does not come."""
        core_caps, recvs = (caps or QpCaps())._to_core()
        return Connection(self._core.accept(bytes(private_data), core_caps, recvs))

    def reject(self, private_data: bytes = b"") -> None:
        """Answers with the Reject flag set (the peer's connect fails with "peer_rejected"
        and this private data) and closes."""
        self._core.reject(bytes(private_data))


#: The old name: a listener's counters are its backlog's.
ListenerCounters = BacklogCounters


@dataclass(frozen=True)
class BacklogEvent:
    """A backlog slot taken (``"backlog_added"``: reason ``"request"`` or ``"waited"``) or
    freed (``"backlog_removed"``: ``"accepted"``, ``"rejected"``, ``"expired"``,
    ``"aborted"``); ``pending`` is the slots held right after it."""

    type: str
    reason: str
    peer_address: str
    pending: int


class Listener:
    """A passive endpoint with its MPA policy."""

    def __init__(self, core: Any) -> None:
        self._core = core

    @property
    def local_address(self) -> str:
        """"127.0.0.1:40122", with the real port when port 0 was asked for."""
        return str(self._core.local_address)

    @property
    def uri(self) -> str:
        """``tcp://`` + local_address: what a peer connects to."""
        return f"tcp://{self.local_address}"

    def next_request(self, timeout_ms: int) -> PendingConnection | None:
        """Waits up to ``timeout_ms`` for the next valid MPA Request (GIL released); None on
        timeout. Setup failures before a Request are counted, not returned."""
        core = self._core.next_request(timeout_ms)
        return None if core is None else PendingConnection(core)

    @property
    def counters(self) -> BacklogCounters:
        """A consistent snapshot of the backlog's counters."""
        return self._core.counters

    def take_backlog_events(self) -> list[BacklogEvent]:
        """backlog_added / backlog_removed since the last call, oldest first (at most 4096
        are kept between calls)."""
        return [BacklogEvent(*e) for e in self._core.take_backlog_events()]

    def take_setup_failures(self) -> list[tuple[str, ConnectError, float]]:
        """Connections that failed before their Request reached us (timeouts, malformed
        frames, resets), oldest first, each reported once: (peer address, error, ms)."""
        return [(peer, error, float(ms)) for peer, error, ms in self._core.take_setup_failures()]

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> Listener:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Provider:
    """One transport (``tcp`` today). Thread-safe: many listeners and connections at once."""

    def __init__(self, core: Any) -> None:
        self._core = core

    @property
    def scheme(self) -> str:
        return str(self._core.scheme)

    def listen(
        self, uri: str, policy: MpaPolicy, backlog: int = 16, options: ListenOptions | None = None
    ) -> Listener:
        """Listens on ``tcp://ADDR:PORT`` (port 0: any free port). ``options`` sets the
        backlog policy (its own ``backlog`` wins over the argument). Raises ValueError for a
        malformed URI, ConnectError (kind "address_in_use"...) when listening fails."""
        if options is None:
            return Listener(self._core.listen(uri, policy, backlog))
        return Listener(self._core.listen(uri, policy, options))

    def connect(
        self,
        uri: str,
        policy: MpaPolicy,
        private_data: bytes = b"",
        caps: QpCaps | None = None,
        timeout_ms: int = 15000,
        *,
        retries: int = 0,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 5000,
        retry_seed: int = 0,
    ) -> Connection:
        """TCP connect plus MPA setup (and one revision-1 retry when the policy allows it),
        within ``timeout_ms`` per attempt (GIL released). Raises ConnectError.

        Up to ``retries`` more attempts follow a failure the listener may take later
        (``"backlog_full"``, TCP refused or reset, no Reply in time), each after a random
        sleep in [0, min(retry_backoff_max_ms, retry_backoff_ms * 2**(n-1))] (full jitter;
        ``retry_seed`` makes it reproducible). ConnectError.attempts says how many ran."""
        options = _core.ConnectOptions()
        options.policy = policy
        options.private_data = bytes(private_data)
        core_caps, recvs = (caps or QpCaps())._to_core()
        options.caps = core_caps
        options.timeout_ms = timeout_ms
        options.retries = retries
        options.retry_backoff_ms = retry_backoff_ms
        options.retry_backoff_max_ms = retry_backoff_max_ms
        options.retry_seed = retry_seed
        return Connection(self._core.connect(uri, options, recvs))


def open_provider(scheme: str = "tcp") -> Provider:
    """The provider for a URI scheme; ValueError names the schemes this build has."""
    return Provider(_core.open_provider(scheme))
