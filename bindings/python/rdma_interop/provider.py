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
from rdma_interop._core import BacklogCounters, CompletionQueueCounters
from rdma_interop.errors import TerminateCause, TermLayer
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
        peer_frame: Any = None,
        attempts: int = 0,
    ) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.kind = kind
        self.failure = failure
        self.detail = detail
        self.terminate = _cause(terminate)
        if peer_frame is not None and not isinstance(peer_frame, MpaFrame):
            peer_frame = MpaFrame._from_core(peer_frame)
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


class Crc(str, enum.Enum):
    """Whether a side asks for MPA CRC (RFC 5044 s7.1: either side asking means CRC)."""

    WANT = "want"
    OPTIONAL = "optional"  # does not ask, goes along when the peer asks
    REFUSE = "refuse"  # does not ask, and fails the connection if the peer asks


class PeerToPeer(str, enum.Enum):
    """RFC 6581 peer-to-peer mode: an initiator asks in ON and REQUIRED; a responder accepts
    in ON, WHEN_ASKED and REQUIRED and declines in OFF. REQUIRED (irdma) also refuses a
    revision-2 Request or Reply without the peer-to-peer flag."""

    OFF = "off"
    WHEN_ASKED = "when-asked"
    ON = "on"
    REQUIRED = "required"


class OnNewerRevision(str, enum.Enum):
    """What a responder does with a Request of a revision it does not speak."""

    REPLY = "reply"  # RFC 5044 s7.1: answer with its own, lower revision
    RESET = "reset"  # abort the TCP connection (old firmware, iw_cxgb4, irdma)
    CLOSE = "close"  # close it without a Reply (siw above revision 2, erdma)


class Refusal(str, enum.Enum):
    """How a side refuses what its policy cannot take (``refuse_with``)."""

    REJECT = "reject"  # MPA Reject, or the RFC 6581 Terminate codes 0x06/0x07
    RESET = "reset"  # a TCP reset and nothing else (irdma)


class OnMalformed(str, enum.Enum):
    """What a side does with a frame that does not decode."""

    RESET = "reset"
    CLOSE = "close"


class RtrReply(str, enum.Enum):
    """What a responder's Reply names once it has picked an RTR type."""

    CHOSEN = "chosen"  # RFC 6581 s3: the type it picked
    OWN = "own"  # iw_cxgb4: its own single type, whatever it picked
    ALL_COMMON = "all-common"  # qed: every type both offer


class NoCommonRtr(str, enum.Enum):
    """What a responder does when the Request offers no RTR type it takes."""

    REFUSE = "refuse"  # RFC 6581 s3: MPA code 0x07
    PROPOSE = "propose"  # siw: names its first preference anyway
    OFFER_ALL = "offer-all"  # qed: names every type it takes
    DECLINE = "decline"  # iw_cxgb4: answers without peer-to-peer


class RtrCheck(str, enum.Enum):
    """What a responder takes as the RTR."""

    AGREED = "agreed"  # exactly the agreed type
    ANY = "any"  # any zero-length Send, Write or Read Request (siw)


class RtrFromReply(str, enum.Enum):
    """How an initiator reads the RTR types a Reply names."""

    EXACT = "exact"  # RFC 6581 s3: exactly one, of those it offered
    PREFERENCE = "preference"  # the first of its own preference among several (irdma, siw)


class Rtr(str, enum.Enum):
    """RFC 6581 s3: the zero-length operation an initiator sends as its ready-to-receive."""

    SEND = "send"
    WRITE = "write"
    READ = "read"


