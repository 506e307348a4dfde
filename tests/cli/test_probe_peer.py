"""`rdma-probe URI`: probing a peer recovers what it speaks.

Each shipped personality is served by `rdma-probe serve` on loopback and probed; the
report's responder_policy must name exactly the settings the personality file declares, for
every setting a responder shows from outside. A made-up personality with unusual values
shows the probe measures rather than recognises. Non-iWARP servers, closed ports and
bad input get their own exit codes and plain words.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from probe_support import SHIPPED_PERSONALITIES

SHIPPED = ["siw", "cxgb4", "rev1-only", "strict", "never-rtr"]
# The RTR probe withholds the RTR this long; short keeps the test quick.
PROBE_ARGS = ["--json", "--rtr-wait", "300", "--timeout", "3", "--quiet"]
RTR_FALLBACK_ORDER = ["read", "write", "send"]  # mpa_policy.h: after the listed preference


def expected_responder_policy(personality: dict[str, Any]) -> dict[str, Any]:
    """What a responder with this personality shows from outside, in the report's terms."""
    mpa = personality["mpa"]
    rev2 = mpa["revision"] == 2
    p2p = rev2 and mpa["peer_to_peer"] != "off"
    accepted = [t for t in ("send", "write", "read") if t in mpa["rtr_offer"]] if p2p else []
    preference = [t for t in mpa["rtr_preference"] if t in accepted]
    preference += [t for t in RTR_FALLBACK_ORDER if t in accepted and t not in preference]
    return {
        "revision": mpa["revision"],
        "on_newer_revision": None if rev2 else mpa["on_newer_revision"],
        "private_data": personality.get("private_data", ""),
        "peer_to_peer": ("accepted" if p2p else "declined") if rev2 else None,
        "rtr_accepted": accepted if rev2 else None,
        "rtr_preference": preference if rev2 else None,
        "ird": mpa["ird"] if rev2 else None,
        "ord": mpa["ord"] if rev2 else None,
        "strict_ird_ord": mpa["strict_ird_ord"] if rev2 and mpa["ird"] < 0x3FFF else None,
        "crc": mpa["crc"],
        "markers_wanted": mpa["markers_wanted"],
        "markers_supported": mpa["markers_supported"],
        "private_data_limit": mpa["private_data_limit"],
        "reject_reserved_bits": mpa["reject_reserved_bits"],
    }


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
def test_probe_recovers_each_shipped_personality(rdma_probe, serve, name):
    declared = json.loads((SHIPPED_PERSONALITIES / f"{name}.json").read_text())
    server = serve(SHIPPED_PERSONALITIES / f"{name}.json")
    status, report = probe_json(rdma_probe, server.uri)

    assert status == 0, report
    assert report["schema"] == "rdma-interop/probe/1"
    assert report["outcome"] == "probed"
    assert report["responder_policy"] == expected_responder_policy(declared)
    # Bounded: the budget is 48 and a well-behaved peer takes about 25.
    assert 8 <= report["connections"] <= 48
    for c in report["capabilities"]:
        assert c["verdict"] in {"ok", "note", "warn", "fail", "n/a", "not_tested"}, c
        assert c["verdict"] != "fail", c  # every shipped personality follows the RFCs it claims
        if c["verdict"] not in {"n/a", "not_tested"}:
            assert c["evidence"], c


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
    policy = report["responder_policy"]
    assert policy["crc"] == "refuse"
    assert policy["peer_to_peer"] == "declined"
    assert policy["rtr_accepted"] == [] and policy["rtr_preference"] == []
    assert (policy["ird"], policy["ord"], policy["strict_ird_ord"]) == (5, 3, True)
    assert policy["private_data_limit"] == 100
    assert policy["reject_reserved_bits"] is False
    assert policy["private_data"] == "odd one"
    assert capability(report, "crc")["verdict"] == "note"
    assert capability(report, "rtr_wait")["verdict"] == "n/a"


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
    # The reasons for verdicts other than ok follow the table.
    assert "WHY" in lines and any("Reserved Request bits" in line for line in lines[lines.index("WHY"):])


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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_http_server_is_named_not_an_iwarp_peer(rdma_probe):
    port = _free_port()
    http = subprocess.Popen(["/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        run = rdma_probe("--json", f"tcp://127.0.0.1:{port}")
        assert run.returncode == 4, run.stdout + run.stderr
        report = run.json()
        assert report["outcome"] == "not_iwarp"
        assert "HTTP" in report["detail"] and "not an iWARP peer" in report["detail"]
        plain = rdma_probe(f"tcp://127.0.0.1:{port}")
        assert plain.returncode == 4
        assert "not an iWARP peer" in plain.stdout and "HTTP server" in plain.stdout
    finally:
        http.terminate()
        http.wait(timeout=5)


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
        assert report["connections"] == 2  # revision 2, then revision 1
        assert run.seconds < 3
    finally:
        stop.set()
        listener.close()
        for s in held:
            s.close()


def test_a_closed_port_is_unreachable(rdma_probe):
    run = rdma_probe("--json", f"tcp://127.0.0.1:{_free_port()}")
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
    for text in ("rdma-interop/probe/1", "responder_policy", "EXIT CODES", "not an iWARP peer",
                 "--max-connections", "never floods"):
        assert text in run.stdout, text
    top = rdma_probe("--help")
    assert "rdma-probe [--json] [--timeout S] tcp://HOST:PORT" in top.stdout


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
