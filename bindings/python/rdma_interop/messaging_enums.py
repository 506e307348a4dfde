"""The message endpoint's enums (core/messaging/message_endpoint.h) as the package's own: what
a send did and the state of a peer, the values the C++ names them by (``status_name``,
``state_name``). The bound ``PeerStats`` hands out its ``state`` as a PeerState;
``rdma_interop.messaging`` re-exports both. This module imports nothing from the extension, so
the extension's stub can name them.
"""

from __future__ import annotations

import enum

__all__ = ["PeerState", "SendStatus"]


class SendStatus(str, enum.Enum):
    """What :meth:`MessageEndpoint.send` (and reply, hold, release) did. Only OK took the
    message; every other status left nothing queued."""

    OK = "ok"  # posted or queued: delivered unless the connection fails
    TRY_AGAIN = "try_again"  # the peer's queue is full (it is not consuming): EAGAIN
    TOO_LONG = "too_long"  # over the peer's max_message
    UNKNOWN_PEER = "unknown_peer"  # no such peer, or it was closed
    PEER_FAILED = "peer_failed"  # the connection failed: see PeerStats.detail
    NOT_HELD = "not_held"  # reply/hold/release: no such message, or already answered


class PeerState(str, enum.Enum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    FAILED = "failed"  # an error or a Terminate ended it: see PeerStats.detail
    CLOSED = "closed"  # closed in order, by us or by the peer
