"""The interop matrix: every personality connects, as initiator, to every personality as
responder, across two lab hosts (RFC 5044 s7.1 and RFC 6581 s3 connection setup, then Send,
RDMA Write and RDMA Read with every byte verified, then a clean disconnect).

Each case passes when both sides did what oracle.py derives from the standards for that
pair: the negotiated revision, CRC, markers, peer-to-peer mode, RTR type and IRD/ORD on both
sides and a verified exchange, or, where the standard requires the connection to fail, the
required failure reported by both sides (an expected failure: XFAIL in the matrix).
"""

from __future__ import annotations

from typing import Any

from rdma_interop.matrix import Outcome


def test_initiator_meets_responder(initiator: str, responder: str, run_case: Any) -> None:
    case = run_case(initiator, responder)

    assert case.outcome in (Outcome.PASS, Outcome.XFAIL), (
        f"{initiator} -> {responder}: {case.cell()}\n"
        f"  required: {case.expected}\n"
        + "".join(f"  mismatch: {m}\n" for m in case.mismatches)
    )
