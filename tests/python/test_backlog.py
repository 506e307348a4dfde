"""The listen backlog through the Python API: ListenOptions, the overflow Reject seen as
backlog_full, exact BacklogCounters, backlog events, and connect retries."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from rdma_interop.provider import (
    BACKLOG_FULL_MARKER,
    ConnectError,
    ListenOptions,
    MpaPolicy,
    Overflow,
    Provider,
    open_provider,
)

SETUP_MS = 5000


@pytest.fixture
def provider() -> Provider:
    return open_provider("tcp")


def test_overflow_reject_is_backlog_full_and_counted(provider: Provider) -> None:
    siw = MpaPolicy.from_personality("siw")
    with provider.listen("tcp://127.0.0.1:0", siw, options=ListenOptions(backlog=1)) as listener:
        with ThreadPoolExecutor(max_workers=1) as pool:
            first = pool.submit(provider.connect, listener.uri, siw)
            held = listener.next_request(timeout_ms=SETUP_MS)
            assert held is not None
            with pytest.raises(ConnectError) as info:
                provider.connect(listener.uri, siw, retries=2, retry_backoff_ms=1, retry_seed=3)
            error = info.value
            assert (error.kind, error.failure, error.attempts) == ("setup", "backlog_full", 3)
            assert error.peer_private_data == BACKLOG_FULL_MARKER == b"rdma-interop:backlog-full"
            held.accept()
            first.result(timeout=SETUP_MS / 1000).disconnect()
        c = listener.counters
        assert (c.backlog, c.requests, c.accepted, c.overflow_rejected) == (1, 4, 1, 3)
        assert c.high_water == 1 and c.tcp_accepted == 4
        assert c.invariants_hold(), c
        events = listener.take_backlog_events()
        assert [(e.type, e.reason) for e in events] == [
            ("backlog_added", "request"),
            ("backlog_removed", "accepted"),
        ]
        assert events[0].pending == 1 and events[1].pending == 0


def test_drop_policy_request_waits_for_the_freed_slot(provider: Provider) -> None:
    siw = MpaPolicy.from_personality("siw")
    options = ListenOptions(backlog=1, overflow=Overflow.DROP)
    with provider.listen("tcp://127.0.0.1:0", siw, options=options) as listener:
        with ThreadPoolExecutor(max_workers=2) as pool:
            first = pool.submit(provider.connect, listener.uri, siw)
            held = listener.next_request(timeout_ms=SETUP_MS)
            assert held is not None
            second = pool.submit(provider.connect, listener.uri, siw)
            assert listener.next_request(timeout_ms=300) is None  # waits unanswered
            assert listener.counters.overflow_waiting == 1
            held.accept()
            waited = listener.next_request(timeout_ms=SETUP_MS)
            assert waited is not None
            waited.accept()
            first.result(timeout=5).disconnect()
            second.result(timeout=5).disconnect()
        c = listener.counters
        assert (c.accepted, c.overflow_waiting, c.overflow_rejected) == (2, 0, 0)
        assert c.invariants_hold(), c
