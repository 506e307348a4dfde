"""rdma-probe serve and connect on loopback: the CLI contract, pair by pair.

Each test starts `rdma-probe serve` on 127.0.0.1 (port 0; the "listening" line names the
real one) with a personality written to a temporary directory with short MPA timeouts, runs
`rdma-probe connect --json` against it, and checks both sides' JSON.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES

from .probe_support import QUICK_TIMEOUTS

ALL_PATTERNS = 3 * 64 * 1024  # seed_a, seed_b and seed_c regions, each verified end to end
NEGOTIATED_KEYS = {
    "revision", "crc", "markers_to_peer", "markers_from_peer", "enhanced", "peer_to_peer",
    "rtr", "ird", "ord", "peer_ird", "peer_ord",
}
ERROR_KEYS = {"kind", "failure", "detail", "terminate"}


def connect(rdma_probe, server, personality: Path | str, timeout: float = 5.0):
    """Runs connect --json against `server`; returns (run, report, the server's event)."""
    run = rdma_probe("connect", server.uri, "--personality", str(personality), "--json",
                     "--timeout", str(timeout), timeout=timeout + 10)
    assert run.stdout.strip(), f"connect printed nothing; stderr: {run.stderr}"
    report = run.json()
    assert report["schema"] == "rdma-interop/connect/1"
    event = server.next_event(timeout=timeout + 5)
    assert event["event"] == "connection"
    return run, report, event


def assert_sides_agree(initiator: dict[str, Any], responder: dict[str, Any],
                       rtr_in_revision1: bool = False) -> None:
    """What both views of one connection must share (RFC 5044 s7.1, RFC 6581 s3). An
    initiator that sends an RTR in revision 1 (iw_cxgb4) knows of it alone."""
    assert set(initiator) == NEGOTIATED_KEYS and set(responder) == NEGOTIATED_KEYS
    shared = ("revision", "crc", "enhanced") if rtr_in_revision1 else (
        "revision", "crc", "enhanced", "peer_to_peer", "rtr")
    for key in shared:
        assert initiator[key] == responder[key], key
    assert initiator["markers_to_peer"] == responder["markers_from_peer"]
    assert initiator["markers_from_peer"] == responder["markers_to_peer"]
    if initiator["enhanced"]:
        # Neither side may have more RDMA Reads outstanding than the other accepts.
        assert initiator["ord"] <= responder["ird"]
        assert responder["ord"] <= initiator["ird"]


def assert_exchange_ok(run, report: dict[str, Any], event: dict[str, Any],
                       rtr_in_revision1: bool = False) -> None:
    assert run.returncode == 0, (report, run.stderr)
    assert report["ok"] is True and report["error"] is None, report["error"]
    assert report["exchange"]["ok"] is True
    assert report["exchange"]["bytes_verified"] == ALL_PATTERNS
    assert all(step["ok"] for step in report["exchange"]["steps"])
    assert event["ok"] is True and event["error"] is None, event["error"]
    assert event["exchange"]["ok"] is True
    assert event["exchange"]["bytes_verified"] == ALL_PATTERNS
    assert_sides_agree(report["negotiated"], event["negotiated"], rtr_in_revision1)
    # Each side learned the other's view from the exchange's messages.
    assert report["responder_view"] == event["negotiated"]
    assert event["initiator_view"] == report["negotiated"]


# initiator, responder, what they must settle on
SUCCESSFUL_PAIRS = [
    pytest.param("siw", "siw", {"revision": 2, "peer_to_peer": False, "rtr": None, "crc": False},
                 id="siw-to-siw"),
    pytest.param("cxgb4", "siw", {"revision": 2, "peer_to_peer": True, "rtr": "read", "crc": True},
                 id="cxgb4-to-siw"),
    pytest.param("siw", "cxgb4", {"revision": 2, "peer_to_peer": False, "rtr": None, "crc": True},
                 id="siw-to-cxgb4"),
    pytest.param("cxgb4", "cxgb4", {"revision": 2, "peer_to_peer": True, "rtr": "read", "crc": True,
                                    "ird": 32, "ord": 32}, id="cxgb4-to-cxgb4"),
    pytest.param("strict", "strict", {"revision": 2, "peer_to_peer": True, "rtr": "read", "crc": True,
                                      "markers_to_peer": True, "markers_from_peer": True},
                 id="strict-to-strict"),
    pytest.param("rev1-only", "rev1-only", {"revision": 1, "enhanced": False, "peer_to_peer": False,
                                            "crc": True}, id="rev1-to-rev1"),
    pytest.param("rev1-only", "siw", {"revision": 1, "enhanced": False, "peer_to_peer": False},
                 id="rev1-to-siw"),
]


@pytest.mark.parametrize("initiator, responder, expected", SUCCESSFUL_PAIRS)
def test_pair_negotiates_and_verifies_every_byte(rdma_probe, serve, personality, initiator, responder,
                                                 expected):
    server = serve(personality(responder))
    run, report, event = connect(rdma_probe, server, personality(initiator))
    assert_exchange_ok(run, report, event)
    for key, value in expected.items():
        assert report["negotiated"][key] == value, key
    assert report["fell_back_to_revision1"] is False
    assert report["personality"] == f"quick-{initiator}"


def test_cxgb4_initiator_falls_back_to_revision1_when_the_responder_resets(rdma_probe, serve, personality):
    server = serve(personality("rev1-only"))
    run, report, reset = connect(rdma_probe, server, personality("cxgb4"))
    # The server accounts for both TCP connections: the revision-2 one it reset, then the
    # revision-1 retry it served.
    assert reset["ok"] is False and reset["error"]["failure"] == "revision_unsupported", reset
    event = server.next_event(timeout=10)
    assert_exchange_ok(run, report, event, rtr_in_revision1=True)
    assert report["fell_back_to_revision1"] is True
    assert report["negotiated"]["revision"] == 1
    # In revision 1 cxgb4 still sends its Read RTR (process_mpa_reply: revision 1 with
    # peer2peer); to the RFC 5044 responder it is a zero-length RDMA Read it serves.
    assert (report["negotiated"]["peer_to_peer"], report["negotiated"]["rtr"]) == (True, "read")
    assert (event["negotiated"]["peer_to_peer"], event["negotiated"]["rtr"]) == (False, None)


def test_siw_initiator_fails_rather_than_falls_back_against_revision1(rdma_probe, serve, personality):
    server = serve(personality("rev1-only"))
    run = rdma_probe("connect", server.uri, "--personality", str(personality("siw")), "--json",
                     "--timeout", "5")
    report = run.json()
    assert run.returncode == 1, report
    assert report["ok"] is False and report["negotiated"] is None
    assert set(report["error"]) == ERROR_KEYS
    assert report["error"]["kind"] == "setup"
    assert report["error"]["failure"] in {"revision_unsupported", "connection_reset"}
    assert report["fell_back_to_revision1"] is False


def test_read_only_initiator_meets_write_only_responder_no_matching_rtr_on_both_sides(
        rdma_probe, serve, personality):
    write_only = personality("siw", name="write-only", rtr_offer=["write"], rtr_preference=["write"])
    server = serve(write_only)
    run, report, event = connect(rdma_probe, server, personality("cxgb4"))
    assert run.returncode == 1, report
    assert report["ok"] is False and event["ok"] is False
    assert report["error"]["kind"] == "setup" and event["error"]["kind"] == "setup"
    assert report["error"]["failure"] == "no_matching_rtr", report["error"]
    assert event["error"]["failure"] == "no_matching_rtr", event["error"]
    # RFC 6581 s3: MPA error code 0x07, layer LLP (2), etype 0.
    assert event["error"]["terminate"] == {"layer": 2, "etype": 0, "code": 7}
    assert event["negotiated"] is None and event["exchange"] is None


def test_responder_never_receiving_the_rtr_ends_with_rtr_timeout(rdma_probe, serve, personality):
    server = serve(personality("siw"))
    start = time.monotonic()
    run, report, event = connect(rdma_probe, server, personality("never-rtr"), timeout=5.0)
    rtr_timeout_s = QUICK_TIMEOUTS["rtr_timeout_ms"] / 1000
    assert event["ok"] is False
    assert event["error"]["failure"] == "rtr_timeout", event["error"]
    assert event["elapsed_ms"] < (rtr_timeout_s + 1.0) * 1000
    assert run.returncode == 1 and report["ok"] is False
    assert time.monotonic() - start < rtr_timeout_s + 3.0


def test_strict_initiator_asking_for_markers_is_refused_by_siw(rdma_probe, serve, personality):
    server = serve(personality("siw"))
    run, report, event = connect(rdma_probe, server, personality("strict"))
    assert run.returncode == 1
    assert event["ok"] is False and event["error"]["failure"] == "markers_refused", event["error"]
    assert report["error"]["failure"] in {"markers_refused", "peer_rejected"}, report["error"]


def test_stalled_connection_does_not_block_the_next_one(probe, rdma_probe, serve, personality):
    server = serve(personality("siw"))
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port))):  # connects and never sends a Request
        never = subprocess.Popen([str(probe), "connect", server.uri,
                                  "--personality", str(personality("never-rtr")), "--json",
                                  "--timeout", "5"], stdout=subprocess.PIPE, text=True)
        try:
            first = server.next_event(timeout=5)
            assert first["error"]["failure"] == "rtr_timeout"
            run, report, event = connect(rdma_probe, server, personality("cxgb4"))
            assert_exchange_ok(run, report, event)
        finally:
            never.wait(timeout=10)