_CRC = {Crc.WANT: _core.CrcMode.WANT, Crc.OPTIONAL: _core.CrcMode.OPTIONAL, Crc.REFUSE: _core.CrcMode.REFUSE}
_P2P = {
    PeerToPeer.OFF: _core.PeerToPeer.OFF,
    PeerToPeer.WHEN_ASKED: _core.PeerToPeer.WHEN_ASKED,
    PeerToPeer.ON: _core.PeerToPeer.ON,
    PeerToPeer.REQUIRED: _core.PeerToPeer.REQUIRED,
}
_NEWER = {
    OnNewerRevision.REPLY: _core.OnNewerRevision.REPLY_OWN_REVISION,
    OnNewerRevision.RESET: _core.OnNewerRevision.RESET,
    OnNewerRevision.CLOSE: _core.OnNewerRevision.CLOSE,
}
_REFUSAL = {Refusal.REJECT: _core.Refusal.REJECT, Refusal.RESET: _core.Refusal.RESET}
_MALFORMED = {OnMalformed.RESET: _core.OnMalformed.RESET, OnMalformed.CLOSE: _core.OnMalformed.CLOSE}
_RTR_REPLY = {
    RtrReply.CHOSEN: _core.RtrReply.CHOSEN,
    RtrReply.OWN: _core.RtrReply.OWN,
    RtrReply.ALL_COMMON: _core.RtrReply.ALL_COMMON,
}
_NO_COMMON = {
    NoCommonRtr.REFUSE: _core.NoCommonRtr.REFUSE,
    NoCommonRtr.PROPOSE: _core.NoCommonRtr.PROPOSE,
    NoCommonRtr.OFFER_ALL: _core.NoCommonRtr.OFFER_ALL,
    NoCommonRtr.DECLINE: _core.NoCommonRtr.DECLINE,
}
_RTR_CHECK = {RtrCheck.AGREED: _core.RtrCheck.AGREED, RtrCheck.ANY: _core.RtrCheck.ANY}
_FROM_REPLY = {
    RtrFromReply.EXACT: _core.RtrFromReply.EXACT,
    RtrFromReply.PREFERENCE: _core.RtrFromReply.PREFERENCE,
}
_RTR = {Rtr.SEND: _core.RtrType.SEND, Rtr.WRITE: _core.RtrType.WRITE, Rtr.READ: _core.RtrType.READ}


_CRC_BACK = {int(v): k for k, v in _CRC.items()}
_P2P_BACK = {int(v): k for k, v in _P2P.items()}
_NEWER_BACK = {int(v): k for k, v in _NEWER.items()}
_RTR_BACK = {int(v): k for k, v in _RTR.items()}
_REFUSAL_BACK = {int(v): k for k, v in _REFUSAL.items()}
_MALFORMED_BACK = {int(v): k for k, v in _MALFORMED.items()}
_RTR_REPLY_BACK = {int(v): k for k, v in _RTR_REPLY.items()}
_NO_COMMON_BACK = {int(v): k for k, v in _NO_COMMON.items()}
_RTR_CHECK_BACK = {int(v): k for k, v in _RTR_CHECK.items()}
_FROM_REPLY_BACK = {int(v): k for k, v in _FROM_REPLY.items()}


def _rtr_set(rtrs: frozenset[Rtr]) -> Any:
    core = _core.RtrSet()
    core.send = Rtr.SEND in rtrs
    core.write = Rtr.WRITE in rtrs
    core.read = Rtr.READ in rtrs
    return core


def _rtrs(core: Any) -> frozenset[Rtr]:
    return frozenset(
        t for t, on in ((Rtr.SEND, core.send), (Rtr.WRITE, core.write), (Rtr.READ, core.read)) if on
    )


