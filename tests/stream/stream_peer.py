"""One side of a stream-tier scenario, run in a namespace host through the Python API
(rdma_interop.stream_socket): `stream_peer.py ROLE ARGS...`. Servers print {"ready": port}
once they listen; every role prints its result as one JSON line on stdout and exits 0, or
exits 1 with the error on stderr.

    serve-digest HOST PORT            accept one; read to EOF; send back sha256 and length
    send-random HOST PORT SEED TOTAL  send TOTAL octets in random 1..256 KiB sends; SHUT_WR;
                                      read the digest; report it and the session's counters
    serve-urgent HOST PORT            accept one; for each urgent octet, how many in-band
                                      octets came before its mark; ack each
    send-urgent HOST PORT             100 octets + urgent "!", then 1 MiB + urgent "?"
    serve-half-close HOST PORT        read to EOF, then answer and close
    half-close HOST PORT              send, SHUT_WR, read the answer after our EOF
    serve-stalled HOST PORT           accept two; never read the first ("A"), digest the second
    stalled HOST PORT                 fill A until it takes no more; 8 MiB on B meanwhile
    serve-echo HOST PORT N            a selectors echo server for N streams
    echo HOST PORT N                  N streams at once through the echo server
"""

from __future__ import annotations

import hashlib
import json
import random
import selectors
import socket
import sys
import time
from typing import Any

from rdma_interop.stream_socket import StreamSocket, stream_node

KIB = 1024
MIB = 1024 * KIB


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def listening(host: str, port: int) -> StreamSocket:
    server = StreamSocket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((host, port))
    server.listen(64)
    say(ready=server.getsockname()[1])
    return server


def connected(host: str, port: int) -> StreamSocket:
    sock = StreamSocket()
    sock.settimeout(30)
    sock.connect((host, port))
    return sock


def read_to_eof(sock: StreamSocket) -> tuple[str, int]:
    digest, length = hashlib.sha256(), 0
    buf = bytearray(256 * KIB)
    while n := sock.recv_into(buf):
        digest.update(buf[:n])
        length += n
    return digest.hexdigest(), length


def session_counters() -> dict[str, int]:
    node = stream_node()
    total: dict[str, int] = {}
    for sid in node.sessions():
        counters = node.session_counters(sid)
        if counters is None:
            continue
        for field in counters._fields:
            total[field] = total.get(field, 0) + getattr(counters, field)
    return total


def serve_digest(host: str, port: int) -> None:
    with listening(host, port) as server:
        conn, _ = server.accept()
        conn.settimeout(60)
        digest, length = read_to_eof(conn)
        conn.sendall(json.dumps({"sha256": digest, "length": length}).encode())
        conn.close()
        say(sha256=digest, length=length, upgraded=conn.upgraded)


def send_random(host: str, port: int, seed: int, total: int) -> None:
    rng = random.Random(seed)
    digest, sizes = hashlib.sha256(), []
    with connected(host, port) as sock:
        sent = 0
        while sent < total:
            size = min(rng.randint(1, 256 * KIB), total - sent)
            chunk = rng.randbytes(size)
            sock.sendall(chunk)
            digest.update(chunk)
            sizes.append(size)
            sent += size
        sock.shutdown(socket.SHUT_WR)
        answer = json.loads(sock.makefile("rb").read())
        say(sent_sha256=digest.hexdigest(), sent=sent, sends=len(sizes), smallest=min(sizes),
            largest=max(sizes), received=answer, upgraded=sock.upgraded,
            counters=session_counters())


def urgent_and_before(sock: StreamSocket, deadline: float) -> tuple[bytes, int]:
    """The next urgent octet and how many in-band octets came before its mark. The in-band
    octets are read while it is awaited: its sender may be blocked on a full window."""
    before = 0
    octet = b""
    while not octet:
        try:
            octet = sock.recv(1, socket.MSG_OOB)  # EINVAL until it is there, as TCP says
        except OSError:
            if time.monotonic() > deadline:
                raise
            sock.settimeout(0.05)
            try:
                before += len(sock.recv(64 * KIB))  # never past a mark: reads stop there
            except TimeoutError:
                pass
            sock.settimeout(30)
    while not sock.at_mark():
        data = sock.recv(64 * KIB)
        assert data, "end of stream before the mark"
        before += len(data)
    return octet, before


def serve_urgent(host: str, port: int) -> None:
    marks = []
    with listening(host, port) as server:
        conn, _ = server.accept()
        conn.settimeout(30)
        for _ in range(2):
            octet, before = urgent_and_before(conn, time.monotonic() + 30)
            marks.append({"octet": octet.decode(), "before_mark": before})
            conn.sendall(b"k")
        rest = read_to_eof(conn)[1]
        conn.close()
    say(marks=marks, after=rest)


def send_urgent(host: str, port: int) -> None:
    with connected(host, port) as sock:
        sock.sendall(b"s" * 100)
        sock.send(b"!", socket.MSG_OOB)
        assert sock.recv(1) == b"k"
        sock.sendall(random.Random(7).randbytes(MIB))
        sock.send(b"?", socket.MSG_OOB)
        assert sock.recv(1) == b"k"
        sock.sendall(b"tail")
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""
        say(upgraded=sock.upgraded)


