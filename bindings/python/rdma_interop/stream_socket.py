"""TCP sockets that run over RDMA when both ends can (``core/stream/stream_socket.h``).

A :class:`StreamSocket` is the part of :class:`socket.socket` that real programs use, for
AF_INET SOCK_STREAM: bind, listen, accept, connect, connect_ex, send, sendall, recv, recv_into
(flags MSG_OOB and MSG_PEEK), makefile, shutdown, close, fileno, timeouts and blocking,
setsockopt/getsockopt, getsockname, getpeername, ``with``. Under it, a connect offers to
upgrade on an ordinary TCP connection to the very port: a server that answers (our listener)
gets a stream over an RDMA session, which later connects to that address reuse; any other
server stays a plain TCP connection, and is remembered as plain. A listener accepts both
kinds. :attr:`StreamSocket.upgraded` says which one a socket is, :attr:`StreamSocket.how`
how it came to be::

    with StreamSocket() as server:
        server.bind(("198.18.0.1", 8080)); server.listen()
        conn, addr = server.accept()          # a stream, or a plain TCP client
    sock = StreamSocket(); sock.connect(("198.18.0.1", 8080)); sock.sendall(b"hello")

Every socket of a process uses one :class:`~rdma_interop._core.StreamNode`, made on first
use from these environment variables (unset: the C++ default):

    RDMA_STREAM_SCHEME               the provider sessions run on (tcp)
    RDMA_STREAM_OFFER                0: connect() never offers (plain TCP always)
    RDMA_STREAM_ACCEPT_UPGRADES      0: listeners decline every offer
    RDMA_STREAM_ANSWER_TIMEOUT_MS    a server silent this long after our offer is plain
    RDMA_STREAM_OFFER_WAIT_MS        a client silent this long after connecting is plain
    RDMA_STREAM_MAX_MESSAGE, RDMA_STREAM_STREAM_WINDOW, RDMA_STREAM_SEND_BUFFER,
    RDMA_STREAM_ZERO_COPY_THRESHOLD, RDMA_STREAM_SINK_SIZE, RDMA_STREAM_RECEIVE_WINDOW
                                     the session's numbers (core/stream/stream_session.h)
    RDMA_STREAM_READER_WAIT_MS       a blocking large send waits this long for the reader
                                     rather than copy (core/stream/stream_endpoint.h)
    RDMA_STREAM_POLL_FIRST_US        a blocking call looks this long before it sleeps
    RDMA_STREAM_LOG                  a file: one JSON line appended per socket opened
                                     ({"kind", "how", "peer", "local", "pid"})

What the subset lacks raises :class:`UnsupportedSocketOperation` (an OSError, EOPNOTSUPP)
naming the call, never a silent difference.
"""

from __future__ import annotations

import _socket
import errno
import io
import json
import os
import select
import socket
import threading
from collections.abc import Callable
from typing import Any, Literal

from rdma_interop import _core

#: The JSON lines' "how": what a connect or an accept did.
#:   upgrade     our offer was answered: a new stream over a session (or, accepted, one came)
#:   reuse       a session already reached the address: one OPEN frame, no TCP handshake
#:   plain_peer  the server did not answer the offer: reconnected plain, and remembered
#:   cache       the server was remembered as plain: plain TCP without an offer
#:   declined    the server declined the offer: the TCP connection is the socket
#:   plain       offers are off (RDMA_STREAM_OFFER=0): plain TCP
#:   plain_client  accepted: a client that did not offer
HOWS = ("upgrade", "reuse", "plain_peer", "cache", "declined", "plain", "plain_client")

