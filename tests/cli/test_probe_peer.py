"""`rdma-probe URI`: probing a peer recovers what it speaks, and names the stack it behaves like.

Each shipped personality is served by `rdma-probe serve` on loopback and probed; the
report's responder_policy must name the settings the personality file declares, for every
setting a responder shows from outside, must load as a personality file as it is, and the
fingerprint must recognise the personality as itself. A made-up personality with unusual
values shows the probe measures rather than recognises, and one nobody described is an
unknown stack with its closest match. Non-iWARP servers, closed ports and bad input get their
own exit codes and plain words.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES

from .local_servers import free_port, http_server

SHIPPED = ["siw", "cxgb4", "cxgb4-write", "cxgb4-rev1", "freebsd-cxgbe", "irdma", "qedr", "erdma",
           "rev1-only", "strict", "never-rtr"]
# cxgb4-rev1 and freebsd-cxgbe speak the same MPA: IRD/ORD 32 against 8, which revision 1 does
# not exchange (tools/personalities/README.md), so the probe can only say "either".
INDISTINGUISHABLE = {"cxgb4-rev1": ["cxgb4-rev1", "freebsd-cxgbe"],
                     "freebsd-cxgbe": ["cxgb4-rev1", "freebsd-cxgbe"]}
# The RTR probe withholds the RTR this long; short keeps the test quick. The fingerprint
# compares with the source tree's personalities (an installed older set must not shadow them).
PROBE_ARGS = ["--json", "--rtr-wait", "300", "--timeout", "3", "--quiet",
              "--personality-dir", str(SHIPPED_PERSONALITIES)]
RTR_FALLBACK_ORDER = ["read", "write", "send"]  # mpa_policy.h: after the listed preference
SCHEMA = "rdma-interop/probe/2"


def expected_responder_policy(personality: dict[str, Any]) -> dict[str, Any]:
    """What a responder with this personality shows from outside, in personality-file terms
    (the keys the probe can see; mpa_policy.h says what each means)."""
    mpa = personality["mpa"]
    revision = mpa["revision"]
    rev2 = revision == 2
    p2p = rev2 and mpa["peer_to_peer"] != "off"
    accepted = mpa.get("rtr_accepted") or mpa["rtr_offer"]
    accepted = [t for t in ("send", "write", "read") if t in accepted] if p2p else []
    expected: dict[str, Any] = {
        "revision": revision,
        "on_newer_revision": mpa["on_newer_revision"],
        "crc": mpa["crc"],
        "markers_wanted": mpa["markers_wanted"],
        "markers_supported": mpa["markers_supported"],
        # A responder cannot tell "on" from "when-asked": both take peer-to-peer when asked.
        "peer_to_peer": ({"on": "when-asked"}.get(mpa["peer_to_peer"], mpa["peer_to_peer"])
                         if rev2 else None),
        "rtr_accepted": accepted if p2p else None,
        # revision 1 and erdma's 129 answer with IRD/ORD nobody exchanges
        "ird": mpa["ird"] if rev2 else None,
        "ord": mpa["ord"] if rev2 else None,
        "strict_ird_ord": mpa["strict_ird_ord"] if rev2 and mpa["ird"] < 0x3FFE else None,
        "ird_ord_sentinel": mpa.get("ird_ord_sentinel", False) if rev2 else None,
        "private_data_limit": mpa["private_data_limit"],
        "reject_reserved_bits": mpa["reject_reserved_bits"],
        "echo_reserved_bits": mpa.get("echo_reserved_bits", False),
        "rtr_in_revision1": mpa.get("rtr_in_revision1", False) if revision in (1, 2) else None,
    }
    reply = mpa.get("rtr_reply", "chosen")
    if p2p and reply == "chosen":
        preference = [t for t in mpa["rtr_preference"] if t in accepted]
        preference += [t for t in RTR_FALLBACK_ORDER if t in accepted and t not in preference]
        expected["rtr_preference"] = preference
    if p2p:
        expected["rtr_reply"] = reply
    return expected


def capability(report: dict[str, Any], cid: str) -> dict[str, Any]:
    for c in report["capabilities"]:
        if c["id"] == cid:
            return c
    raise AssertionError(f"no capability {cid!r} in {[c['id'] for c in report['capabilities']]}")


def probe_json(rdma_probe, uri: str, *extra: str) -> tuple[int, dict[str, Any]]:
    run = rdma_probe(*PROBE_ARGS, *extra, uri, timeout=120)
    assert run.stdout, run.stderr
    return run.returncode, run.json()


@pytest.mark.parametrize("name", SHIPPED)
def test_probe_recovers_each_shipped_personality_and_names_it(rdma_probe, serve, name):
    declared = json.loads((SHIPPED_PERSONALITIES / f"{name}.json").read_text())
    server = serve(SHIPPED_PERSONALITIES / f"{name}.json")
    status, report = probe_json(rdma_probe, server.uri)

    assert status == 0, report
    assert report["schema"] == SCHEMA
    assert report["outcome"] == "probed"
    found = report["responder_policy"]
    assert found["private_data"] == declared["private_data"]
    for key, value in expected_responder_policy(declared).items():
        assert found["mpa"][key] == value, (key, found["mpa"])
    # Bounded: the budget is 48 and a well-behaved peer takes about 30.
    assert 8 <= report["connections"] <= 48
    for c in report["capabilities"]:
        assert c["verdict"] in {"ok", "note", "warn", "fail", "n/a", "not_tested"}, c
        if c["verdict"] not in {"n/a", "not_tested"}:
            assert c["evidence"], c
    # Recognised as itself, with nothing that differs.
    fp = report["fingerprint"]
    assert fp["behaves_like"] == INDISTINGUISHABLE.get(name, [name]), fp["summary"]
    assert fp["verdict"] == ("ambiguous" if name in INDISTINGUISHABLE else "known")
    best = fp["matches"][0]
    assert best["name"] in fp["behaves_like"] and best["score"] == 1.0, best
    assert best["differs"] == [] and best["settings_differ"] == [], best
    # ...and the others are told apart by at least one trait each.
    for m in fp["matches"]:
        if m["name"] not in fp["behaves_like"]:
            assert m["differs"] and m["score"] < 1.0, m


@pytest.mark.parametrize("name", ["siw", "cxgb4", "irdma", "qedr", "erdma", "cxgb4-rev1"])
def test_a_probed_peer_saved_as_a_personality_replays_as_itself(rdma_probe, serve, tmp_path, name):
    first = serve(SHIPPED_PERSONALITIES / f"{name}.json")
    status, report = probe_json(rdma_probe, first.uri)
    assert status == 0, report
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(report["responder_policy"]))
    # It loads as a personality file as it is, listed and found under the name inside it.
    listed = rdma_probe("personalities", "--json", "--personality-dir", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    mine = [p for p in listed.json() if p["source_path"] == str(saved)]
    assert len(mine) == 1 and mine[0]["name"] == report["responder_policy"]["name"], mine
    replay = serve(report["responder_policy"]["name"], "--personality-dir", str(tmp_path))
    status, again = probe_json(rdma_probe, replay.uri)
    assert status == 0, again
    assert again["traits"] == report["traits"]
    assert again["fingerprint"]["behaves_like"] == report["fingerprint"]["behaves_like"]


def test_a_stack_nobody_described_is_unknown_with_its_closest_match(rdma_probe, serve, tmp_path):
    # siw as shipped, but asking for markers and able to send them: no known stack does both.
    siw = json.loads((SHIPPED_PERSONALITIES / "siw.json").read_text())
    siw["name"] = "siw-with-markers"
    siw["mpa"].update(markers_wanted=True, markers_supported=True, rtr_timeout_ms=400)
    path = tmp_path / "siw-with-markers.json"
    path.write_text(json.dumps(siw))
    server = serve(path)
    status, report = probe_json(rdma_probe, server.uri)
    assert status == 0, report
    fp = report["fingerprint"]
    assert fp["verdict"] == "unknown" and fp["behaves_like"] == [], fp
    assert fp["closest"] == "siw"
    assert fp["summary"].startswith("unknown stack, closest: siw ("), fp["summary"]
    best = fp["matches"][0]
    assert best["name"] == "siw" and best["score"] < 1.0
    assert [(d["trait"], d["peer"], d["personality"]) for d in best["differs"]] == [
        ("markers_wanted", True, False), ("markers_supported", True, False)]
    # The table ends with the same verdict.
    table = rdma_probe("--rtr-wait", "300", "--timeout", "3", "--quiet", "--personality-dir",
                       str(SHIPPED_PERSONALITIES), server.uri, timeout=120)
    assert table.returncode == 0, table.stderr
    stack = table.stdout[table.stdout.index("\nSTACK\n"):]
    assert "unknown stack, closest: siw" in stack
    assert "markers_wanted true (false)" in stack


@pytest.mark.parametrize("name", ["siw", "strict"])
def test_probe_reports_rfc_terminate_codes_and_round_trips(rdma_probe, serve, name):
    server = serve(SHIPPED_PERSONALITIES / f"{name}.json")
    status, report = probe_json(rdma_probe, server.uri)
    assert status == 0
    # RFC 5041 s7.2 (DDP tagged buffer errors) and RFC 5040 s7.2 (remote protection errors).
    expected = {
        "terminate_write_invalid_stag": (1, 1, 0x00),
        "terminate_read_invalid_stag": (0, 1, 0x00),
        "terminate_write_out_of_bounds": (1, 1, 0x01),
        "terminate_read_out_of_bounds": (0, 1, 0x01),
    }
    for cid, (layer, etype, code) in expected.items():
        c = capability(report, cid)
        assert c["verdict"] == "ok", c
        assert (c["data"]["layer"], c["data"]["etype"], c["data"]["code"]) == (layer, etype, code)
        assert "Terminate" in c["evidence"][0]["came_back"]
    for cid in ("rtt_read0", "rtt_send64"):
        c = capability(report, cid)
        assert c["verdict"] == "ok", c
        assert c["data"]["count"] == 16
        assert 0 < c["data"]["min_us"] <= c["data"]["median_us"] <= c["data"]["max_us"]


def test_probe_recovers_a_made_up_personality(rdma_probe, serve, tmp_path):
    odd = {
        "name": "odd",
        "description": "values no shipped personality has",
        "mpa": {
            "revision": 2, "crc": "refuse", "markers_wanted": False, "markers_supported": True,
            "peer_to_peer": "off", "rtr_offer": ["read"], "rtr_preference": ["read"],
            "ird": 5, "ord": 3, "strict_ird_ord": True, "private_data_limit": 100,
            "reject_reserved_bits": False, "rtr_timeout_ms": 400,
        },
        "private_data": "odd one",
    }
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(odd))
    server = serve(path)
    status, report = probe_json(rdma_probe, server.uri)
    assert status == 0, report
    policy = report["responder_policy"]["mpa"]
    assert policy["crc"] == "refuse"
    assert policy["peer_to_peer"] == "off"
    assert policy["rtr_offer"] == [] and policy["rtr_preference"] == []
    assert (policy["ird"], policy["ord"], policy["strict_ird_ord"]) == (5, 3, True)
    assert policy["private_data_limit"] == 100
    assert policy["reject_reserved_bits"] is False
    assert report["responder_policy"]["private_data"] == "odd one"
    assert capability(report, "crc")["verdict"] == "note"
    assert capability(report, "rtr_wait")["verdict"] == "n/a"
    assert report["fingerprint"]["verdict"] == "unknown"


def test_rtr_wait_sees_the_responder_give_up(rdma_probe, serve, personality):
    # rtr_timeout 400 ms (QUICK_TIMEOUTS) inside a 2 s window: the responder closes first.
    server = serve(personality("siw"))
    status, report = probe_json(rdma_probe, server.uri, "--rtr-wait", "2000")
    assert status == 0
    c = capability(report, "rtr_wait")
    assert c["verdict"] == "ok" and c["data"]["waits"] is True, c
    assert 300 <= c["data"]["gave_up_after_ms"] <= 1500, c


def test_table_is_readable_with_a_verdict_column(rdma_probe, serve):
    server = serve(SHIPPED_PERSONALITIES / "cxgb4.json")
    run = rdma_probe("--rtr-wait", "300", server.uri, timeout=120)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"rdma-probe {server.uri}: an iWARP peer speaking MPA revision 2")
    header = next(line for line in lines if line.startswith("CAPABILITY"))
    verdict_column = header.index("VERDICT")
    rows = {line.split("  ")[0]: line for line in lines if line.startswith(("CRC32c", "RTR types accepted"))}
    assert rows["CRC32c"][verdict_column:].strip() == "ok"
    assert "required" in rows["CRC32c"]
    assert "read" in rows["RTR types accepted"]
    # The reasons for verdicts other than ok follow the table: cxgb4 names its own RTR type
    # whatever is offered (send_mpa_reply).
    assert "WHY" in lines and any("RTR picked when offered all (warn)" in line
                                  for line in lines[lines.index("WHY"):])
    # And the table ends with the stack it behaves like.
    assert "STACK" in lines[lines.index("WHY"):]


def test_budget_bounds_the_connections(rdma_probe, serve):
    server = serve(SHIPPED_PERSONALITIES / "siw.json")
    status, report = probe_json(rdma_probe, server.uri, "--max-connections", "4")
    assert status == 0
    assert report["connections"] == 4
    not_tested = [c for c in report["capabilities"] if c["verdict"] == "not_tested"]
    assert not_tested and all("--max-connections" in c["why"] for c in not_tested)
    served = 0
    deadline = time.monotonic() + 5
    while served < 4 and time.monotonic() < deadline:
        try:
            event = server.next_event(timeout=1)
        except AssertionError:
            break
        served += event.get("event") in {"connection"}
    # The serve side saw no more connections than the budget (raw probes fail before
    # reaching the application, so it may see fewer).
    assert served <= 4


def test_an_http_server_is_named_not_an_iwarp_peer(rdma_probe):
    with http_server() as port:
        run = rdma_probe("--json", f"tcp://127.0.0.1:{port}")
        assert run.returncode == 4, run.stdout + run.stderr
        report = run.json()
        assert report["outcome"] == "not_iwarp"
        assert "HTTP" in report["detail"] and "not an iWARP peer" in report["detail"]
        plain = rdma_probe(f"tcp://127.0.0.1:{port}")
        assert plain.returncode == 4
        assert "not an iWARP peer" in plain.stdout and "HTTP server" in plain.stdout


def test_a_silent_server_is_not_an_iwarp_peer_and_the_probe_is_bounded(rdma_probe):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_say_nothing() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=accept_and_say_nothing, daemon=True).start()
    try:
        uri = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        run = rdma_probe("--json", "--timeout", "0.5", uri)
        assert run.returncode == 4, run.stdout + run.stderr
        report = run.json()
        assert report["outcome"] == "not_iwarp"
        assert "no MPA Reply" in report["detail"]
        # revision 2, with peer-to-peer (irdma), revision 1, erdma's 129
        assert report["connections"] == 4
        assert run.seconds < 3
    finally:
        stop.set()
        listener.close()
        for s in held:
            s.close()


def test_a_closed_port_is_unreachable(rdma_probe):
    run = rdma_probe("--json", f"tcp://127.0.0.1:{free_port()}")
    assert run.returncode == 3, run.stdout + run.stderr
    report = run.json()
    assert report["outcome"] == "unreachable"
    assert "refused" in report["detail"].lower()
    assert report["capabilities"] == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["tcp://127.0.0.1"], "needs a port"),
        (["tcp://127.0.0.1:0"], "needs the peer's port"),
        (["probe", "http://x:1"], "scheme"),
        (["nonsense"], "neither a command"),
        (["--timeout", "-1", "tcp://127.0.0.1:1"], "timeout"),
    ],
)
def test_bad_probe_arguments_exit_2(rdma_probe, args, message):
    run = rdma_probe(*args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert message.lower() in run.stderr.lower(), run.stderr


def test_probe_help_documents_the_schema_and_exit_codes(rdma_probe):
    run = rdma_probe("probe", "--help")
    assert run.returncode == 0
    for text in ("rdma-interop/probe/2", "responder_policy", "EXIT STATUS", "not an iWARP peer",
                 "--max-connections", "never floods", "STACK", "fingerprint", "--personality-dir"):
        assert text in run.stdout, text
    top = rdma_probe("--help")
    assert "rdma-probe [--json] [--timeout T] tcp://HOST:PORT" in top.stdout


class WriteRtrOnlyResponder:
    """A raw MPA responder that always picks a Write RTR, offered or not (as kernel siw does
    for a Send-only offer), and records what each initiator sends after its Reply."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.uri = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.after_reply: list[tuple[int, bytes]] = []  # (offered RTR bits, octets that followed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        conn.settimeout(1.0)
        try:
            header = b""
            while len(header) < 20:
                chunk = conn.recv(20 - len(header))
                if not chunk:
                    return
                header += chunk
            pd_length = int.from_bytes(header[18:20], "big")
            pd = b""
            while len(pd) < pd_length:
                chunk = conn.recv(pd_length - len(pd))
                if not chunk:
                    return
                pd += chunk
            enhanced = header[16] & 0x10 and header[17] == 2
            offered = 0
            if enhanced:
                ird_word, ord_word = int.from_bytes(pd[0:2], "big"), int.from_bytes(pd[2:4], "big")
                p2p = ird_word & 0x8000
                offered = (ird_word & 0x4000) >> 12 | (ord_word & 0xC000) >> 14  # send=4 write=2 read=1
                words = ((0x8000 if p2p else 0) | 16).to_bytes(2, "big") + \
                    ((0x8000 if p2p else 0) | 16).to_bytes(2, "big")
                reply = b"MPA ID Rep Frame" + bytes([0x10, 2]) + len(words).to_bytes(2, "big") + words
            else:
                reply = b"MPA ID Rep Frame" + bytes([0x00, header[17]]) + b"\x00\x00"
            conn.sendall(reply)
            received = b""
            try:
                while True:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    received += chunk
            except OSError:
                pass
            self.after_reply.append((offered, received))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


