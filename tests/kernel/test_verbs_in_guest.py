"""Our verbs provider on the guest's kernel devices: its own loopback unit tests through siw0
and rxe0, and verbs-check's RC error semantics on siw (rxe: test_rxe_semantics.py).

The unit tests (tests/unit/verbs_provider_test.cc) skip on a host without RDMA; here they
run through a real device, so every one of them must pass and none may skip.

On siw, verbs-check finds three ways siw breaks the verbs contract (a bad-rkey Read flushed,
a Read to a dead peer neither run nor flushed, and libsiw's success for a chain its send
queue took only part of: sq-overflow); they are FINDINGs in the matrix (one cell per check, column verbs@siw, beside rxe's), the checks that siw does
keep are assertions.
"""

from __future__ import annotations

import json

import pytest

from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome

from tests.support.guest import GUEST_RXE_ADDRESSES, GUEST_SIW_ADDRESS, Guest, guest_path
from tests.support.paths import build_dir

from .kernel_matrix import VERBS_SIW, add_case, attach_crashes, peer_crashes

#: verbs-check on siw: check i listens on PORT + i (real TCP ports; the agent owns 7000).
SIW_CHECK_PORT = 7100


@pytest.mark.parametrize("device,address", [("siw0", GUEST_SIW_ADDRESS),
                                            ("rxe0", GUEST_RXE_ADDRESSES[0])])
def test_verbs_provider_unit_tests_pass_through_the_device(live_guest: Guest, device: str,
                                                           address: str) -> None:
    mark = live_guest.console_mark()
    r = live_guest.run(f"RDMA_INTEROP_VERBS_ADDRESS={address} "
                       f"{guest_path(build_dir())}/tests/unit/verbs_provider_test --gtest_brief=0",
                       timeout=180)
    crashes = peer_crashes(live_guest, mark)
    assert not crashes, [c.note() for c in crashes]
    assert r.ok, r.output
    assert "SKIPPED" not in r.output, f"a loopback test skipped on {device}:\n{r.output}"
    assert "[  PASSED  ]" in r.output and "VerbsLoopback." in r.output, r.output


def test_verbs_check_on_siw(live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    mark = live_guest.console_mark()
    r = live_guest.run(f"{guest_path(build_dir())}/tools/verbs-check/verbs-check --address "
                       f"{GUEST_SIW_ADDRESS} --port {SIW_CHECK_PORT} --json", timeout=240)
    crashes = peer_crashes(live_guest, mark)
    checks = {c["check"]: c for c in (json.loads(line) for line in r.output.splitlines()
                                      if line.startswith("{"))}
    # One cell per check: PASS, FINDING (siw answered otherwise), FAIL (did not run).
    for c in checks.values():
        cell = CaseResult(
            initiator="ours-verbs@siw", responder="kernel-siw", provider="verbs",
            outcome={"pass": Outcome.PASS, "fail": Outcome.FINDING}.get(c["result"],
                                                                         Outcome.FAIL),
            reason="deviation" if c["result"] == "fail" else c["result"],
            expected=f"{c['check']}: {c['expected']}", negotiated=c.get("negotiated"),
            group="verbs-check", check=c["check"], peer=VERBS_SIW,
            elapsed_ms=c.get("elapsed_ms"))
        if c["result"] != "pass":
            cell.notes.append(f"expected {c['expected']}, got {c['got']}")
            cell.evidence.append(Evidence("text", "what verbs-check saw", str(c["detail"])))
        else:
            cell.notes.append(str(c["detail"]))
        attach_crashes(cell, crashes)
        add_case(kernel_matrix, cell)
    assert set(checks) >= {"send-recv", "write", "read", "bad-rkey-read", "zero-length-read",
                           "dead-peer-read"}, r.output
    # What siw keeps: the data path, and C9-88's unchecked zero-length Read.
    for name in ("send-recv", "write", "read", "zero-length-read"):
        assert checks[name]["result"] == "pass", checks[name]
    # The rest must at least have run (a device answer, not a harness error).
    for c in checks.values():
        assert c["result"] in ("pass", "fail"), c