@dataclass(frozen=True)
class MpaPolicy:
    """What one side of an MPA connection offers, accepts and insists on.

    The fields and defaults are ``cm::MpaPolicy``'s and a personality file's ``"mpa"``
    keys (core/cm/mpa_policy.h says what each means and which kernel source it models).
    ``rtr_offer``: the RTR types an initiator offers and a responder accepts unless
    ``rtr_accepted`` says otherwise; ``rtr_preference``: the order of choice. ``ird``/``ord``
    are 14-bit RDMA Read depths (RFC 6581 s3); ``strict_ird_ord`` fails an ORD above the
    peer's IRD. ``revision`` is 1, 2 or 129 (erdma's own).
    """

    revision: int = 2
    crc: Crc = Crc.WANT
    markers_wanted: bool = False
    markers_supported: bool = False
    peer_to_peer: PeerToPeer = PeerToPeer.WHEN_ASKED
    rtr_offer: frozenset[Rtr] = frozenset({Rtr.SEND, Rtr.WRITE, Rtr.READ})
    rtr_accepted: frozenset[Rtr] | None = None
    rtr_preference: tuple[Rtr, ...] = ()
    rtr_reply: RtrReply = RtrReply.CHOSEN
    no_common_rtr: NoCommonRtr = NoCommonRtr.REFUSE
    rtr_check: RtrCheck = RtrCheck.AGREED
    rtr_from_reply: RtrFromReply = RtrFromReply.EXACT
    rtr_in_revision1: bool = False
    read_rtr_sink_stag: int = 0
    read_rtr_source_stag: int = 0
    refuse_zero_stag_read_rtr: bool = False
    ird: int = 16
    ord: int = 16
    strict_ird_ord: bool = False
    private_data_limit: int = 512
    reject_reserved_bits: bool = False
    fallback_to_revision1: bool = False
    on_newer_revision: OnNewerRevision = OnNewerRevision.REPLY
    refuse_with: Refusal = Refusal.REJECT
    on_malformed_frame: OnMalformed = OnMalformed.RESET
    echo_reserved_bits: bool = False
    extension_bits: int = 0
    ird_ord_sentinel: bool = False
    send_rtr: bool = True
    request_timeout_ms: int = 5000
    reply_timeout_ms: int = 10000
    rtr_timeout_ms: int = 5000
    #: Initiator: wait this long after the Reply before the first FPDU (see mpa_policy.h:
    #: kernel siw ignores an FPDU landing while it hands its socket to the QP).
    first_fpdu_delay_ms: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "crc", Crc(self.crc))
        object.__setattr__(self, "peer_to_peer", PeerToPeer(self.peer_to_peer))
        object.__setattr__(self, "on_newer_revision", OnNewerRevision(self.on_newer_revision))
        object.__setattr__(self, "rtr_offer", frozenset(Rtr(t) for t in self.rtr_offer))
        if self.rtr_accepted is not None:
            object.__setattr__(self, "rtr_accepted", frozenset(Rtr(t) for t in self.rtr_accepted))
        object.__setattr__(self, "rtr_preference", tuple(Rtr(t) for t in self.rtr_preference))
        object.__setattr__(self, "rtr_reply", RtrReply(self.rtr_reply))
        object.__setattr__(self, "no_common_rtr", NoCommonRtr(self.no_common_rtr))
        object.__setattr__(self, "rtr_check", RtrCheck(self.rtr_check))
        object.__setattr__(self, "rtr_from_reply", RtrFromReply(self.rtr_from_reply))
        object.__setattr__(self, "refuse_with", Refusal(self.refuse_with))
        object.__setattr__(self, "on_malformed_frame", OnMalformed(self.on_malformed_frame))

    @classmethod
    def from_personality(cls, name_or_path: str, dirs: Sequence[str] | None = None) -> MpaPolicy:
        """The policy of a personality (see :func:`find_personality`)."""
        return find_personality(name_or_path, dirs).mpa

    def problems(self) -> list[str]:
        """Contradictions in the fields (``cm::validate``), one sentence each; empty when usable."""
        return list(_core.validate_policy(self._to_core()))

    def __str__(self) -> str:
        return repr(self._to_core())

    def _to_core(self) -> Any:
        core = _core.MpaPolicy()
        core.revision = self.revision
        core.crc = _CRC[self.crc]
        core.markers_wanted = self.markers_wanted
        core.markers_supported = self.markers_supported
        core.peer_to_peer = _P2P[self.peer_to_peer]
        core.rtr_offer = _rtr_set(self.rtr_offer)
        core.rtr_accepted = None if self.rtr_accepted is None else _rtr_set(self.rtr_accepted)
        core.rtr_preference = [_RTR[t] for t in self.rtr_preference]
        core.rtr_reply = _RTR_REPLY[self.rtr_reply]
        core.no_common_rtr = _NO_COMMON[self.no_common_rtr]
        core.rtr_check = _RTR_CHECK[self.rtr_check]
        core.rtr_from_reply = _FROM_REPLY[self.rtr_from_reply]
        core.rtr_in_revision1 = self.rtr_in_revision1
        core.read_rtr_sink_stag = self.read_rtr_sink_stag
        core.read_rtr_source_stag = self.read_rtr_source_stag
        core.refuse_zero_stag_read_rtr = self.refuse_zero_stag_read_rtr
        core.ird = self.ird
        core.ord = self.ord
        core.strict_ird_ord = self.strict_ird_ord
        core.private_data_limit = self.private_data_limit
        core.reject_reserved_bits = self.reject_reserved_bits
        core.fallback_to_revision1 = self.fallback_to_revision1
        core.on_newer_revision = _NEWER[self.on_newer_revision]
        core.refuse_with = _REFUSAL[self.refuse_with]
        core.on_malformed_frame = _MALFORMED[self.on_malformed_frame]
        core.echo_reserved_bits = self.echo_reserved_bits
        core.extension_bits = self.extension_bits
        core.ird_ord_sentinel = self.ird_ord_sentinel
        core.send_rtr = self.send_rtr
        core.request_timeout_ms = self.request_timeout_ms
        core.reply_timeout_ms = self.reply_timeout_ms
        core.rtr_timeout_ms = self.rtr_timeout_ms
        core.first_fpdu_delay_ms = self.first_fpdu_delay_ms
        return core

    @classmethod
    def _from_core(cls, core: Any) -> MpaPolicy:
        return cls(
            revision=core.revision,
            crc=_CRC_BACK[int(core.crc)],
            markers_wanted=core.markers_wanted,
            markers_supported=core.markers_supported,
            peer_to_peer=_P2P_BACK[int(core.peer_to_peer)],
            rtr_offer=_rtrs(core.rtr_offer),
            rtr_accepted=None if core.rtr_accepted is None else _rtrs(core.rtr_accepted),
            rtr_preference=tuple(_RTR_BACK[int(t)] for t in core.rtr_preference),
            rtr_reply=_RTR_REPLY_BACK[int(core.rtr_reply)],
            no_common_rtr=_NO_COMMON_BACK[int(core.no_common_rtr)],
            rtr_check=_RTR_CHECK_BACK[int(core.rtr_check)],
            rtr_from_reply=_FROM_REPLY_BACK[int(core.rtr_from_reply)],
            rtr_in_revision1=core.rtr_in_revision1,
            read_rtr_sink_stag=core.read_rtr_sink_stag,
            read_rtr_source_stag=core.read_rtr_source_stag,
            refuse_zero_stag_read_rtr=core.refuse_zero_stag_read_rtr,
            ird=core.ird,
            ord=core.ord,
            strict_ird_ord=core.strict_ird_ord,
            private_data_limit=core.private_data_limit,
            reject_reserved_bits=core.reject_reserved_bits,
            fallback_to_revision1=core.fallback_to_revision1,
            on_newer_revision=_NEWER_BACK[int(core.on_newer_revision)],
            refuse_with=_REFUSAL_BACK[int(core.refuse_with)],
            on_malformed_frame=_MALFORMED_BACK[int(core.on_malformed_frame)],
            echo_reserved_bits=core.echo_reserved_bits,
            extension_bits=core.extension_bits,
            ird_ord_sentinel=core.ird_ord_sentinel,
            send_rtr=core.send_rtr,
            request_timeout_ms=core.request_timeout_ms,
            reply_timeout_ms=core.reply_timeout_ms,
            rtr_timeout_ms=core.rtr_timeout_ms,
            first_fpdu_delay_ms=core.first_fpdu_delay_ms,
        )


