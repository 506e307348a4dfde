"""What the standards say must happen when one personality connects to another.

Written from RFC 5044 s7.1 (MPA Request/Reply), RFC 6581 s3 (revision 2: IRD/ORD, peer-to-peer
mode and the RTR) and the meaning of each personality key as core/cm/mpa_policy.h defines it
- never from what our implementation printed. Every expectation carries the chain of rules
that produced it, so a matrix cell can say *why*.

The rules, in the order a connection meets them:

Request (initiator)      revision = its revision; C = (crc == want); M = markers_wanted;
                         revision 2 adds the IRD/ORD words (RFC 6581 s3), with the P2P flag and
                         the offered RTR types when peer_to_peer == on (an initiator asks for
                         peer-to-peer only in "on", mpa_policy.h).
Responder, on it         1. PD_Length (private data, + 8 octets of IRD/ORD in revision 2) above
                            its private_data_limit: the frame is malformed (RFC 5044 s7.1).
                         2. A newer revision than it speaks (RFC 5044 s7.1 Rev): it answers in
                            its own revision ("reply"), or resets the TCP connection ("reset",
                            old firmware). A revision-2 responder answers a revision-1 Request
                            in revision 1.
                         3. C set and crc == refuse: crc_refused.
                         4. M set (the initiator wants markers in what it receives) and the
                            responder cannot send markers: markers_refused.
                         5. Peer-to-peer asked and accepted (responder's peer_to_peer is not
                            off): the RTR type is the first of its rtr_preference, then Read,
                            Write, Send, that both offer. None in common: RFC 6581 s3 says both
                            sides fail, with a Terminate carrying MPA error code 0x07 (no
                            matching RTR option).
                         6. IRD/ORD (RFC 6581 s3): no side may have more Reads outstanding
                            (ORD) than its peer accepts (IRD). Relaxed: a side lowers its own
                            ORD to the peer's IRD. Strict (strict_ird_ord): it adjusts nothing,
                            so the pair must fit both ways - its ORD within the peer's IRD and
                            the peer's ORD within its IRD - or it refuses. A strict responder
                            sees both before it answers, so its Reply is the refusal: the
                            Reject flag (RFC 5044 s7.1), as iw_cxgb4 does without
                            relaxed_ird_negotiation (c4iw_accept_cr). An IRD of 0 against any
                            ORD above 0 is this case. The initiator sees peer_rejected.
Initiator, on the Reply  7. A revision-1 Reply to a revision-2 Request, or a reset: retry in
                            revision 1 when fallback_to_revision1 (cxgb4), else fail (siw):
                            revision_unsupported (a reset looks like connection_reset to it).
                         8. C set in the Reply and crc == refuse: crc_refused.
                         9. M set in the Reply and it cannot send markers: markers_refused.
                        10. Strict IRD/ORD as in 6, against the Reply's IRD and ORD: the
                            initiator learns the responder's only from the Reply, so it fails
                            after it with a Terminate, MPA error code 0x06 (insufficient IRD
                            resources). The responder learns it from the Terminate.
                        11. Peer-to-peer: it sends the RTR. A personality with send_rtr false
                            never does; the responder must not report the connection
                            established without it (RFC 6581 s3) and fails after its
                            rtr_timeout: rtr_timeout.
Settled                  crc = either side asked (RFC 5044 s7.1: C in either frame means CRC in
                         both directions). Markers are per direction: a side sends markers when
                         its peer's M flag asked for them. enhanced = revision 2. In revision 1
                         nothing about IRD/ORD is exchanged: each side keeps its own, peer_* 0.

The side that does not detect a failure learns of it only as the connection ending, unless
the standard gives it a wire answer (an MPA Reject, or the RFC 6581 Terminate codes 0x06 and
0x07); for it the oracle allows the ways a connection can end rather than one name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

RTR_TYPES = ("send", "write", "read")
# mpa_policy.h: "types missing from the preference list come after it, Read, Write, Send".
RTR_DEFAULT_ORDER = ("read", "write", "send")
MPA_HEADER_WORDS = 4  # RFC 6581 s3: the IRD and ORD words (16 bits each) count in PD_Length
# RFC 5044 s7.1: at most 512 octets of private data in an MPA frame (PD_Length).
MPA_MAX_PRIVATE_DATA = 512
# RFC 5040 s7.2 Terminate: layer LLP (2), error type MPA (0); RFC 6581 s3 codes.
TERMINATE_LAYER_LLP = 2
TERMINATE_ETYPE_MPA = 0
MPA_CODE_INSUFFICIENT_IRD = 0x06
MPA_CODE_NO_MATCHING_RTR = 0x07

# The ways a connection ends, as the side that did not decide sees it.
CONNECTION_ENDED = frozenset({"connection_reset", "connection_closed", "terminate_received"})
# RFC 6581 gives these a Terminate code, so the peer knows the cause: it names it, or reports
# the Terminate it received (whose code the judge then checks).
INSUFFICIENT_IRD_SEEN = frozenset({"insufficient_ird", "terminate_received"})
NO_MATCHING_RTR_SEEN = frozenset({"no_matching_rtr", "terminate_received"})

MPA_KEYS = {
    "revision", "crc", "markers_wanted", "markers_supported", "peer_to_peer", "rtr_offer",
    "rtr_preference", "ird", "ord", "strict_ird_ord", "private_data_limit",
    "reject_reserved_bits", "fallback_to_revision1", "on_newer_revision", "send_rtr",
    "request_timeout_ms", "reply_timeout_ms", "rtr_timeout_ms",
}


@dataclass(frozen=True)
class Policy:
    """A personality's "mpa" object; defaults are cm::MpaPolicy's (mpa_policy.h)."""

    revision: int = 2
    crc: Literal["want", "optional", "refuse"] = "want"
    markers_wanted: bool = False
    markers_supported: bool = False
    peer_to_peer: Literal["off", "when-asked", "on"] = "when-asked"
    rtr_offer: frozenset[str] = frozenset()
    rtr_preference: tuple[str, ...] = ()
    ird: int = 16
    ord: int = 16
    strict_ird_ord: bool = False
    private_data_limit: int = 512
    reject_reserved_bits: bool = False
    fallback_to_revision1: bool = False
    on_newer_revision: Literal["reply", "reset"] = "reply"
    send_rtr: bool = True
    request_timeout_ms: int = 5000
    reply_timeout_ms: int = 10000
    rtr_timeout_ms: int = 5000

    @classmethod
    def from_json(cls, mpa: Mapping[str, Any], origin: str) -> Policy:
        unknown = set(mpa) - MPA_KEYS
        if unknown:
            raise ValueError(f"{origin}: unknown mpa key(s) {', '.join(sorted(unknown))}")
        values: dict[str, Any] = dict(mpa)
        if "rtr_offer" in values:
            values["rtr_offer"] = frozenset(values["rtr_offer"])
        if "rtr_preference" in values:
            values["rtr_preference"] = tuple(values["rtr_preference"])
        return cls(**values)

    def rtr_order(self) -> tuple[str, ...]:
        return tuple(self.rtr_preference) + tuple(
            t for t in RTR_DEFAULT_ORDER if t not in self.rtr_preference)


@dataclass(frozen=True)
class Personality:
    name: str
    policy: Policy
    private_data: bytes = b""
    description: str = ""

    @classmethod
    def load(cls, path: Path) -> Personality:
        doc = json.loads(path.read_text())
        p = cls(
            name=doc.get("name", path.stem),
            policy=Policy.from_json(doc.get("mpa", {}), str(path)),
            private_data=str(doc.get("private_data", "")).encode(),
            description=doc.get("description", ""),
        )
        # Its own frames must carry its private data (RFC 5044 s7.1, with the IRD/ORD words
        # of revision 2 inside the 512 octets): rdma-probe refuses such a file when it loads.
        room = MPA_MAX_PRIVATE_DATA - (MPA_HEADER_WORDS if p.policy.revision == 2 else 0)
        if len(p.private_data) > room:
            raise ValueError(f"{path}: private_data is {len(p.private_data)} octets; a "
                             f"revision-{p.policy.revision} frame carries at most {room}")
        return p


def load_personalities(directory: Path) -> dict[str, Personality]:
    found = {}
    for path in sorted(directory.glob("*.json")):
        p = Personality.load(path)
        found[p.name] = p
    return found


Side = Literal["initiator", "responder"]


@dataclass(frozen=True)
class Expectation:
    """What must happen when `initiator` connects to `responder`."""

    initiator: str
    responder: str
    ok: bool
    summary: str
    rules: tuple[str, ...]
    # Negotiated parameters each side must report, in rdma-probe's "negotiated" layout. Set
    # for successes, and for the initiator of an rtr_timeout (its setup did complete).
    initiator_view: Mapping[str, Any] | None = None
    responder_view: Mapping[str, Any] | None = None
    fell_back_to_revision1: bool = False
    failure: str | None = None  # the cause, named by the side that detects it
    decided_by: Side | None = None
    initiator_failures: frozenset[str] = frozenset()  # acceptable "failure" values
    responder_failures: frozenset[str] = frozenset()
    terminate_code: int | None = None  # RFC 6581 MPA error code both sides must see
    # One entry per TCP connection the responder sees, in order: True = it must succeed.
    responder_connections: tuple[bool, ...] = (True,)
    # Longest the responder may take to report (its timeouts), for the test to wait.
    settle_seconds: float = 1.0

    def describe(self) -> str:
        return f"{self.summary} ({'; '.join(self.rules)})" if self.rules else self.summary


@dataclass
class _Trace:
    rules: list[str] = field(default_factory=list)

    def __call__(self, rule: str) -> None:
        self.rules.append(rule)


def _view(revision: int, crc: bool, markers_to_peer: bool, markers_from_peer: bool,
          p2p: bool, rtr: str | None, ird: int, ord_: int, peer_ird: int,
          peer_ord: int) -> dict[str, Any]:
    return {
        "revision": revision, "crc": crc, "markers_to_peer": markers_to_peer,
        "markers_from_peer": markers_from_peer, "enhanced": revision == 2, "peer_to_peer": p2p,
        "rtr": rtr, "ird": ird, "ord": ord_, "peer_ird": peer_ird, "peer_ord": peer_ord,
    }


def expect(initiator: Personality, responder: Personality) -> Expectation:
    """The expectation for one pair; see the module docstring for the rules."""
    first = _attempt(initiator, responder, revision=initiator.policy.revision)
    if first.get("retry"):
        retry = _attempt(initiator, responder, revision=1)
        second: Expectation = retry["expectation"]
        rules = first["trace"].rules + retry["trace"].rules
        return replace(
            second, rules=tuple(rules), fell_back_to_revision1=True,
            summary=second.summary + " after a revision-1 retry",
            responder_connections=(False, *second.responder_connections),
            settle_seconds=max(second.settle_seconds, 1.0),
        )
    only: Expectation = first["expectation"]
    return only


def _attempt(ini_p: Personality, res_p: Personality, revision: int) -> dict[str, Any]:
    I, R = ini_p.policy, res_p.policy
    why = _Trace()

    def failure(name: str, by: Side, summary: str, *, peer_sees: Iterable[str] = CONNECTION_ENDED,
                terminate: int | None = None, settle: float = 1.0,
                initiator_view: Mapping[str, Any] | None = None) -> dict[str, Any]:
        mine = frozenset({name})
        theirs = frozenset(peer_sees)
        return {"trace": why, "expectation": Expectation(
            initiator=ini_p.name, responder=res_p.name, ok=False, summary=summary, rules=tuple(why.rules), failure=name,
            decided_by=by,
            initiator_failures=mine if by == "initiator" else theirs,
            responder_failures=mine if by == "responder" else theirs,
            terminate_code=terminate, responder_connections=(False,), settle_seconds=settle,
            initiator_view=initiator_view,
        )}

    # 1. Private data must fit the responder's limit (RFC 5044 s7.1: PD_Length).
    request_pd = len(ini_p.private_data) + (MPA_HEADER_WORDS if revision == 2 else 0)
    if request_pd > R.private_data_limit:
        why(f"Request PD_Length {request_pd} > responder's limit {R.private_data_limit}")
        return failure("malformed_frame", "responder", "responder refuses the oversized Request",
                       peer_sees=CONNECTION_ENDED | {"peer_rejected"})

    # 2. Revision (RFC 5044 s7.1; RFC 6581 s3 for the revision-2 additions).
    rev = min(revision, R.revision)
    if revision > R.revision:
        if R.on_newer_revision == "reset":
            why(f"revision-{R.revision} responder resets a revision-{revision} Request")
            if I.fallback_to_revision1:
                why("initiator retries in revision 1 (fallback_to_revision1)")
                return {"trace": why, "retry": True}
            why("initiator does not fall back to revision 1")
            return failure("revision_unsupported", "responder",
                           "revision-1 responder resets; initiator fails",
                           peer_sees={"connection_reset", "revision_unsupported"})
        why(f"revision-{R.revision} responder answers a revision-{revision} Request in "
            f"revision {R.revision}")
        if I.fallback_to_revision1:
            why("initiator retries in revision 1 (fallback_to_revision1)")
            return {"trace": why, "retry": True}
        why("initiator does not fall back to revision 1")
        return failure("revision_unsupported", "initiator",
                       "initiator refuses the revision-1 Reply")
    if revision < R.revision:
        why(f"revision-{R.revision} responder answers a revision-{revision} Request in revision {revision}")

    # 3-4. CRC and markers asked for by the initiator.
    if I.crc == "want" and R.crc == "refuse":
        why("initiator asks for CRC, responder refuses CRC")
        return failure("crc_refused", "responder", "responder refuses CRC",
                       peer_sees=CONNECTION_ENDED | {"peer_rejected"})
    if I.markers_wanted and not R.markers_supported:
        why("initiator asks for markers (M), responder cannot send them")
        return failure("markers_refused", "responder", "responder cannot send markers",
                       peer_sees=CONNECTION_ENDED | {"peer_rejected"})

    # 5. Peer-to-peer and the RTR type (RFC 6581 s3).
    p2p = False
    rtr: str | None = None
    if rev == 2 and I.peer_to_peer == "on":
        if R.peer_to_peer == "off":
            why("responder declines peer-to-peer mode (no RTR)")
        else:
            common = [t for t in R.rtr_order() if t in I.rtr_offer and t in R.rtr_offer]
            if not common:
                why(f"no RTR type in common: initiator offers {sorted(I.rtr_offer)}, "
                    f"responder accepts {sorted(R.rtr_offer)} (RFC 6581 s3, MPA code 0x07)")
                return failure("no_matching_rtr", "responder",
                               "both sides fail: no matching RTR option",
                               peer_sees=NO_MATCHING_RTR_SEEN,
                               terminate=MPA_CODE_NO_MATCHING_RTR)
            p2p, rtr = True, common[0]
            why(f"peer-to-peer, RTR {rtr} (responder's first choice both offer)")

    # 6. IRD/ORD, revision 2 only (RFC 6581 s3).
    if rev == 2:
        if R.strict_ird_ord and (I.ord > R.ird or R.ord > I.ird):
            why(f"strict responder: initiator's ORD {I.ord} / IRD {I.ird} against its IRD "
                f"{R.ird} / ORD {R.ord} do not fit; it rejects in its Reply (RFC 5044 s7.1)")
            return failure("insufficient_ird", "responder",
                           "strict responder rejects: insufficient IRD",
                           peer_sees={"peer_rejected"})
        res_ord = min(R.ord, I.ird)
        if res_ord != R.ord:
            why(f"relaxed responder lowers its ORD {R.ord} to the initiator's IRD {I.ird}")
    else:
        res_ord = R.ord

    # 8-9. The Reply's flags, read by the initiator.
    crc = I.crc == "want" or R.crc == "want"
    if R.crc == "want" and I.crc == "refuse":
        why("responder asks for CRC, initiator refuses CRC")
        return failure("crc_refused", "initiator", "initiator refuses CRC")
    if R.markers_wanted and not I.markers_supported:
        why("responder asks for markers (M), initiator cannot send them")
        return failure("markers_refused", "initiator", "initiator cannot send markers")

    # 10. Strict IRD/ORD at the initiator.
    if rev == 2:
        if I.strict_ird_ord and (I.ord > R.ird or res_ord > I.ird):
            why(f"strict initiator's ORD {I.ord} exceeds responder's IRD {R.ird} (MPA code 0x06)")
            return failure("insufficient_ird", "initiator", "both sides fail: insufficient IRD",
                           peer_sees=INSUFFICIENT_IRD_SEEN, terminate=MPA_CODE_INSUFFICIENT_IRD)
        ini_ord = min(I.ord, R.ird)
        if ini_ord != I.ord:
            why(f"relaxed initiator lowers its ORD {I.ord} to the responder's IRD {R.ird}")
        initiator_view = _view(2, crc, R.markers_wanted, I.markers_wanted, p2p, rtr,
                               I.ird, ini_ord, R.ird, res_ord)
        responder_view = _view(2, crc, I.markers_wanted, R.markers_wanted, p2p, rtr,
                               R.ird, res_ord, I.ird, I.ord)
    else:
        why("revision 1: no IRD/ORD exchanged, each side keeps its own")
        initiator_view = _view(1, crc, R.markers_wanted, I.markers_wanted, False, None,
                               I.ird, I.ord, 0, 0)
        responder_view = _view(1, crc, I.markers_wanted, R.markers_wanted, False, None,
                               R.ird, R.ord, 0, 0)
    if crc:
        why("CRC: " + " and ".join(
            side for side, p in (("initiator", I), ("responder", R)) if p.crc == "want") + " asked")

    # 11. The RTR itself.
    if p2p and not I.send_rtr:
        why(f"initiator never sends its RTR; responder gives up after {R.rtr_timeout_ms} ms")
        return failure("rtr_timeout", "responder", "responder times out waiting for the RTR",
                       settle=R.rtr_timeout_ms / 1000.0 + 2.0, initiator_view=initiator_view)

    summary = (f"rev {rev}{' crc' if crc else ''}"
               f"{' markers' if R.markers_wanted or I.markers_wanted else ''}"
               f"{f' p2p rtr={rtr}' if p2p else ''} ird/ord {initiator_view['ird']}/"
               f"{initiator_view['ord']} : {responder_view['ird']}/{responder_view['ord']}")
    return {"trace": why, "expectation": Expectation(
        initiator=ini_p.name, responder=res_p.name, ok=True, summary=summary, rules=tuple(why.rules),
        initiator_view=initiator_view, responder_view=responder_view,
    )}
