"""Unchanged programs over streams: python3 -m http.server and a urllib client, each run
under the stream preload (rdma_interop.stream_run) or not, in two namespace hosts. The
preload's log (RDMA_STREAM_LOG) says what each socket turned out to be."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rdma_interop.lab import NamespaceHost, NamespaceLab
from tests.stream.stream_support import PythonRunner, log_lines, random_file, stop, wait_for_line

FILE_SIZE = 4 * 1024 * 1024

# The client: urllib as any program uses it, two fetches in one process, one digest a line.
FETCH_TWICE = """
import hashlib, sys, urllib.request
for _ in range(2):
    with urllib.request.urlopen(sys.argv[1], timeout=60) as response:
        print(hashlib.sha256(response.read()).hexdigest())
"""


@contextmanager
def http_server(python: PythonRunner, host: NamespaceHost, directory: Path, port: int, *,
                preload: bool, log: Path) -> Iterator[str]:
    """python3 -m http.server serving `directory` on host:port; yields its URL prefix."""
    proc = python.start(
        host, ["-m", "http.server", "--bind", host.address, "--directory", str(directory),
               str(port)], preload=preload, log=log)
    try:
        wait_for_line(proc, "Serving HTTP")
        yield f"http://{host.address}:{port}"
    finally:
        stop(proc)


def fetch_twice(python: PythonRunner, host: NamespaceHost, url: str, *, preload: bool,
                log: Path) -> list[str]:
    return python.run(host, ["-c", FETCH_TWICE, url], preload=preload, log=log).stdout.split()


def test_http_server_and_urllib_both_preloaded_go_over_one_session(
        lab: NamespaceLab, python: PythonRunner, tmp_path: Path) -> None:
    served = random_file(tmp_path / "random.bin", FILE_SIZE)
    server_log, client_log = tmp_path / "server.log", tmp_path / "client.log"
    with http_server(python, lab[0], tmp_path, 18080, preload=True, log=server_log) as url:
        digests = fetch_twice(python, lab[1], f"{url}/random.bin", preload=True, log=client_log)
    assert digests == [hashlib.sha256(served.read_bytes()).hexdigest()] * 2
    client = log_lines(client_log)
    assert [(c["kind"], c["how"]) for c in client] == [("upgraded", "upgrade"),
                                                        ("upgraded", "reuse")]
    assert [(s["kind"], s["how"]) for s in log_lines(server_log)] == [("upgraded", "upgrade")] * 2


def test_preloaded_client_falls_back_to_a_plain_http_server_and_remembers_it(
        lab: NamespaceLab, python: PythonRunner, tmp_path: Path) -> None:
    served = random_file(tmp_path / "random.bin", FILE_SIZE)
    server_log, client_log = tmp_path / "server.log", tmp_path / "client.log"
    with http_server(python, lab[0], tmp_path, 18081, preload=False, log=server_log) as url:
        digests = fetch_twice(python, lab[1], f"{url}/random.bin", preload=True, log=client_log)
    assert digests == [hashlib.sha256(served.read_bytes()).hexdigest()] * 2
    assert [(c["kind"], c["how"]) for c in log_lines(client_log)] == [("plain", "plain_peer"),
                                                                      ("plain", "cache")]
    assert log_lines(server_log) == []  # no preload there: it logs nothing


def test_plain_client_is_served_by_the_preloaded_http_server(
        lab: NamespaceLab, python: PythonRunner, tmp_path: Path) -> None:
    served = random_file(tmp_path / "random.bin", FILE_SIZE)
    server_log, client_log = tmp_path / "server.log", tmp_path / "client.log"
    with http_server(python, lab[0], tmp_path, 18082, preload=True, log=server_log) as url:
        digests = fetch_twice(python, lab[1], f"{url}/random.bin", preload=False, log=client_log)
    assert digests == [hashlib.sha256(served.read_bytes()).hexdigest()] * 2
    assert [(s["kind"], s["how"]) for s in log_lines(server_log)] == [("plain", "plain_client")] * 2
    assert log_lines(client_log) == []