@dataclass(frozen=True)
class Personality:
    """A peer's MPA choices from tools/personalities/NAME.json: a policy plus the private
    data it sends."""

    name: str
    description: str
    mpa: MpaPolicy
    private_data: bytes = b""
    source_path: str = ""
    #: What it was read from: the kernel source file (and functions), and the version.
    source_file: str = ""
    source_version: str = ""

    @classmethod
    def _from_core(cls, core: Any) -> Personality:
        return cls(core.name, core.description, MpaPolicy._from_core(core.mpa), core.private_data,
                   core.source_path, core.source_file, core.source_version)


def find_personality(name_or_path: str, dirs: Sequence[str] | None = None) -> Personality:
    """A personality by name (NAME.json, first of ``dirs`` that has it) or by path (contains
    a '/' or ends in .json). ``dirs`` defaults to $RDMA_INTEROP_PERSONALITY_DIR, the
    installed share directory, then the source tree. Raises ValueError naming what is wrong
    (for a missing name: the known names and the directories searched)."""
    return Personality._from_core(_core.find_personality(name_or_path, None if dirs is None else list(dirs)))


def list_personalities(dirs: Sequence[str] | None = None) -> list[Personality]:
    """Every personality in ``dirs`` (default as for find_personality), sorted by name;
    files that fail to load are left out."""
    found, _problems = _core.list_personalities(None if dirs is None else list(dirs))
    return [Personality._from_core(p) for p in found]