def test_an_rtr_picked_outside_the_offer_is_a_finding_and_draws_no_terminate(rdma_probe):
    peer = WriteRtrOnlyResponder()
    try:
        run = rdma_probe("--json", "--timeout", "0.5", "--rtr-wait", "100", "--quiet", peer.uri, timeout=120)
        report = run.json()
        types = capability(report, "rtr_types")
        assert types["verdict"] == "fail", types
        assert "send answered with write" in types["data"]["outside_offer"]
        assert "read answered with write" in types["data"]["outside_offer"]
        assert types["data"]["accepted"] == ["write"]
        # Offers without Write (the raw probes) got nothing after the Reply: no Terminate
        # before any RTR, the sequence that crashes kernel siw's iw_cm.
        without_write = [octets for offered, octets in peer.after_reply if offered and not offered & 2]
        assert without_write and all(octets == b"" for octets in without_write), peer.after_reply
    finally:
        peer.close()


def test_a_peer_that_stops_answering_mid_probe_is_reported(rdma_probe, serve):
    # serve exits after 3 connections: the probe's later connections are refused.
    server = serve(SHIPPED_PERSONALITIES / "siw.json", "--max-connections", "3")
    status, report = probe_json(rdma_probe, server.uri)
    assert status == 1, report["detail"]
    still = capability(report, "still_answering")
    assert still["verdict"] == "fail" and still["data"]["unchanged"] is False
    assert "stopped answering" in report["detail"]
