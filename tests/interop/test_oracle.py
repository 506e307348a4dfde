"""The oracle's rules on their own (no lab, no rdma-probe): each test is one rule of RFC 5044
s7.1 / RFC 6581 s3 as oracle.py states it, on small made-up personalities."""

from __future__ import annotations

from pathlib import Path

import pytest
from oracle import Personality, Policy, expect, load_personalities

SHIPPED = Path(__file__).resolve().parents[2] / "tools" / "personalities"


def peer(name: str, **mpa: object) -> Personality:
    return Personality(name, Policy.from_json(mpa, f"<{name}>"), name.encode())


P2P_ALL = {"peer_to_peer": "on", "rtr_offer": ["send", "write", "read"]}


def test_responder_picks_its_preferred_rtr_type_among_those_both_offer() -> None:
    ini = peer("i", **P2P_ALL)
    assert expect(ini, peer("r", peer_to_peer="when-asked", rtr_offer=["write", "read"],
                            rtr_preference=["write", "read"])).initiator_view["rtr"] == "write"
    # Not in the preference list: Read, then Write, then Send (mpa_policy.h).
    assert expect(ini, peer("r", peer_to_peer="when-asked", rtr_offer=["send", "write"]
                            )).responder_view["rtr"] == "write"


def test_no_common_rtr_type_fails_both_sides_with_mpa_code_7() -> None:
    e = expect(peer("i", peer_to_peer="on", rtr_offer=["send"]),
               peer("r", peer_to_peer="when-asked", rtr_offer=["write", "read"]))
    assert (e.ok, e.failure, e.terminate_code) == (False, "no_matching_rtr", 7)
    assert e.responder_failures == {"no_matching_rtr"}
    assert e.initiator_failures == {"no_matching_rtr", "terminate_received"}


def test_peer_to_peer_only_when_the_initiator_asks_and_the_responder_accepts() -> None:
    asked = peer("i", **P2P_ALL)
    assert not expect(peer("i", peer_to_peer="when-asked", rtr_offer=["read"]),
                      peer("r", **P2P_ALL)).initiator_view["peer_to_peer"]
    declined = expect(asked, peer("r", peer_to_peer="off"))
    assert declined.ok and declined.initiator_view["rtr"] is None


def test_crc_when_either_side_asks_and_refusal_fails_the_refusing_side() -> None:
    assert expect(peer("i", crc="optional"), peer("r", crc="want")).initiator_view["crc"]
    assert not expect(peer("i", crc="optional"), peer("r", crc="optional")).initiator_view["crc"]
    refused = expect(peer("i", crc="want"), peer("r", crc="refuse"))
    assert (refused.failure, refused.decided_by) == ("crc_refused", "responder")


def test_markers_are_per_direction_and_need_a_sender_that_can() -> None:
    e = expect(peer("i", markers_wanted=True), peer("r", markers_supported=True))
    assert (e.initiator_view["markers_from_peer"], e.initiator_view["markers_to_peer"]) == (True, False)
    assert (e.responder_view["markers_to_peer"], e.responder_view["markers_from_peer"]) == (True, False)
    refused = expect(peer("i", markers_wanted=True), peer("r", markers_supported=False))
    assert (refused.failure, refused.decided_by) == ("markers_refused", "responder")


def test_relaxed_side_lowers_its_ord_to_the_peers_ird() -> None:
    e = expect(peer("i", ird=8, ord=32), peer("r", ird=16, ord=64))
    assert (e.initiator_view["ird"], e.initiator_view["ord"]) == (8, 16)
    assert (e.responder_view["ird"], e.responder_view["ord"]) == (16, 8)
    assert (e.initiator_view["peer_ird"], e.initiator_view["peer_ord"]) == (16, 8)
    assert (e.responder_view["peer_ird"], e.responder_view["peer_ord"]) == (8, 32)


def test_strict_initiator_whose_ord_exceeds_the_responders_ird_fails_with_mpa_code_6() -> None:
    # It learns the responder's IRD only from the Reply: the Terminate is its answer.
    e = expect(peer("deep", ord=64, strict_ird_ord=True), peer("shallow", ird=16))
    assert (e.failure, e.decided_by, e.terminate_code) == ("insufficient_ird", "initiator", 6)
    assert e.responder_failures == {"insufficient_ird", "terminate_received"}