# ---- what setup settled on (core/cm/negotiated_params.h) ------------------------------------


@dataclass(frozen=True)
class NegotiatedParams:
    """What both sides settled on. ``ord``: RDMA Reads we may have outstanding; ``ird``:
    Reads we accept. ``peer_ird``/``peer_ord``: what the peer's frame said."""

    revision: int
    crc: bool
    markers_to_peer: bool
    markers_from_peer: bool
    enhanced: bool
    peer_to_peer: bool
    rtr: Rtr | None
    ird: int
    ord: int
    peer_ird: int
    peer_ord: int
    peer_private_data: bytes

    def to_json(self) -> dict[str, Any]:
        """rdma-probe's "negotiated" object (private data left out)."""
        return {
            "revision": self.revision,
            "crc": self.crc,
            "markers_to_peer": self.markers_to_peer,
            "markers_from_peer": self.markers_from_peer,
            "enhanced": self.enhanced,
            "peer_to_peer": self.peer_to_peer,
            "rtr": None if self.rtr is None else self.rtr.value,
            "ird": self.ird,
            "ord": self.ord,
            "peer_ird": self.peer_ird,
            "peer_ord": self.peer_ord,
        }

    @classmethod
    def _from_core(cls, core: Any) -> NegotiatedParams:
        return cls(
            revision=core.revision,
            crc=core.crc,
            markers_to_peer=core.markers_to_peer,
            markers_from_peer=core.markers_from_peer,
            enhanced=core.enhanced,
            peer_to_peer=core.peer_to_peer,
            rtr=None if core.rtr is None else _RTR_BACK[int(core.rtr)],
            ird=core.ird,
            ord=core.ord,
            peer_ird=core.peer_ird,
            peer_ord=core.peer_ord,
            peer_private_data=core.peer_private_data,
        )


@dataclass(frozen=True)
class ConnectionInfo:
    """A connection's negotiated parameters, addresses ("198.18.0.1:40122") and the MPA
    frames both ways."""

    params: NegotiatedParams
    local_address: str
    peer_address: str
    sent_frame: MpaFrame
    received_frame: MpaFrame
    fell_back_to_revision1: bool

    @classmethod
    def _from_core(cls, core: Any) -> ConnectionInfo:
        return cls(
            params=NegotiatedParams._from_core(core.params),
            local_address=core.local_address,
            peer_address=core.peer_address,
            sent_frame=MpaFrame._from_core(core.sent_frame),
            received_frame=MpaFrame._from_core(core.received_frame),
            fell_back_to_revision1=core.fell_back_to_revision1,
        )


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


class WcOpcode(enum.Enum):
    """What a completed work request was (ibv_wc_opcode)."""

    SEND = "send"
    RDMA_WRITE = "rdma_write"
    RDMA_READ = "rdma_read"
    RECV = "recv"