def test_serve_once_exits_after_one_connection(rdma_probe, serve, personality):
    server = serve(personality("cxgb4"), "--once")
    run, report, event = connect(rdma_probe, server, personality("cxgb4"))
    assert_exchange_ok(run, report, event)
    assert server.proc.wait(timeout=5) == 0


def test_serve_stops_within_a_second_on_sigterm(serve, personality):
    server = serve(personality("siw"))
    start = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(timeout=2) == 0
    assert time.monotonic() - start < 1.0


def test_serve_stops_within_a_second_on_sigint_while_waiting_for_an_rtr(probe, serve, personality):
    server = serve(personality("siw", rtr_timeout_ms=10000))
    never = subprocess.Popen([str(probe), "connect", server.uri,
                              "--personality", str(personality("never-rtr")), "--json", "--timeout", "3"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # the responder is now inside accept(), waiting for the RTR
        start = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(timeout=2) == 0
        assert time.monotonic() - start < 1.0
    finally:
        never.wait(timeout=10)


def test_unreachable_port_exits_3(rdma_probe, personality):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens there now: the TCP connect is refused.
    run = rdma_probe("connect", f"tcp://127.0.0.1:{port}", "--personality", str(personality("siw")),
                     "--json", "--timeout", "3")
    assert run.returncode == 3, (run.stdout, run.stderr)
    report = run.json()
    assert report["ok"] is False
    assert report["error"]["kind"] == "unreachable"


@pytest.mark.parametrize("args, message", [
    ([], "subcommand"),
    (["bogus"], "bogus"),
    (["connect", "tcp://127.0.0.1:1"], "--personality"),
    (["connect", "--personality", "siw"], "uri"),
    (["connect", "http://127.0.0.1:1", "--personality", "siw"], "http"),
    (["connect", "tcp://127.0.0.1:1", "--personality", "chelsio"], "unknown personality \"chelsio\""),
    (["connect", "tcp://127.0.0.1:1", "--personality", "/nonexistent.json"], "no such personality file"),
    (["connect", "tcp://127.0.0.1:1", "--personality", "siw", "--timeout", "-1"], "--timeout"),
    (["connect", "tcp://127.0.0.1:1", "--personality", "siw", "--timeout", "soon"], "--timeout"),
    (["serve", "--personality", "siw"], "--listen"),
    (["serve", "--listen", "tcp://127.0.0.1:0"], "--personality"),
    (["serve", "--listen", "tcp://127.0.0.1:0", "--personality", "siw", "--max-connections", "0"],
     "--max-connections"),
    (["serve", "--listen", "tcp://127.0.0.1:0", "--personality", "siw", "--once",
      "--max-connections", "2"], "excludes"),
    (["serve", "--listen", "nonsense", "--personality", "siw"], "nonsense"),
    (["serve", "--listen", "tcp://127.0.0.1:0", "--personality", "siw", "--personality-dir", "/nope"],
     "/nope"),
])
def test_bad_arguments_exit_2_with_a_clear_message(rdma_probe, args, message):
    run = rdma_probe(*args)
    assert run.returncode == 2, (args, run.stdout, run.stderr)
    assert message.lower() in run.stderr.lower(), run.stderr
    assert "terminate called" not in run.stderr


def test_bad_personality_file_names_file_and_line(rdma_probe, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "name": "bad",\n  "mpa": {\n    "ird": 16384\n  }\n}\n')
    run = rdma_probe("connect", "tcp://127.0.0.1:1", "--personality", str(bad))
    assert run.returncode == 2
    assert f"{bad}:4:" in run.stderr and "0x3fff" in run.stderr, run.stderr

    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"name": "u", "mpa": {"rtr": "read"}}')
    run = rdma_probe("serve", "--listen", "tcp://127.0.0.1:0", "--personality", str(unknown))
    assert run.returncode == 2
    assert 'unknown key "mpa.rtr"' in run.stderr, run.stderr


def _serve_with_personality(probe: Path, personality: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    """`rdma-probe serve` with a personality that must be refused at load; the address space
    is capped (1 GiB) so a probe that tried to read /dev/zero whole fails fast instead of
    eating the machine's memory, and the wait is bounded so a blocked open fails the test."""

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    try:
        return subprocess.run(
            [str(probe), "serve", "--listen", "tcp://127.0.0.1:0", "--personality", personality],
            capture_output=True, text=True, timeout=timeout, preexec_fn=cap_memory)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"rdma-probe serve --personality {personality} still running after {timeout} s "
                    f"(stderr: {e.stderr!r})")


def test_personality_dev_zero_exits_2_quickly_with_a_readable_message(probe):
    start = time.monotonic()
    run = _serve_with_personality(str(probe), "/dev/zero")
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert "/dev/zero: not a regular file (a character device)" in run.stderr, run.stderr
    assert "terminate called" not in run.stderr and "bad_alloc" not in run.stderr
    assert time.monotonic() - start < 5


def test_personality_fifo_exits_2_without_waiting_for_a_writer(probe, tmp_path):
    fifo = tmp_path / "peer.json"
    os.mkfifo(fifo)
    run = _serve_with_personality(str(probe), str(fifo))
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert f"{fifo}: not a regular file (a FIFO)" in run.stderr, run.stderr


def test_personality_above_the_size_cap_exits_2(probe, tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"name": "big", "description": "d" * (64 * 1024)}))
    run = _serve_with_personality(str(probe), str(big))
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert "larger than 65536 octets" in run.stderr, run.stderr


