"""Waiting for what another process or thread reaches on its own time: poll with a
deadline, never sleep a fixed time (slow, and still a race on a loaded 2-core machine)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable


def eventually(check: Callable[[], object], timeout: float = 5.0,
               interval: float = 0.05) -> bool:
    """Calls `check` every `interval` seconds until it returns something true or `timeout`
    passes; says whether it did. `check` runs once more at the deadline, so a slow last step
    still counts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return bool(check())


def accepts_connections(host: str, port: int) -> bool:
    """Whether a TCP listener at host:port accepts a connection now (closed at once)."""
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        return True
    except OSError:
        return False