_ENV_NUMBERS = {
    "answer_timeout_ms": "RDMA_STREAM_ANSWER_TIMEOUT_MS",
    "offer_wait_ms": "RDMA_STREAM_OFFER_WAIT_MS",
    "max_message": "RDMA_STREAM_MAX_MESSAGE",
    "stream_window": "RDMA_STREAM_STREAM_WINDOW",
    "send_buffer": "RDMA_STREAM_SEND_BUFFER",
    "zero_copy_threshold": "RDMA_STREAM_ZERO_COPY_THRESHOLD",
    "sink_size": "RDMA_STREAM_SINK_SIZE",
    "receive_window": "RDMA_STREAM_RECEIVE_WINDOW",
    "reader_wait_ms": "RDMA_STREAM_READER_WAIT_MS",
    "poll_first_us": "RDMA_STREAM_POLL_FIRST_US",
}

# Options that shape a kernel TCP socket and mean nothing to a stream over a session (the
# session's connection sets its own): accepted and ignored, and getsockopt answers what was set.
_IGNORED_OPTIONS = {
    (socket.SOL_SOCKET, socket.SO_REUSEADDR),
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE),
    (socket.SOL_SOCKET, socket.SO_SNDBUF),
    (socket.SOL_SOCKET, socket.SO_RCVBUF),
    (socket.SOL_SOCKET, socket.SO_LINGER),
    (socket.IPPROTO_TCP, socket.TCP_NODELAY),
}
for _name in ("SO_REUSEPORT",):
    if hasattr(socket, _name):
        _IGNORED_OPTIONS.add((socket.SOL_SOCKET, getattr(socket, _name)))
for _name in ("TCP_KEEPIDLE", "TCP_KEEPINTVL", "TCP_KEEPCNT", "TCP_QUICKACK"):
    if hasattr(socket, _name):
        _IGNORED_OPTIONS.add((socket.IPPROTO_TCP, getattr(socket, _name)))
for _name in ("IPV6_V6ONLY",):
    if hasattr(socket, _name):
        _IGNORED_OPTIONS.add((socket.IPPROTO_IPV6, getattr(socket, _name)))

_SUPPORTED_FLAGS = socket.MSG_OOB | socket.MSG_PEEK


class UnsupportedSocketOperation(OSError):
    """A socket.socket call or argument outside StreamSocket's subset."""

    def __init__(self, what: str) -> None:
        super().__init__(errno.EOPNOTSUPP, f"StreamSocket does not support {what}")


# ---- the process's node -------------------------------------------------------------------

_node_lock = threading.Lock()
_node: _core.StreamNode | None = None


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def node_config_from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The StreamNode keywords the environment asks for (see the module docstring)."""
    env = dict(os.environ) if environ is None else environ
    config: dict[str, Any] = {}
    if env.get("RDMA_STREAM_SCHEME"):
        config["scheme"] = env["RDMA_STREAM_SCHEME"]
    for key, name in (("offer", "RDMA_STREAM_OFFER"),
                      ("accept_upgrades", "RDMA_STREAM_ACCEPT_UPGRADES")):
        if env.get(name):
            config[key] = env[name].strip().lower() not in ("0", "false", "no", "off")
    for key, name in _ENV_NUMBERS.items():
        if env.get(name):
            try:
                config[key] = int(env[name])
            except ValueError:
                raise ValueError(f"{name}={env[name]!r} is not a whole number") from None
    return config


def stream_node() -> _core.StreamNode:
    """The process's StreamNode, made on first use from the environment."""
    global _node
    with _node_lock:
        if _node is None:
            _node = _core.StreamNode(**node_config_from_env())
        return _node