def serve_half_close(host: str, port: int) -> None:
    with listening(host, port) as server:
        conn, _ = server.accept()
        conn.settimeout(30)
        got = b""
        while data := conn.recv(4096):
            got += data
        conn.sendall(b"after your end: " + got)
        conn.close()
    say(got=got.decode())


def half_close(host: str, port: int) -> None:
    with connected(host, port) as sock:
        sock.sendall(b"ping")
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while data := sock.recv(4096):
            answer += data
        say(answer=answer.decode(), upgraded=sock.upgraded)


def serve_stalled(host: str, port: int) -> None:
    with listening(host, port) as server:
        streams = {}
        for _ in range(2):
            conn, _ = server.accept()
            conn.settimeout(30)
            streams[conn.recv(1, socket.MSG_PEEK)] = conn  # leaves A's octets all unread
        b = streams[b"B"]
        b.recv(1)
        digest, length = read_to_eof(b)
        b.sendall(json.dumps({"sha256": digest, "length": length}).encode() + b"\n")
        # A was never read while B went through; now it is, to the end its writer gives it
        # once it has seen it still blocked.
        a_length = read_to_eof(streams[b"A"])[1]
        streams[b"A"].close()
        b.close()
    say(b_length=length, a_length=a_length)


ROUNDS: list[int] = []


def fill(sock: StreamSocket) -> int:
    """Octets a non-blocking `sock` takes until it takes none, even after a pause (a window
    may widen late: the ACCEPT, a credit update)."""
    sock.setblocking(False)
    total = 0
    while True:
        took = 0
        try:
            while True:
                took += sock.send(b"a" * (64 * KIB))
        except BlockingIOError:
            pass
        total += took
        ROUNDS.append(took)
        if took == 0:
            return total
        time.sleep(0.3)


def stalled(host: str, port: int) -> None:
    a = connected(host, port)
    a.sendall(b"A")
    b = connected(host, port)
    b.sendall(b"B")
    stuck = fill(a)
    rng = random.Random(3)
    payload = rng.randbytes(8 * MIB)
    started = time.monotonic()
    b.sendall(payload)
    b.shutdown(socket.SHUT_WR)
    b_file = b.makefile("rb")
    answer = json.loads(b_file.readline())
    seconds = time.monotonic() - started
    # A's writer is held to what its window and send buffer take, however long B runs.
    stuck += fill(a)
    a.close()  # what A holds still goes; the server reads it all, then ends B
    assert b_file.read() == b""
    say(a_took=stuck, a_rounds=ROUNDS, b_seconds=seconds,
        b_ok=answer == {"sha256": hashlib.sha256(payload).hexdigest(), "length": len(payload)},
        upgraded=[a.upgraded, b.upgraded], hows=[a.how, b.how])
    b_file.close()
    b.close()


def serve_echo(host: str, port: int, n: int) -> None:
    server = listening(host, port)
    server.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(server, selectors.EVENT_READ)
    accepted = closed = 0
    upgraded = 0
    deadline = time.monotonic() + 60
    while closed < n and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            sock = key.fileobj
            if sock is server:
                try:
                    conn, _ = server.accept()
                except BlockingIOError:
                    continue
                conn.setblocking(False)
                accepted += 1
                upgraded += conn.upgraded
                sel.register(conn, selectors.EVENT_READ)
                continue
            assert isinstance(sock, StreamSocket)
            try:
                data = sock.recv(64 * KIB)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(sock)
                sock.close()
                closed += 1
                continue
            sock.setblocking(True)  # echo it whole: the client reads while it writes
            sock.settimeout(30)
            sock.sendall(data)
            sock.setblocking(False)
    say(accepted=accepted, closed=closed, upgraded=upgraded)
    server.close()


def echo(host: str, port: int, n: int) -> None:
    rng = random.Random(5)
    socks = [connected(host, port) for _ in range(n)]
    payloads = {s: rng.randbytes(rng.randint(1, 128 * KIB)) for s in socks}
    got = {s: bytearray() for s in socks}
    sel = selectors.DefaultSelector()
    for s in socks:
        s.sendall(payloads[s])
        s.shutdown(socket.SHUT_WR)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ)
    open_ = n
    deadline = time.monotonic() + 60
    while open_ and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=1):
            s = key.fileobj
            assert isinstance(s, StreamSocket)
            try:
                data = s.recv(64 * KIB)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(s)
                open_ -= 1
            got[s] += data
    say(streams=n, matched=sum(got[s] == payloads[s] for s in socks),
        hows=sorted(s.how for s in socks), upgraded=sum(s.upgraded for s in socks))
    for s in socks:
        s.close()


def main(argv: list[str]) -> int:
    role, host, port, *rest = argv
    roles = {
        "serve-digest": lambda: serve_digest(host, int(port)),
        "send-random": lambda: send_random(host, int(port), int(rest[0]), int(rest[1])),
        "serve-urgent": lambda: serve_urgent(host, int(port)),
        "send-urgent": lambda: send_urgent(host, int(port)),
        "serve-half-close": lambda: serve_half_close(host, int(port)),
        "half-close": lambda: half_close(host, int(port)),
        "serve-stalled": lambda: serve_stalled(host, int(port)),
        "stalled": lambda: stalled(host, int(port)),
        "serve-echo": lambda: serve_echo(host, int(port), int(rest[0])),
        "echo": lambda: echo(host, int(port), int(rest[0])),
    }
    roles[role]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
