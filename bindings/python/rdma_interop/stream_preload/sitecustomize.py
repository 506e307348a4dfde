"""The stream preload: with this directory first on PYTHONPATH, a Python program's TCP sockets
are rdma_interop StreamSockets, as rsockets' librspreload makes a C program's sockets
rsockets, and the program is not changed.

Python imports the first ``sitecustomize`` on sys.path at startup (the site module), so this
file runs before the program. It replaces ``socket.socket`` with a subclass whose AF_INET
SOCK_STREAM instances are StreamSockets (so socket.create_connection, socketserver,
http.server, http.client and urllib get them); every other socket (AF_UNIX, AF_INET6, UDP,
one made from a descriptor, and subclasses such as ssl.SSLSocket) stays a real one.

Only IPv4 is taken over: ``python3 -m http.server`` without ``--bind ADDRESS`` listens on
``::`` (AF_INET6), which stays a real socket, so its clients are never upgraded. A process
that forks after its first StreamSocket must not use the parent's sockets in the child: the
node's threads are the parent's.

``python3 -m rdma_interop.stream_run CMD ARGS...`` sets PYTHONPATH up and execs CMD. The
environment variables of rdma_interop.stream_socket configure the node; RDMA_STREAM_LOG
names a file that gets one JSON line per socket opened. RDMA_STREAM_PRELOAD_DEBUG=1 says on
stderr when the preload is active.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

_real_socket = socket.socket


def _wants_stream(family: int, type: int, fileno: int | None) -> bool:
    if fileno is not None:
        return False
    family = socket.AF_INET if family == -1 else family
    type = socket.SOCK_STREAM if type == -1 else type
    kind = type & ~(socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
    return family == socket.AF_INET and kind == socket.SOCK_STREAM


class PreloadSocket(_real_socket):
    """socket.socket while the preload is on: a StreamSocket for AF_INET SOCK_STREAM."""

    def __new__(cls, family: int = -1, type: int = -1, proto: int = -1,
                fileno: int | None = None) -> Any:
        if cls is PreloadSocket and _wants_stream(family, type, fileno):
            from rdma_interop.stream_socket import StreamSocket

            return StreamSocket(socket.AF_INET, type if type != -1 else socket.SOCK_STREAM,
                                0 if proto == -1 else proto)
        # _socket.socket.__new__ takes socket()'s arguments (typeshed says object's).
        return super().__new__(cls, family, type, proto, fileno)  # type: ignore[call-arg]


def _install() -> None:
    socket.socket = PreloadSocket  # type: ignore[misc]
    if os.environ.get("RDMA_STREAM_PRELOAD_DEBUG") == "1":
        print(f"rdma_interop stream preload active in pid {os.getpid()}", file=sys.stderr)


def _chain() -> None:
    """Runs the sitecustomize this file shadows (Debian's, in /etc/python3.X), if any."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # as site.py treats a failing sitecustomize: say so, go on
        print(f"Error in shadowed sitecustomize; set PYTHONVERBOSE for traceback:\n{e!r}",
              file=sys.stderr)


_install()
_chain()
