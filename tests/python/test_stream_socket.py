"""rdma_interop.stream_socket on loopback, in this process: StreamSocket answers as
socket.socket does (its errors, timeouts, makefile, selectors), upgrades to a stream where
both ends are ours and stays plain TCP where the server is not; and the preload makes a
program's TCP sockets StreamSockets and nothing else. Between namespace hosts and with
unchanged programs: tests/stream."""

from __future__ import annotations

import errno
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import rdma_interop
from rdma_interop import _core
from rdma_interop.stream_socket import (
    StreamSocket,
    UnsupportedSocketOperation,
    node_config_from_env,
)


@pytest.fixture()
def log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "stream.log"
    monkeypatch.setenv("RDMA_STREAM_LOG", str(path))
    return path


@pytest.fixture()
def listener() -> Iterator[StreamSocket]:
    with StreamSocket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server


def echo_once(server: StreamSocket, results: list[object]) -> threading.Thread:
    """A thread that accepts one connection and echoes it upper-cased until its end."""

    def run() -> None:
        conn, addr = server.accept()
        with conn:
            results.append((conn.upgraded, conn.how, addr))
            while data := conn.recv(65536):
                conn.sendall(data.upper())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_second_connect_to_an_address_reuses_the_session(
        listener: StreamSocket, log: Path) -> None:
    address = listener.getsockname()
    assert address[1] != 0  # bind() already knows the port, as socketserver expects
    for expected_how in ("upgrade", "reuse"):
        results: list[object] = []
        thread = echo_once(listener, results)
        with StreamSocket() as sock:
            sock.settimeout(10)
            sock.connect(address)
            assert sock.upgraded and sock.how == expected_how
            sock.sendall(b"hello")
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(100) == b"HELLO"
        thread.join(10)
        assert results[0][:2] == (True, "upgrade")  # type: ignore[index]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["kind"], line["how"]) for line in lines if line["local"].startswith("session")] \
        == [("upgraded", "upgrade"), ("upgraded", "reuse")]


def test_a_plain_tcp_server_is_reached_plain_then_remembered() -> None:
    plain = socket.socket()
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    address = plain.getsockname()

    def serve() -> None:  # an ordinary TCP server that speaks first
        for _ in range(3):
            conn, _ = plain.accept()
            with conn:
                conn.sendall(b"220 plain\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    hows = []
    for _ in range(2):
        with StreamSocket() as sock:
            sock.settimeout(10)
            sock.connect(address)
            assert not sock.upgraded
            assert sock.makefile("rb").readline() == b"220 plain\r\n"
            hows.append(sock.how)
    plain.close()
    assert hows == ["plain_peer", "cache"]


def test_errors_are_the_oserror_subclasses_socket_raises(listener: StreamSocket) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    with StreamSocket() as sock, pytest.raises(ConnectionRefusedError):
        sock.connect(("127.0.0.1", port))
    with StreamSocket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) == errno.ECONNREFUSED
    results: list[object] = []
    thread = echo_once(listener, results)
    with StreamSocket() as sock:
        sock.connect(listener.getsockname())
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            sock.recv(10)
        sock.settimeout(0.05)
        with pytest.raises(socket.timeout):
            sock.recv(10)
        with pytest.raises(OSError) as caught:
            sock.recv(1, socket.MSG_OOB)  # no urgent octet
        assert caught.value.errno == errno.EINVAL
    thread.join(10)


def test_recv_into_takes_only_a_contiguous_buffer(listener: StreamSocket) -> None:
    """The extension writes one run of octets: a strided view is refused, not written past
    (StreamSocket's own cast refuses one first, as socket.socket does)."""
    results: list[object] = []
    thread = echo_once(listener, results)
    with StreamSocket() as sock:
        sock.connect(listener.getsockname())
        assert sock.upgraded
        sock.sendall(b"abcdefgh")
        core = sock._check_connected()  # the _core.Socket under it
        guard = bytearray(b"\xee" * 32)
        with pytest.raises(BufferError):
            core.recv_into(memoryview(guard)[8:18][::-1], timeout_ms=5000)
        with pytest.raises(BufferError):
            core.recv_into(memoryview(guard)[::2], timeout_ms=5000)
        assert guard == bytearray(b"\xee" * 32)
        with pytest.raises(TypeError):
            sock.recv_into(memoryview(guard)[::2])
        got = bytearray(8)
        n = 0
        while n < len(got):
            n += core.recv_into(memoryview(got)[n:], timeout_ms=5000)
        assert got == b"ABCDEFGH"
    thread.join(10)