def _log(kind: str, how: str, peer: str, local: str) -> None:
    path = os.environ.get("RDMA_STREAM_LOG")
    if not path:
        return
    line = json.dumps({"kind": kind, "how": how, "peer": peer, "local": local,
                       "pid": os.getpid()})
    # One write of one line in append mode: lines from threads and processes do not interleave.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _address(text: str) -> tuple[str, int]:
    """("host", port) from "host:port"; ("0.0.0.0", 0) for what is no address ("session 3")."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return ("0.0.0.0", 0)
    return (host, int(port))


def _check_address(address: object) -> tuple[str, int]:
    if (not isinstance(address, tuple) or len(address) != 2 or not isinstance(address[0], str)
            or not isinstance(address[1], int)):
        raise TypeError(f"AF_INET address must be a (host, port) tuple, not {address!r}")
    host = address[0] or "0.0.0.0"
    if not 0 <= address[1] <= 65535:
        raise OverflowError("port must be 0-65535.")
    return (host, address[1])


# ---- the socket ---------------------------------------------------------------------------

class StreamSocket:
    """An AF_INET SOCK_STREAM socket over the process's StreamNode (see the module)."""

    def __init__(self, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM,
                 proto: int = 0, fileno: int | None = None) -> None:
        if family != socket.AF_INET:
            raise UnsupportedSocketOperation(f"family {family!r} (AF_INET only)")
        flags = type & (socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC)
        if type & ~flags != socket.SOCK_STREAM:
            raise UnsupportedSocketOperation(f"type {type!r} (SOCK_STREAM only)")
        if proto not in (0, socket.IPPROTO_TCP):
            raise UnsupportedSocketOperation(f"proto {proto!r}")
        if fileno is not None:
            raise UnsupportedSocketOperation("wrapping an existing descriptor (fileno=)")
        self._timeout: float | None = None if not type & socket.SOCK_NONBLOCK else 0.0
        if self._timeout is None and socket.getdefaulttimeout() is not None:
            self._timeout = socket.getdefaulttimeout()
        self._sock: _core.Socket | None = None
        self._listener: _core.StreamListener | None = None
        self._accept_poll: select.epoll | None = None
        self._bound: tuple[str, int] | None = None
        self._reserved: _socket.socket | None = None  # holds the bound port until listen()
        self._options: dict[tuple[int, int], int | bytes] = {}
        self._how = ""
        self._closed = False    # close() was called
        self._released = False  # ... and the connection let go (no makefile() left open)
        self._io_refs = 0  # makefile()s still open: the socket closes after the last one

    # -- what it is ------------------------------------------------------------------------
    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET

    @property
    def type(self) -> socket.SocketKind:
        return socket.SOCK_STREAM

    @property
    def proto(self) -> int:
        return 0

    @property
    def upgraded(self) -> bool:
        """True when this connection runs as a stream over an RDMA session."""
        return self._sock is not None and self._sock.upgraded

    @property
    def how(self) -> str:
        """How the connection came to be (HOWS); "" for one not connected."""
        return self._how

    def __repr__(self) -> str:
        state = ("closed" if self._closed else "listening" if self._listener
                 else self._sock.describe() if self._sock else "unconnected")
        return f"<StreamSocket {state}>"

    def __enter__(self) -> StreamSocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        # Only reached for names this class does not have: socket.socket's others.
        if hasattr(socket.socket, name):
            raise UnsupportedSocketOperation(f"{name}()")
        raise AttributeError(f"'StreamSocket' object has no attribute {name!r}")

    # -- timeouts --------------------------------------------------------------------------
    def settimeout(self, value: float | None) -> None:
        if value is not None:
            value = float(value)
            if value < 0:
                raise ValueError("Timeout value out of range")
        self._timeout = value

    def gettimeout(self) -> float | None:
        return self._timeout

    def setblocking(self, flag: bool) -> None:
        self._timeout = None if flag else 0.0

    def getblocking(self) -> bool:
        return self._timeout != 0.0

    def _timeout_ms(self) -> int:
        if self._timeout is None:
            return -1
        return 0 if self._timeout == 0 else max(1, int(self._timeout * 1000))

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """fn(..., timeout_ms=...), a timeout raised as socket.timeout as socket.socket does."""
        try:
            return fn(*args, timeout_ms=self._timeout_ms(), **kwargs)
        except BlockingIOError:
            if self._timeout:
                raise TimeoutError("timed out") from None
            raise

    # -- options ---------------------------------------------------------------------------
    def setsockopt(self, level: int, optname: int, value: int | bytes | None,
                   optlen: int | None = None) -> None:
        if (level, optname) not in _IGNORED_OPTIONS:
            raise UnsupportedSocketOperation(f"setsockopt({level}, {optname})")
        self._options[(level, optname)] = 0 if value is None else value

    def getsockopt(self, level: int, optname: int, buflen: int | None = None) -> int | bytes:
        if (level, optname) == (socket.SOL_SOCKET, socket.SO_ERROR):
            return 0
        if (level, optname) == (socket.SOL_SOCKET, socket.SO_TYPE):
            return int(socket.SOCK_STREAM)
        if (level, optname) not in _IGNORED_OPTIONS:
            raise UnsupportedSocketOperation(f"getsockopt({level}, {optname})")
        value = self._options.get((level, optname), 0)
        if buflen is not None and isinstance(value, int):
            return value.to_bytes(buflen, "little")[:buflen]
        return value

    # -- server side -----------------------------------------------------------------------
    def bind(self, address: tuple[str, int]) -> None:
        self._check_open()
        if self._bound is not None or self._sock is not None:
            raise OSError(errno.EINVAL, "Invalid argument")
        host, port = _check_address(address)
        # A real socket holds the address until listen(): the errors come where a program
        # expects them (EADDRINUSE at bind), and port 0 gets its port now (getsockname).
        # (_socket's own class: socket.socket may be the preload's, which would make this one
        # a StreamSocket.)
        reserved = _socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            reserved.bind((host, port))
        except BaseException:
            reserved.close()
            raise
        self._reserved = reserved
        self._bound = (host, reserved.getsockname()[1])

    def listen(self, backlog: int = 128) -> None:
        self._check_open()
        if self._listener is not None:
            return
        if self._sock is not None:
            raise OSError(errno.EINVAL, "Invalid argument")
        if self._bound is None:
            self.bind(("0.0.0.0", 0))
        assert self._bound is not None and self._reserved is not None
        self._reserved.close()
        self._reserved = None
        host, port = self._bound
        self._listener = stream_node().listen(host, port, max(1, backlog))
        # One descriptor for selectors: readable when either kind of client waits.
        self._accept_poll = select.epoll()
        for fd in self._listener.filenos():
            self._accept_poll.register(fd, select.EPOLLIN)

    def accept(self) -> tuple[StreamSocket, tuple[str, int]]:
        listener = self._check_listening()
        sock = self._call(listener.accept)
        conn = StreamSocket()
        conn._sock = sock
        conn._timeout = None if socket.getdefaulttimeout() is None else socket.getdefaulttimeout()
        conn._how = sock.how
        _log("upgraded" if sock.upgraded else "plain", conn._how, sock.peer, sock.local)
        return conn, _address(sock.peer)

    # -- client side -----------------------------------------------------------------------
    def connect(self, address: tuple[str, int]) -> None:
        self._check_open()
        if self._listener is not None or self._sock is not None:
            raise OSError(errno.EISCONN, "Transport endpoint is already connected")
        if self._bound is not None:
            raise UnsupportedSocketOperation("bind() before connect() (a source address)")
        host, port = _check_address(address)
        node = stream_node()
        # The socket's timeout bounds the setup. A non-blocking socket's connect waits for the
        # setup too (it cannot be resumed later), as if EINPROGRESS had finished at once: a
        # program that then waits for writability finds it writable.
        timeout_ms = -1 if not self._timeout else max(1, int(self._timeout * 1000))
        try:
            sock = node.connect(host, port, timeout_ms)
        except BlockingIOError:
            raise TimeoutError("timed out") from None
        self._sock = sock
        self._how = sock.how
        _log("upgraded" if sock.upgraded else "plain", self._how, f"{host}:{port}", sock.local)

    def connect_ex(self, address: tuple[str, int]) -> int:
        try:
            self.connect(address)
        except TimeoutError:
            return errno.ETIMEDOUT
        except OSError as e:
            if isinstance(e, UnsupportedSocketOperation) or e.errno is None:
                raise
            return e.errno
        return 0

    # -- data ------------------------------------------------------------------------------
    def send(self, data: Any, flags: int = 0) -> int:
        sock = self._check_connected()
        self._check_flags(flags, socket.MSG_OOB)
        return int(self._call(sock.send, data, urgent=bool(flags & socket.MSG_OOB)))

    def sendall(self, data: Any, flags: int = 0) -> None:
        sock = self._check_connected()
        self._check_flags(flags, socket.MSG_OOB)
        with memoryview(data) as view, view.cast("B") as octets:
            # MSG_OOB: the last octet is the urgent one (TCP's urgent pointer), the others go
            # in band before it.
            urgent = 1 if flags & socket.MSG_OOB and len(octets) > 0 else 0
            sent, end = 0, len(octets) - urgent
            while sent < end:
                sent += self._call(sock.send, octets[sent:end])
            if urgent:
                self._call(sock.send, octets[end:], urgent=True)

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        sock = self._check_connected()
        self._check_flags(flags, _SUPPORTED_FLAGS)
        if bufsize < 0:
            raise ValueError("negative buffersize in recv")
        return bytes(self._call(sock.recv, bufsize, urgent=bool(flags & socket.MSG_OOB),
                                peek=bool(flags & socket.MSG_PEEK)))

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        sock = self._check_connected()
        self._check_flags(flags, _SUPPORTED_FLAGS)
        if nbytes < 0:
            raise ValueError("negative buffersize in recv_into")
        with memoryview(buffer) as view, view.cast("B") as octets:
            if len(octets) == 0:
                return 0
            return int(self._call(sock.recv_into, octets, nbytes,
                                  urgent=bool(flags & socket.MSG_OOB),
                                  peek=bool(flags & socket.MSG_PEEK)))

    def at_mark(self) -> bool:
        """True when the next octet read is the one the urgent octet followed (SIOCATMARK)."""
        return self._check_connected().at_mark()

    def makefile(self, mode: str = "r", buffering: int | None = None, *,
                 encoding: str | None = None, errors: str | None = None,
                 newline: str | None = None) -> Any:
        """A file object over the socket, built as socket.socket.makefile builds it."""
        if not set(mode) <= {"r", "w", "b"}:
            raise ValueError(f"invalid mode {mode!r} (only r, w, b allowed)")
        writing = "w" in mode
        reading = "r" in mode or not writing
        assert reading or writing
        binary = "b" in mode
        rawmode = ("r" if reading else "") + ("w" if writing else "")
        raw = StreamSocketIO(self, rawmode)
        self._io_refs += 1
        if buffering is None:
            buffering = -1
        if buffering < 0:
            buffering = io.DEFAULT_BUFFER_SIZE
        if buffering == 0:
            if not binary:
                raise ValueError("unbuffered streams must be binary")
            return raw
        buffer: Any  # BufferedRWPair is no IO[bytes] to typeshed, yet TextIOWrapper takes it
        if reading and writing:
            buffer = io.BufferedRWPair(raw, raw, buffering)
        elif reading:
            buffer = io.BufferedReader(raw, buffering)
        else:
            buffer = io.BufferedWriter(raw, buffering)
        if binary:
            return buffer
        text = io.TextIOWrapper(buffer, encoding, errors, newline)
        text.mode = mode  # type: ignore[misc]
        return text

    def _decref_socketios(self) -> None:
        if self._io_refs > 0:
            self._io_refs -= 1
        if self._closed and self._io_refs == 0:
            self._really_close()

    # -- ends ------------------------------------------------------------------------------
    def shutdown(self, how: int) -> None:
        sock = self._check_connected()
        if how not in (socket.SHUT_RD, socket.SHUT_WR, socket.SHUT_RDWR):
            raise OSError(errno.EINVAL, "Invalid argument")
        # SHUT_RD has no message on the wire, in TCP or here: the reader just stops.
        if how in (socket.SHUT_WR, socket.SHUT_RDWR):
            sock.shutdown_write()

    def close(self) -> None:
        """Lets go of the socket; with makefile()s open, once the last of them closes (as
        socket.socket does, which http.client relies on)."""
        self._closed = True
        if self._io_refs <= 0:
            self._really_close()

    def detach(self) -> int:
        raise UnsupportedSocketOperation("detach()")

    def _really_close(self) -> None:
        if self._released:
            return
        self._released = True
        if self._sock is not None:
            self._sock.close()
        if self._listener is not None:
            self._listener.close()
        if self._accept_poll is not None:
            self._accept_poll.close()
            self._accept_poll = None
        if self._reserved is not None:
            self._reserved.close()
            self._reserved = None

    def fileno(self) -> int:
        """Pollable: the TCP socket of a plain connection, the stream's eventfd of an upgraded
        one, an epoll descriptor over both kinds of waiting client for a listener; -1 once
        closed or before it is either."""
        if self._released:
            return -1
        if self._accept_poll is not None:
            return self._accept_poll.fileno()
        if self._sock is not None:
            return int(self._sock.fileno())
        return -1

    # -- addresses -------------------------------------------------------------------------
    def getsockname(self) -> tuple[str, int]:
        if self._listener is not None:
            return _address(self._listener.local)
        if self._sock is not None:
            return _address(self._sock.local)
        return self._bound or ("0.0.0.0", 0)

    def getpeername(self) -> tuple[str, int]:
        if self._sock is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return _address(self._sock.peer)

    def node_socket(self) -> _core.Socket | None:
        """The _core.Socket under this one (None: not connected)."""
        return self._sock

    # -- checks ----------------------------------------------------------------------------
    def _check_open(self) -> None:
        # As socket.socket: a socket closed with makefile()s open works until they close.
        if self._released:
            raise OSError(errno.EBADF, "Bad file descriptor")

    def _check_connected(self) -> _core.Socket:
        self._check_open()
        if self._sock is None:
            raise OSError(errno.ENOTCONN, "Transport endpoint is not connected")
        return self._sock

    def _check_listening(self) -> _core.StreamListener:
        self._check_open()
        if self._listener is None:
            raise OSError(errno.EINVAL, "Invalid argument")
        return self._listener

    @staticmethod
    def _check_flags(flags: int, allowed: int) -> None:
        if flags & ~allowed:
            raise UnsupportedSocketOperation(f"flags {flags:#x} (only MSG_OOB and MSG_PEEK)")


