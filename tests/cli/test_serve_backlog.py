"""rdma-probe serve's backlog flags as an operator uses them: a slow acceptor with backlog 1,
a second client over the backlog, and what each overflow policy does to it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from probe_support import ServeProcess


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
