"""Peers on 127.0.0.1 that are not ours, for the answers a tool gives about them: a port
nobody listens on, a port whose SYNs go unanswered, an HTTP server."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tests.support.paths import DEBIAN_PYTHON
from tests.support.waiting import accepts_connections, eventually


def free_port() -> int:
    """A port nobody listens on (free when asked; the kernel may hand it out later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def blackholed_port() -> Iterator[int]:
    """A port whose SYNs go unanswered: a listener with backlog 0 whose accept queue is full
    (Linux drops the SYN), as a blackholed port looks from the initiator."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(2):
        f = socket.socket()
        f.setblocking(False)
        f.connect_ex(("127.0.0.1", port))
        fillers.append(f)
    time.sleep(0.2)  # the fillers' handshakes complete and fill the queue
    try:
        yield port
    finally:
        for f in fillers:
            f.close()
        listener.close()


@contextmanager
def http_server() -> Iterator[int]:
    """Python's http.server on 127.0.0.1, accepting connections; yields its port."""
    port = free_port()
    proc = subprocess.Popen([DEBIAN_PYTHON, "-m", "http.server", "--bind", "127.0.0.1",
                             str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        eventually(lambda: accepts_connections("127.0.0.1", port), timeout=10)
        yield port
    finally:
        proc.kill()
        proc.wait()
