"""What the standards say must happen when one personality connects to another.

Written from RFC 5044 s7.1 (MPA Request/Reply), RFC 6581 s3 (revision 2: IRD/ORD, peer-to-peer
mode and the RTR) and the meaning of each personality key as core/cm/mpa_policy.h defines it
- never from what our implementation printed. Every expectation carries the chain of rules
that produced it, so a matrix cell can say *why*.

The rules, in the order a connection meets them:

Request (initiator)      revision = its revision; C = (crc == want); M = markers_wanted;
                         revision 2 adds the IRD/ORD words (RFC 6581 s3), with the P2P flag and
                         the offered RTR types when peer_to_peer is on or required (an
                         initiator asks for peer-to-peer in those only, mpa_policy.h).
                         Revision 129 is erdma's own, not an IETF revision: no IRD/ORD words.
Responder, on it         0. A revision it cannot even read (129 to anyone but erdma; RFC 5044
                            s7.1: a receiver that cannot interoperate with the revision ends
                            the connection): on_newer_revision says how - reset, close, or
                            answer in its own revision and close (the rest of the frame is
                            unreadable). Nobody can continue; the initiator (erdma) fails.
                         1. PD_Length (private data, + 4 octets of IRD/ORD in revision 2; erdma's
                            extension is outside it) above its private_data_limit: the frame is
                            malformed (RFC 5044 s7.1); on_malformed_frame: reset or close.
                         2. A newer revision than it speaks (RFC 5044 s7.1 Rev), or for erdma any
                            other: it answers in its own revision ("reply"), or resets ("reset",
                            old firmware, iw_cxgb4, irdma) or closes ("close", siw, erdma) the
                            TCP connection. A revision-2 responder answers a revision-1 Request
                            in revision 1.
                         3. C set and crc == refuse: crc_refused.
                         4. M set (the initiator wants markers in what it receives) and the
                            responder cannot send markers: markers_refused.
                         4a. peer_to_peer == required (irdma) and a revision-2 Request without
                            the P2P flag: peer_to_peer_required.
                            Each refusal of 3, 4, 4a is an MPA Reject (RFC 5044 s7.1), unless
                            refuse_with == reset: a TCP reset and nothing else (irdma).
                         5. Peer-to-peer asked and accepted (responder's peer_to_peer is not
                            off): the RTR type is the first of its rtr_preference, then Read,
                            Write, Send, that the initiator offers and it accepts (rtr_accepted,
                            default rtr_offer). None in common: RFC 6581 s3 says both sides
                            fail, with a Terminate carrying MPA error code 0x07 (no matching RTR
                            option) - or per no_common_rtr it names its first preference anyway
                            (propose: siw), every type it accepts (offer-all: qed), or answers
                            without peer-to-peer (decline: iw_cxgb4). Its Reply names the type it
                            picked (RFC 6581 s3), or per rtr_reply its own single type (own:
                            iw_cxgb4, which still waits for the one it picked) or every common
                            type (all-common: qed).
                         6. IRD/ORD (RFC 6581 s3): no side may have more Reads outstanding
                            (ORD) than its peer accepts (IRD). Relaxed: a side lowers its own
                            ORD to the peer's IRD. Strict (strict_ird_ord): it adjusts nothing,
                            so the pair must fit both ways - its ORD within the peer's IRD and
                            the peer's ORD within its IRD - or it refuses. A strict responder
                            sees both before it answers, so its Reply is the refusal: the
                            Reject flag (RFC 5044 s7.1), as iw_cxgb4 does without
                            relaxed_ird_negotiation (c4iw_accept_cr). An IRD of 0 against any
                            ORD above 0 is this case. The initiator sees peer_rejected. An IRD or
                            ORD of 0x3fff meets a side with ird_ord_sentinel (irdma) as "no
                            IRD/ORD negotiation": no check, no lowering, 0x3fff/0x3fff back.
Initiator, on the Reply  7. A revision-1 Reply to a revision-2 Request, or a reset: retry in
                            revision 1 when fallback_to_revision1 (cxgb4, irdma), else fail (siw):
                            revision_unsupported (a reset looks like connection_reset to it).
                         8. C set in the Reply and crc == refuse: crc_refused.
                         9. M set in the Reply and it cannot send markers: markers_refused.
                         9a. peer_to_peer == required and a revision-2 Reply without the P2P
                            flag: peer_to_peer_required.
                         9b. The Reply's RTR types: RFC 6581 s3 has it name exactly one of those
                            offered; an initiator holding to that (rtr_from_reply exact) fails
                            any other Reply with MPA code 0x07; one reading by preference (irdma,
                            siw) takes the first of its own order among the named ones it
                            offered.
                        10. Strict IRD/ORD as in 6, against the Reply's IRD and ORD: the
                            initiator learns the responder's only from the Reply, so it fails
                            after it with a Terminate, MPA error code 0x06 (insufficient IRD
                            resources). The responder learns it from the Terminate.
                            After a Reply, an initiator's refusal is its Terminate (0x06, 0x07)
                            unless refuse_with == reset (irdma): a TCP reset, no Terminate.
                        11. Peer-to-peer: it sends the RTR. A personality with send_rtr false
                            never does; the responder must not report the connection
                            established without it (RFC 6581 s3) and fails after its
                            rtr_timeout: rtr_timeout. A responder with rtr_check agreed takes
                            only the type it waits for; another fails it with rtr_mismatch and a
                            Terminate carrying MPA code 0x07. With rtr_check any (siw, qed) the
                            first zero-length operation is the RTR.
                        12. Revision 1 has no RTR (RFC 5044); a side with rtr_in_revision1
                            (iw_cxgb4's peer2peer) uses its own single type anyway: as initiator
                            it sends it after the Reply - to an RFC 5044 responder a zero-length
                            RDMA Read or Write, which it serves (RFC 5040 s5: a zero-length
                            operation names no memory) - and as responder it waits for it: an
                            initiator that sends application data first fails it (rtr_mismatch,
                            Terminate 0x07).
Settled                  crc = either side asked (RFC 5044 s7.1: C in either frame means CRC in
                         both directions). Markers are per direction: a side sends markers when
                         its peer's M flag asked for them. enhanced = revision 2. In revision 1
                         (and erdma's 129) nothing about IRD/ORD is exchanged: each side keeps
                         its own, peer_* 0.

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
# RFC 6581 s3: IRD/ORD are 14 bits; irdma reads 0x3fff as "no IRD/ORD" (IETF_NO_IRD_ORD).
IRD_ORD_MAX = 0x3FFF
# erdma_cm.h MPA_REVISION_EXT_1: erdma's own revision, no RFC 6581 words.
ERDMA_REVISION = 129
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
# A responder that fails the RTR after the initiator thought itself connected: a Write or Send
# RTR initiator meets the Terminate in its exchange, a Read RTR initiator while it waits for
# the Read Response (then it names the code).
RTR_MISMATCH_SEEN = NO_MATCHING_RTR_SEEN | {"connection_closed", "connection_reset"}

MPA_KEYS = {
    "revision", "crc", "markers_wanted", "markers_supported", "peer_to_peer", "rtr_offer",
    "rtr_accepted", "rtr_preference", "rtr_reply", "no_common_rtr", "rtr_check",
    "rtr_from_reply", "rtr_in_revision1", "read_rtr_sink_stag", "read_rtr_source_stag",
    "refuse_zero_stag_read_rtr", "ird", "ord", "strict_ird_ord", "private_data_limit",
    "reject_reserved_bits", "fallback_to_revision1", "on_newer_revision", "refuse_with",
    "on_malformed_frame", "echo_reserved_bits", "extension_bits", "ird_ord_sentinel",
    "send_rtr", "request_timeout_ms", "reply_timeout_ms", "rtr_timeout_ms",
    "first_fpdu_delay_ms",
}


@dataclass(frozen=True)
class Policy:
    """A personality's "mpa" object; defaults are cm::MpaPolicy's (mpa_policy.h)."""

    revision: int = 2
    crc: Literal["want", "optional", "refuse"] = "want"
    markers_wanted: bool = False
    markers_supported: bool = False
    peer_to_peer: Literal["off", "when-asked", "on", "required"] = "when-asked"
    rtr_offer: frozenset[str] = frozenset()
    rtr_accepted: frozenset[str] | None = None
    rtr_preference: tuple[str, ...] = ()
    rtr_reply: Literal["chosen", "own", "all-common"] = "chosen"
    no_common_rtr: Literal["refuse", "propose", "offer-all", "decline"] = "refuse"
    rtr_check: Literal["agreed", "any"] = "agreed"
    rtr_from_reply: Literal["exact", "preference"] = "exact"
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
    on_newer_revision: Literal["reply", "reset", "close"] = "reply"
    refuse_with: Literal["reject", "reset"] = "reject"
    on_malformed_frame: Literal["reset", "close"] = "reset"
    echo_reserved_bits: bool = False
    extension_bits: int = 0
    ird_ord_sentinel: bool = False
    send_rtr: bool = True
    request_timeout_ms: int = 5000
    reply_timeout_ms: int = 10000
    rtr_timeout_ms: int = 5000
    first_fpdu_delay_ms: int = 0

    @classmethod
    def from_json(cls, mpa: Mapping[str, Any], origin: str) -> Policy:
        unknown = set(mpa) - MPA_KEYS
        if unknown:
            raise ValueError(f"{origin}: unknown mpa key(s) {', '.join(sorted(unknown))}")
        # null counts as absent (personality.h): the default.
        values: dict[str, Any] = {k: v for k, v in mpa.items() if v is not None}
        for key in ("rtr_offer", "rtr_accepted"):
            if key in values:
                values[key] = frozenset(values[key])
        if "rtr_preference" in values:
            values["rtr_preference"] = tuple(values["rtr_preference"])
        return cls(**values)

    def rtr_order(self) -> tuple[str, ...]:
        return tuple(self.rtr_preference) + tuple(
            t for t in RTR_DEFAULT_ORDER if t not in self.rtr_preference)

    def accepted(self) -> frozenset[str]:
        """The RTR types it takes as responder (rtr_accepted, else rtr_offer)."""
        return self.rtr_offer if self.rtr_accepted is None else self.rtr_accepted

    def first_of(self, candidates: Iterable[str]) -> str | None:
        have = set(candidates)
        return next((t for t in self.rtr_order() if t in have), None)

    def asks_peer_to_peer(self) -> bool:
        return self.peer_to_peer in ("on", "required")

    def speaks(self, revision: int) -> bool:
        """Whether a Request of `revision` is one it speaks (on_newer_revision otherwise)."""
        if self.revision == ERDMA_REVISION:
            return revision == ERDMA_REVISION
        return revision <= self.revision

    def reads(self, revision: int) -> bool:
        """Whether it can parse a frame of `revision` at all."""
        return revision in (1, 2) or (revision == ERDMA_REVISION == self.revision)


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
            private_data=str(doc.get("private_data") or "").encode(),
            description=doc.get("description") or "",
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


def _hangup_seen(how: str) -> frozenset[str]:
    """What the side that is hung up on reports: a reset or an orderly close."""
    return frozenset({"connection_reset"} if how == "reset" else {"connection_closed"})


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

    def hung_up_on_initiator(name: str, how: str, summary: str) -> dict[str, Any]:
        """The responder resets or closes during the Request; a reset to a revision-2 Request
        sends an initiator that falls back into its revision-1 retry (rule 7)."""
        if how == "reset" and revision == 2 and I.fallback_to_revision1:
            why("initiator retries in revision 1 after the reset (fallback_to_revision1)")
            return {"trace": why, "retry": True}
        return failure(name, "responder", summary,
                       peer_sees=_hangup_seen(how) | ({name} if name == "revision_unsupported"
                                                      else set()))

    def refused_by_responder(name: str, summary: str) -> dict[str, Any]:
        """Rules 3, 4, 4a: an MPA Reject, or (refuse_with reset) a TCP reset."""
        if R.refuse_with == "reset":
            why("the responder refuses with a TCP reset, not an MPA Reject (refuse_with reset)")
            return hung_up_on_initiator(name, "reset", summary + ", by a reset")
        return failure(name, "responder", summary, peer_sees=CONNECTION_ENDED | {"peer_rejected"})

    # 0. A revision the responder cannot even read.
    if not R.reads(revision):
        why(f"revision-{revision} Request: a revision the revision-{R.revision} responder "
            "cannot read (RFC 5044 s7.1)")
        if R.on_newer_revision == "reply":
            why(f"it answers in revision {R.revision} and closes; the initiator cannot meet "
                "that either")
            return failure("revision_unsupported", "responder",
                           "the responder answers in its own revision, the initiator gives up",
                           peer_sees={"revision_unsupported", "connection_closed"})
        why(f"the responder {'resets' if R.on_newer_revision == 'reset' else 'closes'} the "
            "connection without a Reply")
        return hung_up_on_initiator("revision_unsupported", R.on_newer_revision,
                                    "the responder does not speak the revision")

    # 1. Private data must fit the responder's limit (RFC 5044 s7.1: PD_Length).
    request_pd = len(ini_p.private_data) + (MPA_HEADER_WORDS if revision == 2 else 0)
    if request_pd > R.private_data_limit:
        why(f"Request PD_Length {request_pd} > responder's limit {R.private_data_limit}")
        how = R.on_malformed_frame
        if how == "reset" and revision == 2 and I.fallback_to_revision1:
            why("the responder resets; initiator retries in revision 1 (fallback_to_revision1)")
            return {"trace": why, "retry": True}
        return failure("malformed_frame", "responder", "responder refuses the oversized Request",
                       peer_sees=CONNECTION_ENDED | {"peer_rejected"})

    # 2. Revision (RFC 5044 s7.1; RFC 6581 s3 for the revision-2 additions; erdma speaks 129 only).
    if not R.speaks(revision):
        if R.on_newer_revision in ("reset", "close"):
            why(f"revision-{R.revision} responder {R.on_newer_revision}s a revision-{revision} "
                "Request")
            if R.on_newer_revision == "reset" and revision == 2 and I.fallback_to_revision1:
                why("initiator retries in revision 1 (fallback_to_revision1)")
                return {"trace": why, "retry": True}
            if revision == 2 and R.on_newer_revision == "reset":
                why("initiator does not fall back to revision 1")
            return failure("revision_unsupported", "responder",
                           f"revision-{R.revision} responder {R.on_newer_revision}s; initiator fails",
                           peer_sees=_hangup_seen(R.on_newer_revision) | {"revision_unsupported"})
        why(f"revision-{R.revision} responder answers a revision-{revision} Request in "
            f"revision {R.revision}")
        if I.fallback_to_revision1:
            why("initiator retries in revision 1 (fallback_to_revision1)")
            return {"trace": why, "retry": True}
        why("initiator does not fall back to revision 1")
        return failure("revision_unsupported", "initiator",
                       "initiator refuses the revision-1 Reply")
    rev = min(revision, R.revision)
    if revision < R.revision:
        why(f"revision-{R.revision} responder answers a revision-{revision} Request in revision {revision}")
    if revision == ERDMA_REVISION and R.revision != ERDMA_REVISION:
        raise AssertionError("unreachable: rule 0 handles revision 129 to a standard responder")

    # 3-4a. CRC, markers and peer-to-peer, as the responder reads the Request.
    if I.crc == "want" and R.crc == "refuse":
        why("initiator asks for CRC, responder refuses CRC")
        return refused_by_responder("crc_refused", "responder refuses CRC")
    if I.markers_wanted and not R.markers_supported:
        why("initiator asks for markers (M), responder cannot send them")
        return refused_by_responder("markers_refused", "responder cannot send markers")
    if rev == 2 and R.peer_to_peer == "required" and not I.asks_peer_to_peer():
        why("the responder requires peer-to-peer mode; the revision-2 Request does not ask for "
            "it (irdma: irdma_negotiate_mpa_v2_ird_ord returns -EOPNOTSUPP)")
        return refused_by_responder("peer_to_peer_required",
                                    "responder refuses a Request without peer-to-peer")

    # 5. Peer-to-peer and the RTR type (RFC 6581 s3).
    p2p = False
    expected_rtr: str | None = None  # what the responder waits for
    named: frozenset[str] = frozenset()  # what its Reply names
    if rev == 2 and I.asks_peer_to_peer():
        if R.peer_to_peer == "off":
            why("responder declines peer-to-peer mode (no RTR)")
        else:
            accepted = R.accepted()
            common = [t for t in R.rtr_order() if t in I.rtr_offer and t in accepted]
            if common:
                p2p, expected_rtr = True, common[0]
                named = {"chosen": frozenset({expected_rtr}), "own": frozenset(R.rtr_offer),
                         "all-common": frozenset(common)}[R.rtr_reply]
                why(f"peer-to-peer, responder picks RTR {expected_rtr} (its first choice both offer)")
                if R.rtr_reply == "own":
                    why(f"its Reply names its own type {sorted(named)} instead (iw_cxgb4 "
                        "send_mpa_reply), while it waits for the one it picked")
                elif R.rtr_reply == "all-common" and len(named) > 1:
                    why(f"its Reply names every common type {sorted(named)} (qed "
                        "qed_iwarp_mpa_received)")
            elif R.no_common_rtr == "decline":
                why(f"no RTR type in common ({sorted(I.rtr_offer)} offered, {sorted(accepted)} "
                    "accepted): the responder answers without peer-to-peer (iw_cxgb4)")
            elif R.no_common_rtr == "refuse":
                why(f"no RTR type in common: initiator offers {sorted(I.rtr_offer)}, "
                    f"responder accepts {sorted(accepted)} (RFC 6581 s3, MPA code 0x07)")
                if R.refuse_with == "reset":
                    why("the responder refuses with a TCP reset (refuse_with reset)")
                    return hung_up_on_initiator("no_matching_rtr", "reset",
                                                "no matching RTR option, refused by a reset")
                return failure("no_matching_rtr", "responder",
                               "both sides fail: no matching RTR option",
                               peer_sees=NO_MATCHING_RTR_SEEN,
                               terminate=MPA_CODE_NO_MATCHING_RTR)
            else:
                p2p = True
                named = (frozenset({R.first_of(accepted)}) if R.no_common_rtr == "propose"
                         else frozenset(accepted))
                expected_rtr = R.first_of(accepted)
                why(f"no RTR type in common; the responder names {sorted(named)} anyway "
                    f"({'siw siw_proc_mpareq' if R.no_common_rtr == 'propose' else 'qed: its own capabilities'})")

    # 6. IRD/ORD, revision 2 only (RFC 6581 s3).
    no_ird_ord = rev == 2 and IRD_ORD_MAX in (I.ird, I.ord) and R.ird_ord_sentinel
    if rev == 2:
        if no_ird_ord:
            why("IRD/ORD 0x3fff: the responder takes it as no IRD/ORD negotiation (irdma)")
            res_ird_word, res_ord_word, res_ord = IRD_ORD_MAX, IRD_ORD_MAX, R.ord
        else:
            if R.strict_ird_ord and (I.ord > R.ird or R.ord > I.ird):
                why(f"strict responder: initiator's ORD {I.ord} / IRD {I.ird} against its IRD "
                    f"{R.ird} / ORD {R.ord} do not fit; it rejects in its Reply (RFC 5044 s7.1)")
                if R.refuse_with == "reset":
                    why("refused with a TCP reset (refuse_with reset)")
                    return hung_up_on_initiator("insufficient_ird", "reset",
                                                "strict responder resets: insufficient IRD")
                return failure("insufficient_ird", "responder",
                               "strict responder rejects: insufficient IRD",
                               peer_sees={"peer_rejected"})
            res_ord = min(R.ord, I.ird)
            if res_ord != R.ord:
                why(f"relaxed responder lowers its ORD {R.ord} to the initiator's IRD {I.ird}")
            res_ird_word, res_ord_word = R.ird, res_ord
    else:
        res_ord = R.ord
        res_ird_word = res_ord_word = 0

    def refused_by_initiator(name: str, summary: str, *, terminate: int | None,
                             responder_sees: Iterable[str]) -> dict[str, Any]:
        """Rules 8-10: after the Reply the initiator's refusal is its Terminate, or (refuse_with
        reset) a reset without one."""
        if I.refuse_with == "reset":
            why("the initiator refuses with a TCP reset, no Terminate (refuse_with reset)")
            return failure(name, "initiator", summary + ", by a reset",
                           peer_sees={"connection_reset", "connection_closed"})
        return failure(name, "initiator", summary, peer_sees=responder_sees, terminate=terminate)

    # 8-9a. The Reply's flags, read by the initiator.
    crc = I.crc == "want" or R.crc == "want"
    if R.crc == "want" and I.crc == "refuse":
        why("responder asks for CRC, initiator refuses CRC")
        return refused_by_initiator("crc_refused", "initiator refuses CRC", terminate=None,
                                    responder_sees=CONNECTION_ENDED)
    if R.markers_wanted and not I.markers_supported:
        why("responder asks for markers (M), initiator cannot send them")
        return refused_by_initiator("markers_refused", "initiator cannot send markers",
                                    terminate=None, responder_sees=CONNECTION_ENDED)
    if rev == 2 and I.peer_to_peer == "required" and not p2p:
        why("the initiator requires peer-to-peer mode; the Reply does not grant it")
        return refused_by_initiator("peer_to_peer_required", "initiator refuses a Reply without "
                                    "peer-to-peer", terminate=None, responder_sees=CONNECTION_ENDED)

    # 9b. The RTR types the Reply names, as the initiator reads them.
    rtr: str | None = None
    if p2p:
        if I.rtr_from_reply == "preference":
            rtr = I.first_of(t for t in named if t in I.rtr_offer)
        elif len(named) == 1 and next(iter(named)) in I.rtr_offer:
            rtr = next(iter(named))
        if rtr is None:
            why(f"the Reply names RTR {sorted(named)}, the initiator offered {sorted(I.rtr_offer)} "
                f"and reads the Reply {'by its preference' if I.rtr_from_reply == 'preference' else 'as RFC 6581 s3 says: exactly one it offered'}"
                " (MPA code 0x07)")
            waits = NO_MATCHING_RTR_SEEN if expected_rtr else CONNECTION_ENDED
            return refused_by_initiator("no_matching_rtr", "initiator fails: no matching RTR",
                                        terminate=MPA_CODE_NO_MATCHING_RTR, responder_sees=waits)
        if len(named) > 1:
            why(f"the initiator reads the Reply by its preference: RTR {rtr}")

    # 10. Strict IRD/ORD at the initiator.
    ini_sentinel = rev == 2 and I.ird_ord_sentinel and IRD_ORD_MAX in (res_ird_word, res_ord_word)
    if rev == 2:
        if I.strict_ird_ord and not ini_sentinel and (I.ord > res_ird_word or res_ord > I.ird):
            why(f"strict initiator's ORD {I.ord} exceeds responder's IRD {R.ird} (MPA code 0x06)")
            return refused_by_initiator("insufficient_ird", "both sides fail: insufficient IRD",
                                        terminate=MPA_CODE_INSUFFICIENT_IRD,
                                        responder_sees=INSUFFICIENT_IRD_SEEN)
        ini_ord = I.ord if ini_sentinel else min(I.ord, res_ird_word)
        if ini_ord != I.ord:
            why(f"relaxed initiator lowers its ORD {I.ord} to the responder's IRD {R.ird}")
    elif rev == ERDMA_REVISION:
        why("erdma's revision 129: no IRD/ORD words, no peer-to-peer; each side keeps its own")
        ini_ord = I.ord
    else:
        why("revision 1: no IRD/ORD exchanged, each side keeps its own")
        ini_ord = I.ord

    # 12. Revision 1 with an RTR anyway (iw_cxgb4 peer2peer).
    ini_p2p, res_p2p = p2p, p2p
    res_rtr = expected_rtr
    if rev == 1:
        if I.rtr_in_revision1:
            rtr, ini_p2p = next(iter(I.rtr_offer)), True
            why(f"in revision 1 the initiator still sends its {rtr} RTR (iw_cxgb4 peer2peer: "
                "process_mpa_reply)")
        if R.rtr_in_revision1:
            expected_rtr, res_rtr, res_p2p = next(iter(R.rtr_offer)), next(iter(R.rtr_offer)), True
            why(f"in revision 1 the responder still waits for its {expected_rtr} RTR (iw_cxgb4 "
                "peer2peer: process_mpa_request)")
        elif rtr is not None:
            why(f"the RFC 5044 responder serves the zero-length {rtr} as an ordinary operation "
                "(RFC 5040: it names no memory)")

    if rev == 2:
        initiator_view = _view(2, crc, R.markers_wanted, I.markers_wanted, ini_p2p, rtr,
                               I.ird, ini_ord, res_ird_word, res_ord_word)
        responder_view = _view(2, crc, I.markers_wanted, R.markers_wanted, res_p2p, res_rtr,
                               R.ird, res_ord, I.ird, I.ord)
    else:
        initiator_view = _view(rev, crc, R.markers_wanted, I.markers_wanted, ini_p2p, rtr,
                               I.ird, I.ord, 0, 0)
        responder_view = _view(rev, crc, I.markers_wanted, R.markers_wanted, res_p2p, res_rtr,
                               R.ird, R.ord, 0, 0)
    if crc:
        why("CRC: " + " and ".join(
            side for side, p in (("initiator", I), ("responder", R)) if p.crc == "want") + " asked")

    # 11. The RTR itself.
    if expected_rtr is not None:
        if rtr is None or not I.send_rtr:
            if rtr is not None and not I.send_rtr:
                why(f"initiator never sends its RTR; responder gives up after {R.rtr_timeout_ms} ms")
                return failure("rtr_timeout", "responder", "responder times out waiting for the RTR",
                               settle=R.rtr_timeout_ms / 1000.0 + 2.0, initiator_view=initiator_view)
            why("the initiator sends no RTR, its first FPDU is application data; the responder "
                "fails it (MPA code 0x07)")
            return failure("rtr_mismatch", "responder", "responder waits for an RTR that never comes",
                           peer_sees=RTR_MISMATCH_SEEN, terminate=MPA_CODE_NO_MATCHING_RTR)
        if R.rtr_check == "agreed" and rtr != expected_rtr:
            why(f"the initiator sends the {rtr} RTR it was told; the responder waits for "
                f"{expected_rtr} and fails it (MPA code 0x07)")
            return failure("rtr_mismatch", "responder", "responder takes only the RTR it picked",
                           peer_sees=RTR_MISMATCH_SEEN, terminate=MPA_CODE_NO_MATCHING_RTR)
        if R.rtr_check == "any" and rtr != expected_rtr:
            why(f"the responder takes the {rtr} RTR that came (rtr_check any)")
            responder_view = {**responder_view, "rtr": rtr}
        if (rtr == "read" and R.refuse_zero_stag_read_rtr and I.read_rtr_source_stag == 0):
            why("the responder refuses a Read RTR naming source STag 0")
            return failure("rtr_refused", "responder", "responder refuses the STag-0 Read RTR",
                           peer_sees=CONNECTION_ENDED)

    summary = (f"rev {rev}{' crc' if crc else ''}"
               f"{' markers' if R.markers_wanted or I.markers_wanted else ''}"
               f"{f' p2p rtr={rtr}' if rtr else ''} ird/ord {initiator_view['ird']}/"
               f"{initiator_view['ord']} : {responder_view['ird']}/{responder_view['ord']}")
    return {"trace": why, "expectation": Expectation(
        initiator=ini_p.name, responder=res_p.name, ok=True, summary=summary, rules=tuple(why.rules),
        initiator_view=initiator_view, responder_view=responder_view,
    )}
