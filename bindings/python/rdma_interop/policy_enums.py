"""The choices of an MPA policy (core/cm/mpa_policy.h) as str enums, and of a listener's
backlog policy (``Overflow``, core/cm/backlog_counters.h).

Each value is the name a personality file gives the choice (core/personality/policy_names.h),
and it is what the bound ``MpaPolicy`` (and ``NegotiatedParams.rtr``) hand out and take:
``policy.crc is Crc.OPTIONAL``, ``MpaPolicy(crc="optional")``; ``ListenOptions.overflow``
likewise (cm::overflow_name). ``rdma_interop.provider``
re-exports them; this module imports nothing from the extension, so the extension's stub
can name them.
"""

from __future__ import annotations

import enum

__all__ = [
    "Crc",
    "NoCommonRtr",
    "OnMalformed",
    "OnNewerRevision",
    "Overflow",
    "PeerToPeer",
    "Refusal",
    "Rtr",
    "RtrCheck",
    "RtrFromReply",
    "RtrReply",
]


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


class Overflow(enum.Enum):
    """What a listener does with a Request that finds every backlog slot taken."""

    DROP = "drop"  # leave it unanswered, first come first served, until a slot frees or it expires
    REJECT = "reject"  # answer at once: Reject with BACKLOG_FULL_MARKER ("backlog_full")