@pytest.mark.parametrize(("initiator", "responder"), [
    (peer("shallow", ird=16), peer("deep", ord=64, strict_ird_ord=True)),       # its own ORD
    (peer("cx", ird=32, ord=32), peer("strict", ird=16, ord=16, strict_ird_ord=True)),
    (peer("reader", ird=16, ord=16), peer("no-reads", ird=0, ord=16, strict_ird_ord=True)),
], ids=["own_ord_above_initiator_ird", "initiator_ord_above_its_ird", "ird_0"])
def test_strict_responder_refuses_in_its_reply_not_with_a_terminate(
        initiator: Personality, responder: Personality) -> None:
    # It sees the initiator's IRD and ORD before it answers, so its Reply is the refusal
    # (the Reject flag, RFC 5044 s7.1), not an acceptance followed by a Terminate.
    e = expect(initiator, responder)
    assert (e.failure, e.decided_by, e.terminate_code) == ("insufficient_ird", "responder", None)
    assert e.initiator_failures == {"peer_rejected"}


def test_relaxed_responder_leaves_the_initiator_to_lower_its_ord() -> None:
    assert expect(peer("cx", ird=32, ord=32), peer("relaxed", ird=16, ord=16)).ok


def test_revision_1_responder_reset_makes_a_falling_back_initiator_retry() -> None:
    old = peer("old", revision=1, peer_to_peer="off", on_newer_revision="reset")
    retried = expect(peer("cx", fallback_to_revision1=True, ird=32, ord=32), old)
    assert retried.ok and retried.fell_back_to_revision1
    assert retried.responder_connections == (False, True)
    assert retried.initiator_view == {
        "revision": 1, "crc": True, "markers_to_peer": False, "markers_from_peer": False,
        "enhanced": False, "peer_to_peer": False, "rtr": None, "ird": 32, "ord": 32,
        "peer_ird": 0, "peer_ord": 0}
    failed = expect(peer("siw"), old)
    assert (failed.failure, failed.decided_by) == ("revision_unsupported", "responder")
    assert failed.initiator_failures == {"connection_reset", "revision_unsupported"}


def test_revision_2_responder_answers_a_revision_1_request_in_revision_1() -> None:
    e = expect(peer("old", revision=1, peer_to_peer="off"), peer("new", **P2P_ALL))
    assert e.ok and e.responder_view["revision"] == 1 and not e.responder_view["enhanced"]


def test_initiator_that_never_sends_its_rtr_times_the_responder_out() -> None:
    e = expect(peer("silent", send_rtr=False, **P2P_ALL), peer("r", rtr_timeout_ms=2500, **P2P_ALL))
    assert (e.failure, e.decided_by) == ("rtr_timeout", "responder")
    assert e.initiator_view is not None and e.initiator_view["rtr"] == "read"
    assert e.settle_seconds >= 2.5


def test_private_data_over_the_responders_limit_is_a_malformed_request() -> None:
    # RFC 6581 s3: the IRD and ORD words (4 octets) count in PD_Length.
    e = expect(Personality("big", Policy(), b"x" * 253), peer("r", private_data_limit=256))
    assert (e.failure, e.decided_by) == ("malformed_frame", "responder")
    assert expect(Personality("fits", Policy(), b"x" * 252), peer("r", private_data_limit=256)).ok


def test_personality_whose_own_frame_cannot_carry_its_private_data_does_not_load(tmp_path: Path) -> None:
    # RFC 5044 s7.1: 512 octets at most, the 4 IRD/ORD octets included in revision 2.
    path = tmp_path / "chatty.json"
    path.write_text('{"name": "chatty", "mpa": {"revision": 2}, "private_data": "' + "x" * 509 + '"}')
    with pytest.raises(ValueError, match="private_data.*509 octets.*508"):
        Personality.load(path)
    path.write_text('{"name": "old", "mpa": {"revision": 1}, "private_data": "' + "x" * 512 + '"}')
    assert len(Personality.load(path).private_data) == 512


def test_unknown_personality_keys_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown mpa key.*crc_wanted"):
        Policy.from_json({"crc_wanted": True}, "<test>")


def test_every_shipped_personality_loads() -> None:
    names = set(load_personalities(SHIPPED))
    assert {"siw", "cxgb4", "rev1-only", "never-rtr", "strict"} <= names