class StreamSocketIO(io.RawIOBase):
    """The raw file under StreamSocket.makefile(), as socket.SocketIO is under socket's."""

    def __init__(self, sock: StreamSocket, mode: Literal["r", "w", "rw"] | str) -> None:
        if mode not in ("r", "w", "rw"):
            raise ValueError(f"invalid mode: {mode!r}")
        super().__init__()
        self._sock: StreamSocket | None = sock
        self._reading = "r" in mode
        self._writing = "w" in mode
        self._timeout_occurred = False

    def readinto(self, b: Any) -> int | None:  # type: ignore[override]
        self._checkClosed()  # type: ignore[attr-defined]
        if not self._reading or self._sock is None:
            raise io.UnsupportedOperation("not readable")
        if self._timeout_occurred:
            raise OSError("cannot read from timed out object")
        try:
            return self._sock.recv_into(b)
        except TimeoutError:
            self._timeout_occurred = True
            raise
        except BlockingIOError:
            return None

    def write(self, b: Any) -> int | None:  # type: ignore[override]
        self._checkClosed()  # type: ignore[attr-defined]
        if not self._writing or self._sock is None:
            raise io.UnsupportedOperation("not writable")
        try:
            return self._sock.send(b)
        except BlockingIOError:
            return None

    def readable(self) -> bool:
        return self._reading and not self.closed

    def writable(self) -> bool:
        return self._writing and not self.closed

    def seekable(self) -> bool:
        return False

    def fileno(self) -> int:
        self._checkClosed()  # type: ignore[attr-defined]
        assert self._sock is not None
        return self._sock.fileno()

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        if self._sock is not None:
            self._sock._decref_socketios()
            self._sock = None
