"""Compares what both sides reported for one case with what the oracle requires.

Input: the oracle's Expectation, `rdma-probe connect --json`'s report and exit code, and the
responder's "connection" lines for this case. Output: a matrix CaseResult whose `mismatches`
list every requirement that was not met (empty = PASS, or XFAIL for a required failure).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rdma_interop.matrix import CaseResult, Outcome, SideError

from .oracle import TERMINATE_ETYPE_MPA, TERMINATE_LAYER_LLP, Expectation

CONNECT_SCHEMA = "rdma-interop/connect/1"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _compare_view(who: str, want: Mapping[str, Any], got: Any, out: list[str]) -> None:
    if not isinstance(got, Mapping):
        out.append(f"{who} negotiated: want {dict(want)}, got {got!r}")
        return
    for key, value in want.items():
        if key not in got:
            out.append(f"{who} negotiated.{key}: missing (want {value!r})")
        elif got[key] != value:
            out.append(f"{who} negotiated.{key}: want {value!r}, got {got[key]!r}")


def _check_exchange(who: str, exchange: Any, out: list[str]) -> None:
    if not isinstance(exchange, Mapping):
        out.append(f"{who} exchange: missing")
        return
    if exchange.get("ok") is not True:
        out.append(f"{who} exchange failed")
    if not exchange.get("bytes_verified"):
        out.append(f"{who} exchange verified no bytes")
    for step in exchange.get("steps") or []:
        if not step.get("ok"):
            out.append(f"{who} exchange step {step.get('name')} failed")


def _check_terminate(who: str, error: Mapping[str, Any] | None, code: int, required: bool,
                     out: list[str]) -> None:
    terminate = (error or {}).get("terminate")
    want = {"layer": TERMINATE_LAYER_LLP, "etype": TERMINATE_ETYPE_MPA, "code": code}
    if terminate is None:
        if required:
            out.append(f"{who} error.terminate: want {want} (RFC 6581 s3), got none")
        return
    got = {k: terminate.get(k) for k in want}
    if got != want:
        out.append(f"{who} error.terminate: want {want}, got {got}")


def _failure_of(error: Any) -> str | None:
    return error.get("failure") if isinstance(error, Mapping) else None


def judge(exp: Expectation, report: Mapping[str, Any] | None, exit_code: int,
          responder_events: Sequence[Mapping[str, Any]], *, stderr: str = "",
          provider: str = "tcp") -> CaseResult:
    mismatches: list[str] = []
    notes: list[str] = []
    result = CaseResult(initiator=exp.initiator, responder=exp.responder, provider=provider,
                        outcome=Outcome.FAIL, expected=exp.describe(), mismatches=mismatches,
                        notes=notes)
    last = responder_events[-1] if responder_events else None
    if last is not None:
        result.responder_negotiated = last.get("negotiated")
        result.responder_error = SideError.from_json(last.get("error"))

    if report is None:
        mismatches.append(f"rdma-probe connect printed no JSON (exit {exit_code}): "
                          + (stderr.strip().splitlines() or ["no stderr"])[-1])
        return result
    result.negotiated = report.get("negotiated")
    result.initiator_error = SideError.from_json(report.get("error"))
    result.elapsed_ms = report.get("elapsed_ms")
    if report.get("schema") != CONNECT_SCHEMA:
        mismatches.append(f"connect report schema {report.get('schema')!r}, want {CONNECT_SCHEMA!r}")
    if exit_code == EXIT_UNREACHABLE:
        mismatches.append(f"responder unreachable: {report.get('error')}")
        return result

    # The responder's connections: how many, which succeeded (a revision-1 retry is two).
    pattern = tuple(bool(e.get("ok")) for e in responder_events)
    if pattern != exp.responder_connections:
        want = ", ".join("ok" if ok else "failed" for ok in exp.responder_connections)
        got = ", ".join("ok" if ok else "failed" for ok in pattern) or "none"
        mismatches.append(f"responder connections: want [{want}], got [{got}]")
    if report.get("fell_back_to_revision1") is not exp.fell_back_to_revision1:
        mismatches.append(f"fell_back_to_revision1: want {exp.fell_back_to_revision1}, "
                          f"got {report.get('fell_back_to_revision1')!r}")

    if exp.ok:
        seen = _failure_of(report.get("error")) or (_failure_of(last.get("error")) if last else None)
        if seen:
            result.reason = seen  # it should have worked: the cell names what broke it
        if report.get("ok") is not True or exit_code != EXIT_OK:
            mismatches.append(f"initiator failed (exit {exit_code}): {result.initiator_error}"
                              + (f": {result.initiator_error.detail}"
                                 if result.initiator_error and result.initiator_error.detail else ""))
        assert exp.initiator_view is not None and exp.responder_view is not None
        _compare_view("initiator", exp.initiator_view, report.get("negotiated"), mismatches)
        _check_exchange("initiator", report.get("exchange"), mismatches)
        # What the responder told the initiator over the connection (responder_done)...
        _compare_view("responder (as sent to the initiator)", exp.responder_view,
                      report.get("responder_view"), mismatches)
        # ...and what it printed itself.
        if last is not None:
            if last.get("ok") is not True:
                mismatches.append(f"responder failed: {result.responder_error}"
                                  + (f": {result.responder_error.detail}"
                                     if result.responder_error and result.responder_error.detail
                                     else ""))
            _compare_view("responder", exp.responder_view, last.get("negotiated"), mismatches)
            _check_exchange("responder", last.get("exchange"), mismatches)
        if exp.fell_back_to_revision1:
            notes.append("revision-2 Request reset by the responder; initiator retried in revision 1")
        result.outcome = Outcome.FAIL if mismatches else Outcome.PASS
        return result

    # A failure the standard requires: the initiator must fail, with the right name...
    error = report.get("error")
    if report.get("ok") is not False or exit_code != EXIT_FAILED:
        mismatches.append(f"initiator: want failure {sorted(exp.initiator_failures)}, "
                          f"got ok={report.get('ok')!r} exit {exit_code}")
    elif _failure_of(error) not in exp.initiator_failures:
        result.reason = _failure_of(error) or "mismatch"
        mismatches.append(f"initiator failure: want {' or '.join(sorted(exp.initiator_failures))}, "
                          f"got {_failure_of(error)!r}"
                          + (f" ({error.get('detail')})" if isinstance(error, Mapping) else ""))
    if exp.decided_by == "initiator" and isinstance(error, Mapping) and error.get("kind") != "setup":
        mismatches.append(f"initiator error.kind: want 'setup', got {error.get('kind')!r}")
    if exp.initiator_view is not None:
        _compare_view("initiator", exp.initiator_view, report.get("negotiated"), mismatches)
    # ...and so must the responder.
    responder_error = last.get("error") if last is not None else None
    if last is not None and last.get("ok") is not False:
        mismatches.append("responder: want a failed connection, got ok")
    elif last is not None and _failure_of(responder_error) not in exp.responder_failures:
        result.reason = result.reason or _failure_of(responder_error) or "mismatch"
        mismatches.append(f"responder failure: want {' or '.join(sorted(exp.responder_failures))}, "
                          f"got {_failure_of(responder_error)!r}"
                          + (f" ({responder_error.get('detail')})"
                             if isinstance(responder_error, Mapping) else ""))
    if exp.decided_by == "responder" and isinstance(responder_error, Mapping) \
            and responder_error.get("kind") != "setup":
        mismatches.append(f"responder error.kind: want 'setup', got {responder_error.get('kind')!r}")
    if exp.terminate_code is not None:
        # The deciding side sent the Terminate; a peer that reports "terminate_received" must
        # show that it got the right one.
        for side, err in (("initiator", error), ("responder", responder_error)):
            err_map = err if isinstance(err, Mapping) else None
            required = exp.decided_by == side or _failure_of(err_map) == "terminate_received"
            _check_terminate(side, err_map, exp.terminate_code, required, mismatches)

    if mismatches and not result.reason:
        result.reason = "mismatch"
    other = "responder" if exp.decided_by == "initiator" else "initiator"
    other_failures = (exp.responder_failures if exp.decided_by == "initiator"
                      else exp.initiator_failures)
    if exp.terminate_code is not None:
        other_text = (f"learns it from the Terminate (MPA code 0x{exp.terminate_code:02x}): "
                      + " or ".join(sorted(other_failures)))
    elif other_failures == {"peer_rejected"}:
        other_text = "learns it from the Reject in the Reply (peer_rejected)"
    else:
        other_text = f"sees the connection end ({' / '.join(sorted(other_failures))})"
    why = "; ".join(r for r in exp.rules if not r.startswith(("CRC:", "relaxed "))) or exp.summary
    # Without the personalities' names (the cell's place says them), so that every cell
    # failing for one reason shares one note.
    notes.append(f"{why}: the {exp.decided_by} reports {exp.failure}, the {other} {other_text}")
    result.expected_failure = exp.failure
    result.outcome = Outcome.FAIL if mismatches else Outcome.XFAIL
    return result