def test_makefile_and_selectors_see_an_upgraded_stream(listener: StreamSocket) -> None:
    results: list[object] = []
    thread = echo_once(listener, results)
    with StreamSocket() as sock:
        sock.connect(listener.getsockname())
        assert sock.upgraded
        writer = sock.makefile("w", encoding="ascii")
        reader = sock.makefile("r", encoding="ascii")
        writer.write("line one\n")
        writer.flush()
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_READ)
            assert sel.select(timeout=10)
        assert reader.readline() == "LINE ONE\n"
        sock.close()  # the files keep it open, as socket.socket's do
        writer.write("two\n")
        writer.close()
        assert reader.readline() == "TWO\n"
        reader.close()
        assert sock.fileno() == -1
    thread.join(10)


def test_a_non_blocking_connect_completes(listener: StreamSocket) -> None:
    results: list[object] = []
    thread = echo_once(listener, results)
    with StreamSocket() as sock:
        sock.setblocking(False)
        assert sock.connect_ex(listener.getsockname()) == 0
        assert sock.upgraded and sock.getpeername() == listener.getsockname()
    thread.join(10)


def test_a_listener_polls_readable_only_while_a_client_waits(listener: StreamSocket) -> None:
    # socketserver selects on the listener, then accept()s blocking: a wake for nothing
    # would hold its loop (and shutdown()) until the next client.
    clients = []
    with selectors.DefaultSelector() as sel:
        sel.register(listener, selectors.EVENT_READ)
        assert sel.select(timeout=0.05) == []
        for _ in range(2):
            sock = StreamSocket()
            sock.connect(listener.getsockname())
            clients.append(sock)
            assert sel.select(timeout=10)
            conn, _ = listener.accept()
            assert conn.upgraded
            clients.append(conn)
            assert sel.select(timeout=0.05) == []
    for sock in clients:
        sock.close()


def test_what_the_subset_lacks_says_so() -> None:
    with StreamSocket() as sock:
        with pytest.raises(UnsupportedSocketOperation) as caught:
            sock.sendto(b"x", ("127.0.0.1", 9))
        assert caught.value.errno == errno.EOPNOTSUPP and "sendto" in str(caught.value)
        with pytest.raises(UnsupportedSocketOperation):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no meaning, accepted
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    with pytest.raises(UnsupportedSocketOperation):
        StreamSocket(socket.AF_INET6)
    with pytest.raises(UnsupportedSocketOperation):
        StreamSocket(socket.AF_INET, socket.SOCK_DGRAM)


def test_node_config_comes_from_the_environment() -> None:
    config = node_config_from_env({"RDMA_STREAM_OFFER": "0", "RDMA_STREAM_SINK_SIZE": "65536",
                                   "RDMA_STREAM_SCHEME": "tcp", "RDMA_STREAM_POLL_FIRST_US": "0",
                                   "RDMA_STREAM_READER_WAIT_MS": "5"})
    assert config == {"offer": False, "sink_size": 65536, "scheme": "tcp", "poll_first_us": 0,
                      "reader_wait_ms": 5}
    _core.StreamNode(**config).close()  # the numbers reach the node
    with pytest.raises(ValueError, match="RDMA_STREAM_SEND_BUFFER"):
        node_config_from_env({"RDMA_STREAM_SEND_BUFFER": "lots"})
    with pytest.raises(ValueError):
        _core.StreamNode(sink_size=1024 * 1024, stream_window=64 * 1024)  # sink > window


def test_preload_makes_tcp_sockets_stream_sockets_and_nothing_else() -> None:
    program = (
        "import socket, ssl\n"
        "print(type(socket.socket()).__name__,"
        " type(socket.socket(socket.AF_INET, socket.SOCK_DGRAM)).__name__,"
        " type(socket.socket(socket.AF_UNIX)).__name__,"
        " issubclass(ssl.SSLSocket, socket.socket))\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(rdma_interop.__file__).resolve().parent.parent)
    result = subprocess.run(
        [sys.executable, "-m", "rdma_interop.stream_run", sys.executable, "-c", program],
        env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["StreamSocket", "PreloadSocket", "PreloadSocket", "True"]
