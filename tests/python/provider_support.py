"""What the provider, completion-queue and messaging tests share: their bounds on waiting,
payloads that show a misplaced octet, and completions collected with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from rdma_interop.provider import WorkCompletion

# Bounds on every wait: generous for a loaded 2-core machine, short next to MPA's own timers.
SETUP_MS = 5000
COMPLETION_MS = 5000

#: A connection's or a completion queue's poll_completions(max, timeout_ms).
Poll = Callable[[int, int], list[WorkCompletion]]


def pattern(seed: int, length: int) -> bytes:
    """Deterministic, position-dependent bytes, so a misplaced octet shows."""
    return bytes((seed * 131 + i * 7 + (i >> 8)) & 0xFF for i in range(length))


def collect(poll: Poll, count: int, timeout_ms: int = COMPLETION_MS) -> list[WorkCompletion]:
    """Exactly `count` completions from `poll(max, timeout_ms)` within timeout_ms, or the
    test fails saying what came."""
    deadline = time.monotonic() + timeout_ms / 1000
    got: list[WorkCompletion] = []
    while len(got) < count:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            pytest.fail(f"{len(got)} of {count} completions within {timeout_ms} ms: {got}")
        got += poll(count - len(got), min(left_ms, 200))
    return got