def test_personality_whose_private_data_cannot_fit_a_revision_2_frame_exits_2(probe, tmp_path):
    # RFC 5044 s7.1: 512 octets of private data, 4 of them the RFC 6581 IRD/ORD words in
    # revision 2. Refused at load, rather than every Reply failing as the peer's fault.
    data = json.loads((SHIPPED_PERSONALITIES / "strict.json").read_text())
    data["name"] = "chatty"
    data["private_data"] = "x" * 510
    path = tmp_path / "chatty.json"
    path.write_text(json.dumps(data))
    run = _serve_with_personality(str(probe), str(path))
    assert run.returncode == 2, (run.returncode, run.stderr)
    assert str(path) in run.stderr and '"private_data" is 510 octets' in run.stderr, run.stderr
    assert "508" in run.stderr, run.stderr


def test_personalities_lists_name_and_description(rdma_probe):
    run = rdma_probe("personalities", "--personality-dir", str(SHIPPED_PERSONALITIES))
    assert run.returncode == 0, run.stderr
    for name in ("siw", "cxgb4", "rev1-only", "never-rtr", "strict"):
        assert any(line.startswith(name + " ") for line in run.stdout.splitlines()), name
    assert "soft-iWARP" in run.stdout

    listed = rdma_probe("serve", "--list-personalities", "--personality-dir", str(SHIPPED_PERSONALITIES))
    assert listed.returncode == 0 and listed.stdout == run.stdout

    as_json = rdma_probe("personalities", "--json", "--personality-dir", str(SHIPPED_PERSONALITIES))
    entries = {p["name"]: p for p in json.loads(as_json.stdout)}
    assert entries["cxgb4"]["mpa"]["rtr_offer"] == ["read"]
    assert entries["siw"]["source_path"] == str(SHIPPED_PERSONALITIES / "siw.json")


