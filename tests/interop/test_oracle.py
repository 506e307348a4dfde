"""The oracle's rules on their own (no lab, no rdma-probe): each test is one rule of RFC 5044
s7.1 / RFC 6581 s3 as oracle.py states it, on small made-up personalities."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES

from .oracle import Personality, Policy, expect, load_personalities

SHIPPED = SHIPPED_PERSONALITIES


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


# ---- the live stacks' departures (issue 21; tools/personalities/README.md cites each) ---------


def shipped(name: str) -> Personality:
    return load_personalities(SHIPPED)[name]


def test_every_issue_21_personality_loads() -> None:
    names = set(load_personalities(SHIPPED))
    assert {"irdma", "qedr", "erdma", "cxgb4-write", "cxgb4-rev1", "freebsd-cxgbe"} <= names


def test_a_responder_that_requires_peer_to_peer_resets_a_request_without_it() -> None:
    e = expect(peer("plain", peer_to_peer="when-asked"),
               peer("irdma-like", peer_to_peer="required", rtr_offer=["read"], refuse_with="reset"))
    assert (e.failure, e.decided_by) == ("peer_to_peer_required", "responder")
    assert e.initiator_failures == {"connection_reset"}  # no Reject: a reset
    rejected = expect(peer("plain"), peer("polite", peer_to_peer="required", rtr_offer=["read"]))
    assert "peer_rejected" in rejected.initiator_failures


def test_a_reset_refusal_sends_a_falling_back_initiator_into_revision_1() -> None:
    e = expect(peer("cx", fallback_to_revision1=True),
               peer("irdma-like", peer_to_peer="required", rtr_offer=["read"], refuse_with="reset"))
    assert e.ok and e.fell_back_to_revision1 and e.initiator_view["revision"] == 1


def test_a_reply_naming_the_responders_own_type_fails_an_initiator_that_offered_another() -> None:
    # iw_cxgb4 send_mpa_reply: the Reply names its p2p_type, not the type it picked.
    e = expect(shipped("cxgb4-write"), shipped("cxgb4"))
    assert (e.failure, e.decided_by, e.terminate_code) == ("no_matching_rtr", "initiator", 7)
    # ...and an initiator that obeys it sends the type the responder did not set itself up for.
    m = expect(shipped("irdma"), shipped("cxgb4"))
    assert (m.failure, m.decided_by, m.terminate_code) == ("rtr_mismatch", "responder", 7)
    assert "no_matching_rtr" in m.initiator_failures
    assert expect(shipped("cxgb4"), shipped("cxgb4")).initiator_view["rtr"] == "read"


def test_a_multi_type_reply_is_read_by_preference_or_refused_as_rfc_6581_says() -> None:
    # qed_iwarp_mpa_received names every common type.
    assert expect(shipped("irdma"), shipped("qedr")).initiator_view["rtr"] == "read"
    e = expect(peer("exact", **P2P_ALL), shipped("qedr"))
    assert (e.failure, e.decided_by, e.terminate_code) == ("no_matching_rtr", "initiator", 7)


def test_siw_proposes_write_to_a_send_only_offer_and_the_initiator_refuses_it() -> None:
    e = expect(peer("send-only", peer_to_peer="on", rtr_offer=["send"]), shipped("siw"))
    assert (e.failure, e.decided_by) == ("no_matching_rtr", "initiator")
    assert e.responder_failures == {"no_matching_rtr", "terminate_received"}


def test_a_responder_that_takes_any_rtr_reports_the_one_that_came() -> None:
    e = expect(peer("reader", peer_to_peer="on", rtr_offer=["read"], rtr_from_reply="preference"),
               peer("any", peer_to_peer="when-asked", rtr_offer=["write", "read"],
                    rtr_reply="all-common", rtr_check="any", rtr_preference=["write"]))
    assert e.ok and e.responder_view["rtr"] == "read"


def test_cxgb4_keeps_its_rtr_in_revision_1() -> None:
    # process_mpa_reply/process_mpa_request: revision 1 with peer2peer uses p2p_type.
    served = expect(shipped("cxgb4"), shipped("rev1-only"))
    assert served.ok and served.fell_back_to_revision1
    assert (served.initiator_view["peer_to_peer"], served.initiator_view["rtr"]) == (True, "read")
    assert (served.responder_view["peer_to_peer"], served.responder_view["rtr"]) == (False, None)
    waits = expect(shipped("rev1-only"), shipped("cxgb4-rev1"))
    assert (waits.failure, waits.decided_by, waits.terminate_code) == ("rtr_mismatch", "responder", 7)
    assert expect(shipped("cxgb4-rev1"), shipped("freebsd-cxgbe")).ok


def test_erdma_meets_only_erdma() -> None:
    both = expect(shipped("erdma"), shipped("erdma"))
    assert both.ok and both.initiator_view["revision"] == 129
    assert not both.initiator_view["enhanced"] and not both.initiator_view["crc"]
    closed = expect(shipped("siw"), shipped("erdma"))
    assert (closed.failure, closed.decided_by) == ("revision_unsupported", "responder")
    assert closed.initiator_failures == {"connection_closed", "revision_unsupported"}
    reset = expect(shipped("erdma"), shipped("cxgb4"))
    assert reset.initiator_failures == {"connection_reset", "revision_unsupported"}
    answered = expect(shipped("erdma"), shipped("strict"))
    assert answered.initiator_failures == {"connection_closed", "revision_unsupported"}


def test_irdmas_sentinel_means_no_ird_ord_negotiation() -> None:
    probe = peer("probe", ird=0x3FFF, ord=1, peer_to_peer="on", rtr_offer=["read"])
    e = expect(probe, shipped("irdma"))
    assert (e.initiator_view["peer_ird"], e.initiator_view["peer_ord"]) == (0x3FFF, 0x3FFF)
    assert e.responder_view["ord"] == 255  # not lowered


def test_a_zero_stag_read_rtr_meets_a_refuser() -> None:
    e = expect(peer("reader", peer_to_peer="on", rtr_offer=["read"]),
               peer("hw", peer_to_peer="on", rtr_offer=["read"], refuse_zero_stag_read_rtr=True))
    assert (e.failure, e.decided_by) == ("rtr_refused", "responder")
    assert expect(peer("siw-like", peer_to_peer="on", rtr_offer=["read"], read_rtr_source_stag=1),
                  peer("hw", peer_to_peer="on", rtr_offer=["read"],
                       refuse_zero_stag_read_rtr=True)).ok


def test_null_keys_are_the_default_as_in_a_probe_report() -> None:
    assert Policy.from_json({"crc": None, "ird": None, "rtr_accepted": None}, "<probe>") == Policy()