class WcStatus(str, enum.Enum):
    """How a work request ended (ibv_wc_status); the values are the C++ wc_status_name."""

    SUCCESS = "success"
    LOCAL_LENGTH_ERROR = "local_length_error"  # a received Send did not fit the buffer
    LOCAL_PROTECTION_ERROR = "local_protection_error"  # lkey, bounds or rights check failed
    REMOTE_ACCESS_ERROR = "remote_access_error"  # the peer sent a remote protection Terminate
    REMOTE_OPERATION_ERROR = "remote_operation_error"  # the peer sent another Terminate
    FATAL_ERROR = "fatal_error"  # the connection failed (Terminate sent or received, reset)
    FLUSHED = "flushed"  # the queue pair went to error before this request ran
    # Reported by the verbs provider (IB/RoCE transport errors, from ibv_wc_status):
    RETRY_EXCEEDED = "retry_exceeded"  # no ACK after retry_count transport retries
    RNR_RETRY_EXCEEDED = "rnr_retry_exceeded"  # the peer had no receive posted, rnr_retry times
    REMOTE_INVALID_REQUEST = "remote_invalid_request"
    LOCAL_QP_OPERATION_ERROR = "local_qp_operation_error"
    BAD_RESPONSE = "bad_response"


@dataclass(frozen=True)
class WorkCompletion:
    """One completion queue entry (ibv_wc). ``terminate`` is the Terminate behind an error
    status; ``byte_len`` the received length (RECV) or the message length."""

    wr_id: int
    opcode: WcOpcode
    status: WcStatus
    byte_len: int = 0
    solicited: bool = False
    invalidated_stag: int | None = None
    terminate: TerminateCause | None = None

    @property
    def ok(self) -> bool:
        return self.status is WcStatus.SUCCESS

    @classmethod
    def _from_core(cls, core: Any) -> WorkCompletion:
        return cls(
            wr_id=core.wr_id,
            opcode=WcOpcode(core.opcode.name.lower()),
            status=WcStatus(_core.wc_status_name(core.status)),
            byte_len=core.byte_len,
            solicited=core.solicited,
            invalidated_stag=core.invalidated_stag,
            terminate=_cause(core.terminate),
        )


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
        return [WorkCompletion._from_core(wc) for wc in self._core.poll(max, timeout_ms)]

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
        return ConnectionInfo._from_core(self._core.info)

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
        return [WorkCompletion._from_core(wc) for wc in self._core.poll_completions(max, timeout_ms)]

    @property
    def state(self) -> ConnectionState:
        return ConnectionState(self._core.state.name.lower())

    @property
    def error_detail(self) -> str:
        """Why the connection left CONNECTED (Terminate received or sent, reset, closed)."""
        return str(self._core.error_detail)

    @property
    def terminate_received(self) -> Terminate | None:
        core = self._core.terminate_received
        return None if core is None else Terminate._from_core(core)

    @property
    def terminate_sent(self) -> Terminate | None:
        core = self._core.terminate_sent
        return None if core is None else Terminate._from_core(core)

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
        return MpaFrame._from_core(self._core.request)

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


class Overflow(enum.Enum):
    """What a listener does with a Request that finds every backlog slot taken."""

    DROP = "drop"  # leave it unanswered, first come first served, until a slot frees or it expires
    REJECT = "reject"  # answer at once: Reject with BACKLOG_FULL_MARKER ("backlog_full")


@dataclass(frozen=True)
class ListenOptions:
    """A listener's backlog policy (core/cm/listen_backlog.h). A Request holds one of
    ``backlog`` slots from its arrival until the application accepts or rejects it, or
    ``decision_timeout_ms`` passes (then it is rejected). ``half_open_limit`` bounds the TCP
    connections whose Request is not complete yet (0: max(4 * backlog, 64)); they expire
    after the policy's request timeout. With DROP a Request over the backlog waits up to
    ``overflow_timeout_ms`` for a slot."""

    backlog: int = 16
    overflow: Overflow = Overflow.REJECT
    half_open_limit: int = 0
    decision_timeout_ms: int = 30000
    overflow_timeout_ms: int = 5000

    def _to_core(self) -> Any:
        core = _core.ListenOptions()
        core.backlog = self.backlog
        core.overflow = getattr(_core.BacklogOverflow, self.overflow.name)
        core.half_open_limit = self.half_open_limit
        core.decision_timeout_ms = self.decision_timeout_ms
        core.overflow_timeout_ms = self.overflow_timeout_ms
        return core


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
            return Listener(self._core.listen(uri, policy._to_core(), backlog))
        return Listener(self._core.listen(uri, policy._to_core(), options._to_core()))

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
        options.policy = policy._to_core()
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