LIVE_STACKS = {
    "irdma": "drivers/infiniband/hw/irdma/cm.c", "qedr": "drivers/net/ethernet/qlogic/qed/qed_iwarp.c",
    "erdma": "drivers/infiniband/hw/erdma/erdma_cm.h", "cxgb4": "drivers/infiniband/hw/cxgb4/cm.c",
    "cxgb4-write": "drivers/infiniband/hw/cxgb4/cm.c", "cxgb4-rev1": "drivers/infiniband/hw/cxgb4/cm.c",
    "freebsd-cxgbe": "sys/dev/cxgbe/iw_cxgbe/cm.c", "siw": "drivers/infiniband/sw/siw/siw_cm.c",
}


def test_personalities_list_the_source_each_was_read_from(rdma_probe):
    run = rdma_probe("personalities", "--personality-dir", str(SHIPPED_PERSONALITIES))
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    for name, source in LIVE_STACKS.items():
        start = next(i for i, line in enumerate(lines) if line.startswith(name + " "))
        block = " ".join(lines[start:start + 40])
        block = block[:block.index("(/")]  # up to its file
        assert "read from: " + source in block, (name, block)
    entries = {p["name"]: p for p in rdma_probe("personalities", "--json", "--personality-dir",
                                                str(SHIPPED_PERSONALITIES)).json()}
    for name, source in LIVE_STACKS.items():
        assert entries[name]["source"]["file"].startswith(source), entries[name]["source"]
        version = entries[name]["source"]["version"]
        assert ("Linux v6.18.44" in version and "mirror" in version) or "FreeBSD" in version, version


