"""rdma-probe serve's backlog flags as an operator uses them: a slow acceptor with backlog 1,
a second client over the backlog, and what each overflow policy does to it."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from .probe_support import ServeProcess


def connect(probe: Path, personality: Path, uri: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([str(probe), "connect", uri, "--personality", str(personality),
                             "--json", *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def final_counters(serve: ServeProcess) -> dict[str, Any]:
    serve.stop()
    while True:
        event = serve.next_event(timeout=5)
        if event.get("event") == "counters":
            return event


def test_drop_closes_a_request_that_waited_past_the_overflow_timeout(
        probe: Path, personality: Any, serve: Any) -> None:
    quick = personality("siw", reply_timeout_ms=8000)
    s = serve(quick, "--backlog", "1", "--overflow", "drop", "--overflow-timeout", "300",
              "--accept-delay", "2500")
    first = connect(probe, quick, s.uri)
    time.sleep(0.5)  # the first request holds the only slot, its acceptor is slow
    started = time.monotonic()
    second = connect(probe, quick, s.uri)
    out, _ = second.communicate(timeout=20)
    waited = time.monotonic() - started
    assert second.returncode == 1, out
    # Closed by the listener after its 300 ms, not by our 8 s reply timeout.
    assert waited < 2.5, waited
    first.communicate(timeout=20)
    assert first.returncode == 0
    c = final_counters(s)
    assert (c["accepted"], c["overflow_dropped"], c["overflow_rejected"]) == (1, 1, 0), c
    assert c["high_water"] == 1


def test_reject_answers_backlog_full_and_retries_get_through(
        probe: Path, personality: Any, serve: Any) -> None:
    quick = personality("siw")
    s = serve(quick, "--backlog", "1", "--overflow", "reject", "--accept-delay", "600")
    first = connect(probe, quick, s.uri)
    time.sleep(0.3)
    refused = connect(probe, quick, s.uri)
    out, _ = refused.communicate(timeout=20)
    assert refused.returncode == 1 and '"backlog_full"' in out, out
    patient = connect(probe, quick, s.uri, "--retries", "20", "--retry-backoff", "100")
    out, _ = patient.communicate(timeout=30)
    assert patient.returncode == 0, out
    first.communicate(timeout=20)
    c = final_counters(s)
    assert c["accepted"] == 2 and c["overflow_rejected"] >= 2, c
    assert c["high_water"] == 1


def _silent_rev1_peer(address: str) -> socket.socket:
    """A peer that completes MPA setup (a revision-1 Request with CRC, as rev1-only asks, and
    the whole Reply read) and then says nothing: setup is complete, no RTR is due in revision
    1, and the responder's exchange waits for this peer's first message."""
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    pd = b"silent"
    # RFC 5044 s7.1: key, flags (C = 0x40), revision 1, PD_Length, private data.
    sock.sendall(b"MPA ID Req Frame" + bytes([0x40, 1]) + len(pd).to_bytes(2, "big") + pd)
    reply = b""
    while len(reply) < 20 or len(reply) < 20 + int.from_bytes(reply[18:20], "big"):
        chunk = sock.recv(4096)
        assert chunk, f"closed during setup after {reply!r}"
        reply += chunk
    assert reply.startswith(b"MPA ID Rep Frame") and not reply[16] & 0x20, reply  # not a Reject
    return sock


def test_silent_peers_do_not_keep_a_legitimate_client_out(
        probe: Path, personality: Any, serve: Any) -> None:
    # Issue 17: serve took one connection at a time, so nine initiators that completed setup
    # and then said nothing held a --backlog 8 server for about 30 s per round. Now it serves
    # up to --backlog connections at once and cuts a silent one after --idle-timeout: nine
    # silent peers fill the 8 workers and one backlog slot, and the legitimate client is
    # served within about one idle timeout.
    quick = personality("rev1-only")
    s = serve(quick, "--backlog", "8", "--idle-timeout", "2")
    silent = [_silent_rev1_peer(s.address) for _ in range(9)]
    try:
        started = time.monotonic()
        legit = connect(probe, quick, s.uri, "--timeout", "20")
        out, _ = legit.communicate(timeout=30)
        waited = time.monotonic() - started
        assert legit.returncode == 0, out
        assert waited < 6.0, waited  # at most two idle timeouts (2 s), not nine exchanges
    finally:
        for sock in silent:
            sock.close()
    events = []
    while len(events) < 10:
        event = s.next_event(timeout=10)
        if event.get("event") == "connection":
            events.append(event)
    cut = [e for e in events if not e["ok"]]
    assert len(cut) == 9, events
    details = [e["error"]["detail"] for e in cut]
    assert sum("silent" in d for d in details) >= 8, details
    assert sum(e["ok"] for e in events) == 1
