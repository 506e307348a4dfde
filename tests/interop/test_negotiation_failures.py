"""Failures the standards define that the shipped personalities never cause among themselves,
provoked with the test-only peers in personalities/ and checked on both sides.

Each is also a cell of the interop matrix (extra rows and columns next to the grid of the shipped personalities).
"""

from __future__ import annotations

from typing import Any

import pytest

from rdma_interop.matrix import Outcome

SCENARIOS = [
    # RFC 6581 s3: no RTR type both accept; Terminate with MPA error code 0x07 on both sides.
    pytest.param("send-rtr-only", "siw", "no_matching_rtr",
                 id="send_only_rtr_initiator_meets_siw_no_matching_rtr"),
    # RFC 6581 s3: an ORD above the peer's IRD that may not be lowered. A strict initiator
    # learns it from the Reply and Terminates (MPA error code 0x06); a strict responder knows
    # before it answers and rejects in its Reply (RFC 5044 s7.1).
    pytest.param("deep-ord-strict", "siw", "insufficient_ird",
                 id="strict_initiator_ord_above_siw_ird_insufficient_ird"),
    pytest.param("siw", "deep-ord-strict", "insufficient_ird",
                 id="strict_responder_ord_above_siw_ird_insufficient_ird"),
    # RFC 5044 s7.1: C from either side means CRC both ways; a side that refuses CRC fails.
    pytest.param("crc-refuse", "cxgb4", "crc_refused",
                 id="crc_refusing_initiator_meets_cxgb4_crc_refused"),
    pytest.param("cxgb4", "crc-refuse", "crc_refused",
                 id="cxgb4_meets_crc_refusing_responder_crc_refused"),
]


@pytest.mark.parametrize(("initiator", "responder", "failure"), SCENARIOS)
def test_required_failure(initiator: str, responder: str, failure: str, run_case: Any) -> None:
    case = run_case(initiator, responder)

    assert case.outcome is Outcome.XFAIL and case.expected_failure == failure, (
        f"{initiator} -> {responder}: {case.cell()}, want XFAIL {failure}\n"
        f"  required: {case.expected}\n"
        + "".join(f"  mismatch: {m}\n" for m in case.mismatches)
    )