def test_personality_is_found_by_the_name_the_list_prints(rdma_probe, serve, tmp_path):
    # A probed peer saved under a file name of its own names itself inside the file.
    saved = json.loads((SHIPPED_PERSONALITIES / "cxgb4.json").read_text())
    saved["name"] = "probed-cxgb4"
    (tmp_path / "peer.json").write_text(json.dumps(saved))
    listed = rdma_probe("personalities", "--personality-dir", str(tmp_path))
    assert any(line.startswith("probed-cxgb4 ") for line in listed.stdout.splitlines()), listed.stdout
    server = serve("probed-cxgb4", "--personality-dir", str(tmp_path))
    assert server.listening["personality"] == "probed-cxgb4"


def test_a_near_miss_of_a_personality_name_suggests_the_nearest(rdma_probe):
    for typo, meant in (("cxbg4", "cxgb4"), ("irdm", "irdma"), ("qedr2", "qedr"), ("freebsd", "freebsd-cxgbe")):
        run = rdma_probe("connect", "tcp://127.0.0.1:1", "--personality", typo,
                         "--personality-dir", str(SHIPPED_PERSONALITIES))
        assert run.returncode == 2, run.stderr
        assert f'unknown personality "{typo}"; did you mean "{meant}"?' in run.stderr, run.stderr
    far = rdma_probe("connect", "tcp://127.0.0.1:1", "--personality", "mellanox")
    assert far.returncode == 2 and "did you mean" not in far.stderr, far.stderr


@pytest.mark.parametrize("command", ["serve", "connect", "personalities"])
def test_help_is_a_manual_page(rdma_probe, command):
    run = rdma_probe(command, "--help")
    assert run.returncode == 0
    for section in ("EXAMPLES", "EXIT STATUS", "--personality" if command != "personalities" else "--json"):
        assert section in run.stdout, section
