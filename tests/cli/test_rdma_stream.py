"""rdma-stream (issue 24) on 127.0.0.1: serve, connect and measure, upgraded between two
rdma-streams and plain TCP with --no-upgrade or against a plain client; --json output that
parses; bad arguments (status 2), a connect to a closed port (3) and an address in use (5);
a server that ends cleanly on SIGTERM or after --max-connections.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.tools import tool_or_skip as tool

from .local_servers import free_port


def run(*args: Any, input: bytes | None = None, timeout: float = 60.0
        ) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(tool("rdma-stream")), *[str(a) for a in args]], input=input,
                          capture_output=True, timeout=timeout)


class Server:
    """`rdma-stream serve 127.0.0.1:0 --json ...`, its first line read for the port."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen([str(tool("rdma-stream")), "serve", "127.0.0.1:0", "--json",
                                      *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout is not None
        first = json.loads(self.proc.stdout.readline())
        assert first["event"] == "listening", first
        self.port: int = first["port"]
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> tuple[int, list[dict[str, Any]], str]:
        """SIGTERM; the exit status, every later JSON line and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=20)
        return self.proc.returncode, [json.loads(line) for line in out.splitlines()], err


@pytest.fixture
def serve() -> Iterator[Any]:
    started: list[Server] = []

    def start(*args: str) -> Server:
        s = Server(*args)
        started.append(s)
        return s

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.communicate()


def connections(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["event"] == "connection"]


def test_echo_through_connect_carries_stdin_back_upgraded(serve) -> None:
    server = serve("--mode", "echo")
    data = b"".join(b"line %d of the echo test\n" % i for i in range(20000))  # ~500 KiB
    done = run("connect", server.address, input=data)
    assert done.returncode == 0, done.stderr
    assert done.stdout == data
    assert b"upgraded" in done.stderr
    status, lines, _ = server.stop()
    assert status == 0
    [conn] = connections(lines)
    assert conn["how"] == "upgraded" and conn["end"] == "eof"
    assert conn["received"] == conn["sent"] == len(data)
    assert lines[-1]["event"] == "stopped" and lines[-1]["reason"] == "signal"


@pytest.mark.parametrize("side", ["client", "server"])
def test_no_upgrade_on_either_side_keeps_plain_tcp(serve, side: str) -> None:
    server = serve(*(["--no-upgrade"] if side == "server" else []))
    done = run("connect", *(["--no-upgrade"] if side == "client" else []), server.address,
               input=b"over tcp\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"over tcp\n"
    assert b"plain TCP" in done.stderr
    _, lines, _ = server.stop()
    assert [c["how"] for c in connections(lines)] == ["plain"]


def test_a_plain_tcp_client_is_served_every_octet(serve) -> None:
    server = serve("--mode", "echo")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(4096):
            got += chunk
    assert got == b"GET / HTTP/1.0\r\n\r\n"
    _, lines, _ = server.stop()
    assert [c["how"] for c in connections(lines)] == ["plain"]


@pytest.mark.parametrize("mode, serve_mode, rate", [
    ("throughput", "discard", "bits_per_second"),
    ("rr", "echo", "round_trips_per_second"),
    ("open", "echo", "opens_per_second"),
])
@pytest.mark.parametrize("upgrade", [True, False], ids=["upgraded", "no-upgrade"])
def test_measure_json_parses_and_measured_something(serve, mode: str, serve_mode: str,
                                                     rate: str, upgrade: bool) -> None:
    server = serve("--mode", serve_mode)
    done = run("measure", server.address, "--mode", mode, "--seconds", "500ms", "--streams", "2",
               "--progress", "100ms", "--json", *([] if upgrade else ["--no-upgrade"]))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "rdma-interop/stream-measure/1" and doc["mode"] == mode
    assert doc["how"] == ("upgraded" if upgrade else "plain")
    assert doc[rate] > 0 and doc["error"] is None and doc["streams"] == 2
    assert b"/s" in done.stderr  # progress lines
    if upgrade:
        assert doc["node"]["sessions"] == 1, "every stream over the first one's session"
    status, lines, _ = server.stop()
    assert status == 0
    assert {c["how"] for c in connections(lines)} == {"upgraded" if upgrade else "plain"}


def test_measure_prints_one_summary_line_without_json(serve) -> None:
    server = serve("--mode", "echo")
    done = run("measure", server.address, "--mode", "rr", "--seconds", "200ms", "--progress", "0")
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.decode().splitlines()
    assert line.startswith("round trips to ") and "upgraded" in line


def test_a_connect_to_a_closed_port_is_unreachable() -> None:
    port = free_port()
    for command in (["connect", f"127.0.0.1:{port}"], ["measure", f"127.0.0.1:{port}"]):
        done = run(*command, input=b"")
        assert done.returncode == 3, done
        assert b"refused" in done.stderr.lower(), done.stderr
        assert done.stdout == b""
    # With --json the document still comes, saying what failed, as every tool's does.
    done = run("measure", f"127.0.0.1:{port}", "--json")
    assert done.returncode == 3, done
    doc = json.loads(done.stdout)
    assert doc["schema"] == "rdma-interop/stream-measure/1", doc
    assert "refused" in doc["error"].lower() and doc["octets"] == 0, doc


def test_an_address_in_use_cannot_be_served(serve) -> None:
    server = serve()
    done = run("serve", server.address, timeout=20)
    assert done.returncode == 5, done
    assert b"in use" in done.stderr.lower(), done.stderr


@pytest.mark.parametrize("args", [
    [],
    ["serve"],
    ["connect", "127.0.0.1"],
    ["connect", "127.0.0.1:0"],
    ["connect", "127.0.0.1:70000"],
    ["connect", "tcp://127.0.0.1:1"],  # a URI where HOST:PORT goes
    ["measure", "127.0.0.1:9", "--mode", "fast"],
    ["measure", "127.0.0.1:9", "--seconds", "nan"],
    ["measure", "127.0.0.1:9", "--streams", "0"],
    ["serve", "127.0.0.1:0", "--max-connections", "0"],
    ["serve", "127.0.0.1:0", "--mode", "chargen"],
])
def test_bad_arguments_are_a_usage_error(args: list[str]) -> None:
    done = run(*args, timeout=20)
    assert done.returncode == 2, done
    assert done.stdout == b""


def test_max_connections_ends_the_server_by_itself(serve) -> None:
    server = serve("--max-connections", "2")
    for i in range(2):
        done = run("connect", server.address, input=b"%d\n" % i)
        assert done.returncode == 0 and done.stdout == b"%d\n" % i, done.stderr
    server.proc.wait(timeout=20)
    status, lines, _ = server.stop()
    assert status == 0
    assert len(connections(lines)) == 2
    assert lines[-1] == {"event": "stopped", "connections": 2, "upgraded": 2, "plain": 0,
                         "reason": "max-connections"}


def test_sigterm_ends_a_server_with_an_open_connection_cleanly(serve) -> None:
    server = serve()
    # A client that connects and then waits: the server must close it and end anyway.
    client = subprocess.Popen([str(tool("rdma-stream")), "connect", server.address],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert client.stderr is not None
    assert b"connected" in client.stderr.readline()
    status, lines, err = server.stop()
    assert status == 0, err
    [conn] = connections(lines)
    assert conn["end"] == "stopped"
    # The server's end of stream ends the client too, its standard input still open (as nc).
    assert client.wait(timeout=20) == 0
    for pipe in (client.stdin, client.stdout, client.stderr):
        pipe.close()  # type: ignore[union-attr]


def test_sigint_cuts_a_measure_short_with_what_it_measured(serve) -> None:
    server = serve("--mode", "echo")
    measure = subprocess.Popen([str(tool("rdma-stream")), "measure", server.address, "--mode", "rr",
                                "--seconds", "60", "--progress", "100ms", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert measure.stderr is not None
    assert "measuring" in measure.stderr.readline()
    assert "round trips/s" in measure.stderr.readline()  # it is running
    measure.send_signal(signal.SIGINT)
    out, err = measure.communicate(timeout=30)
    assert measure.returncode == 1, err
    doc = json.loads(out)
    assert doc["stopped_by_signal"] is True and doc["round_trips"] > 0
    assert doc["seconds"] < 60
