"""Our verbs provider on the guest's kernel devices: its own loopback unit tests through siw0
and rxe0, and verbs-check's RC error semantics on siw (rxe: test_rxe_semantics.py).

The unit tests (tests/unit/verbs_provider_test.cc) skip on a host without RDMA; here they
run through a real device, so every one of them must pass and none may skip.

On siw, verbs-check finds two ways the kernel breaks the verbs contract; they are findings
in the matrix (cell ours-verbs@siw -> kernel-siw, provider "verbs-check"), the checks that
siw does keep are assertions.
"""

from __future__ import annotations

import json

import pytest
from conftest import add_case, peer_crash_notes
from guest import GUEST_RXE_ADDRESSES, GUEST_SIW_ADDRESS, Guest, build_dir, guest_path

from rdma_interop.matrix import CaseResult, InteropMatrix, Outcome

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
    crashes = peer_crash_notes(live_guest, mark)
    assert not crashes, crashes
    assert r.ok, r.output
    assert "SKIPPED" not in r.output, f"a loopback test skipped on {device}:\n{r.output}"
    assert "[  PASSED  ]" in r.output and "VerbsLoopback." in r.output, r.output


def test_verbs_check_on_siw(live_guest: Guest, kernel_matrix: InteropMatrix) -> None:
    mark = live_guest.console_mark()
    r = live_guest.run(f"{guest_path(build_dir())}/tools/verbs-check/verbs-check --address "
                       f"{GUEST_SIW_ADDRESS} --port {SIW_CHECK_PORT} --json", timeout=240)
    crashes = peer_crash_notes(live_guest, mark)
    checks = {c["check"]: c for c in (json.loads(line) for line in r.output.splitlines()
                                      if line.startswith("{"))}
    assert set(checks) >= {"send-recv", "write", "read", "bad-rkey-read", "zero-length-read",
                           "dead-peer-read"}, r.output
    # What siw keeps: the data path, and C9-88's unchecked zero-length Read.
    for name in ("send-recv", "write", "read", "zero-length-read"):
        assert checks[name]["result"] == "pass", checks[name]
    # The rest must at least have run (a device answer, not a harness error).
    for c in checks.values():
        assert c["result"] in ("pass", "fail"), c
    findings = []
    for c in checks.values():
        if c["result"] == "fail":
            findings.append(f"siw {c['check']}: expected {c['expected']}, got {c['got']}: "
                            f"{c['detail']}")
    add_case(kernel_matrix, CaseResult(
        initiator="ours-verbs@siw", responder="kernel-siw", provider="verbs-check",
        outcome=Outcome.FAIL if findings or crashes else Outcome.PASS,
        reason="crashed" if crashes else ("deviation" if findings else None),
        negotiated=checks["read"].get("negotiated"),
        notes=[*crashes, *findings]))
