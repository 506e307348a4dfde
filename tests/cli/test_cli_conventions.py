"""What every operator tool shares (issue 22): --version on each, --help laid out alike (no
CLI11 type tags, every line within 100 columns, no source paths an installed user cannot
follow, one "Options:" heading, an EXIT STATUS section in the words of the one table), one
meaning per short option across the tools, durations with a unit through one parser (a bare
number keeping the option's old unit), and range errors that read as numbers.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT
from tests.support.tools import TOOLS, tool_or_skip as tool

# Every --help page: (tool, arguments before --help).
HELP_PAGES = [
    ("rdma-probe", []), ("rdma-probe", ["serve"]), ("rdma-probe", ["connect"]),
    ("rdma-probe", ["probe"]), ("rdma-probe", ["personalities"]), ("rdma-probe", ["xrc"]),
    ("rdma-probe", ["devices"]), ("rdma-storm", []), ("rdma-mesh", []), ("rdma-mesh", ["node"]),
    ("backlog-stat", []), ("verbs-check", []), ("rdma-stream", []), ("rdma-stream", ["serve"]),
    ("rdma-stream", ["connect"]), ("rdma-stream", ["measure"]),
]
PAGE_IDS = [" ".join([tool, *args]) for tool, args in HELP_PAGES]

# tools/common/exit_status.h: the words for each number, the same in every tool.
EXIT_NAMES = {0: "ok", 1: "failed", 2: "bad arguments", 3: "unreachable", 4: "not an iWARP peer",
              5: "cannot run"}

# Paths into this source tree (tools/..., core/..., a header or source file of ours).
SOURCE_PATH = re.compile(r"(?<![\w/])(tools|core|bindings|tests)/[\w.-]+|\b[\w-]+\.(h|cc)\b")


def run(name: str, *args: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(tool(name)), *args], capture_output=True, text=True, timeout=timeout)


def help_page(name: str, args: list[str]) -> str:
    done = run(name, *args, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), f"{name} {args} --help printed nothing"
    return done.stdout


def option_lines(page: str) -> list[str]:
    """The option column of each option line ("  -p, --personality NAME|PATH")."""
    out = []
    for line in page.splitlines():
        if re.match(r"^  -", line):
            out.append(re.split(r"\s{2,}", line.strip())[0])
    return out


def exit_section(page: str) -> dict[int, str]:
    """{status: its line(s)} of the page's EXIT STATUS section."""
    lines = page.splitlines()
    assert lines.count("EXIT STATUS") == 1, page
    rows: dict[int, str] = {}
    current = None
    for line in lines[lines.index("EXIT STATUS") + 1:]:
        m = re.match(r"^  (\d)  (.*)$", line)
        if m:
            current = int(m.group(1))
            rows[current] = m.group(2)
        elif line.startswith("     ") and current is not None:
            rows[current] += " " + line.strip()
        else:
            break
    return rows


@pytest.mark.parametrize("name, args", HELP_PAGES, ids=PAGE_IDS)
def test_help_has_no_type_tags_and_fits_100_columns(name: str, args: list[str]) -> None:
    page = help_page(name, args)
    for line in page.splitlines():
        assert len(line) <= 100, f"{len(line)} columns: {line!r}"
    for option in option_lines(page):
        # CLI11 appends its validators' tags to the type: "N:POSITIVE", "x|y:{x,y}".
        assert ":" not in option, option
    for tag in ("POSITIVE", "NONNEGATIVE", "INTEGER in [", "NUMBER in [", "REQUIRED",
                "Excludes:", "Needs:"):
        assert tag not in page, tag


@pytest.mark.parametrize("name, args", HELP_PAGES, ids=PAGE_IDS)
def test_help_names_no_source_paths(name: str, args: list[str]) -> None:
    page = help_page(name, args)
    found = [m.group(0) for m in SOURCE_PATH.finditer(page)]
    assert not found, f"source paths an installed user cannot follow: {found}"


@pytest.mark.parametrize("name, args", HELP_PAGES, ids=PAGE_IDS)
def test_help_has_one_options_heading(name: str, args: list[str]) -> None:
    page = help_page(name, args)
    headings = [line for line in page.splitlines() if line.rstrip(":").lower() == "options"]
    assert headings == ["Options:"], headings


@pytest.mark.parametrize("name, args", HELP_PAGES, ids=PAGE_IDS)
def test_exit_status_is_one_heading_in_the_shared_words(name: str, args: list[str]) -> None:
    page = help_page(name, args)
    assert "EXIT CODES" not in page
    rows = exit_section(page)
    assert 0 in rows and 2 in rows, rows
    for status, text in rows.items():
        assert text.startswith(EXIT_NAMES[status]), (status, text)
    assert "the same numbers mean the same in every rdma-interop tool" in page


def project_version() -> str:
    text = (REPO_ROOT / "CMakeLists.txt").read_text()
    m = re.search(r"project\(rdma_interop VERSION (\S+)", text)
    assert m, "no project version in CMakeLists.txt"
    return m.group(1)


@pytest.mark.parametrize("name", TOOLS)
def test_every_tool_answers_version(name: str) -> None:
    done = run(name, "--version")
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert line.startswith(f"{name} {project_version()} (rdma-interop"), line
    assert done.stderr == ""
    # The same string everywhere: only the tool's name differs.
    assert line[len(name):] == run("rdma-probe", "--version").stdout.strip()[len("rdma-probe"):]


def test_storm_version_needs_no_uri() -> None:
    done = run("rdma-storm", "--version")
    assert done.returncode == 0
    assert "required" not in done.stdout + done.stderr


def test_each_short_option_means_one_thing_in_every_tool() -> None:
    meanings: dict[str, set[str]] = {}
    for name, args in HELP_PAGES:
        for option in option_lines(help_page(name, args)):
            m = re.match(r"^(-\w), ?(--[\w-]+)", option)
            if m:
                meanings.setdefault(m.group(1), set()).add(m.group(2))
    assert meanings, "no short option found"
    for short, longs in meanings.items():
        assert len(longs) == 1, f"{short} means {sorted(longs)}"
    assert meanings["-p"] == {"--personality"}
    assert meanings["-t"] == {"--timeout"}
    assert meanings["-c"] == {"--concurrency"}


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("value", ["500ms", "0.5s", "0.5"])
def test_connect_timeout_takes_a_unit_or_its_old_seconds(value: str) -> None:
    port = refused_port()
    done = run("rdma-probe", "connect", f"tcp://127.0.0.1:{port}", "-p", "siw", "--timeout",
               value, "--retries", "1", "--retry-backoff", "10ms", "--retry-backoff-max", "20")
    assert done.returncode == 3, done.stderr  # parsed, ran, and found nobody there


@pytest.mark.parametrize("hold", ["20ms", "20", "0.02s"])
def test_storm_durations_take_a_unit_or_their_old_units(hold: str) -> None:
    port = refused_port()
    done = run("rdma-storm", f"tcp://127.0.0.1:{port}", "-n", "2", "-c", "1", "--hold", hold,
               "--timeout", "1s", "--duration-limit", "1m", "--progress", "0")
    assert done.returncode == 3, done.stderr


def test_a_mesh_setup_timeout_in_ms_ends_the_setup_that_soon() -> None:
    ports = [refused_port(), refused_port()]
    start = time.monotonic()
    done = run("rdma-mesh", "node", "--name", "a", "--listen", f"tcp://127.0.0.1:{ports[0]}",
               "--peer", f"b=tcp://127.0.0.1:{ports[1]}", "--setup-timeout", "400ms",
               "--drain", "0", "--report-interval", "100ms", timeout=30)
    assert done.returncode == 1, done
    assert time.monotonic() - start < 5


def test_backlog_stat_watch_takes_a_unit(tmp_path: Path) -> None:
    watch = subprocess.Popen([str(tool("backlog-stat")), "--watch", "200ms", "--run-dir",
                              str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    time.sleep(0.7)
    watch.send_signal(signal.SIGINT)
    out, err = watch.communicate(timeout=5)
    assert watch.returncode == 0, err
    assert out.count("Every 0.2s: backlog-stat") >= 2, out


@pytest.mark.parametrize("name, args, option, bad", [
    ("rdma-probe", ["connect", "tcp://127.0.0.1:9", "-p", "siw"], "--timeout", "5x"),
    ("rdma-probe", ["serve", "--listen", "tcp://127.0.0.1:0", "-p", "siw"], "--accept-delay", "2h"),
    ("rdma-storm", ["tcp://127.0.0.1:9"], "--hold", "1.5ms"),
    ("rdma-mesh", ["node", "--name", "a", "--listen", "tcp://127.0.0.1:7380", "--peer",
                   "b=tcp://127.0.0.1:7381"], "--drain", "-1s"),
    ("verbs-check", ["verbs://127.0.0.1"], "--timeout", "0.5s"),
    ("backlog-stat", [], "--watch", "10ms"),
])
def test_a_bad_duration_names_its_bounds_as_durations(name: str, args: list[str], option: str,
                                                       bad: str) -> None:
    done = run(name, *args, f"{option}={bad}")
    assert done.returncode == 2, done
    assert option in done.stderr and f"'{bad}' is not a duration from " in done.stderr, done.stderr
    assert "a bare number is" in done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("name, args", [
    ("rdma-storm", ["tcp://127.0.0.1:9", "--attempts", "0"]),
    ("rdma-storm", ["tcp://127.0.0.1:9", "--progress", "99999h"]),
    ("rdma-storm", ["tcp://127.0.0.1:9", "--concurrency", "1e9"]),
    ("rdma-mesh", ["node", "--name", "a", "--listen", "tcp://127.0.0.1:7380", "--peer",
                   "b=tcp://127.0.0.1:7381", "--rate", "1e300"]),
    ("rdma-probe", ["serve", "--listen", "tcp://127.0.0.1:0", "--backlog", "70000"]),
    ("rdma-probe", ["serve", "--listen", "tcp://127.0.0.1:0", "--max-connections", "0"]),
    ("backlog-stat", ["--pid", "99999999999"]),
    ("verbs-check", ["verbs://127.0.0.1", "--port", "65535"]),
])
def test_range_errors_read_as_numbers(name: str, args: list[str]) -> None:
    done = run(name, *args)
    assert done.returncode == 2, done
    message = done.stderr.splitlines()[0]
    assert len(message) < 200, message
    assert not re.search(r"\d{13,}", message), message  # not 1797693134862315...
    assert "0.000000" not in message, message


def test_retry_backoff_is_one_definition_in_connect_and_storm() -> None:
    def described(page: str, option: str) -> str:
        lines = page.splitlines()
        start = next(i for i, line in enumerate(lines) if line.strip().startswith(option + " "))
        text = [lines[start].split("DURATION", 1)[1]]
        for line in lines[start + 1:]:
            if not line.startswith(" " * 10) or line.strip().startswith("-"):
                break
            text.append(line)
        return " ".join(" ".join(text).split())

    connect = help_page("rdma-probe", ["connect"])
    storm = help_page("rdma-storm", [])
    for option in ("--retry-backoff", "--retry-backoff-max"):
        a, b = described(connect, option), described(storm, option)
        # The same words, the tool's own default aside.
        assert re.sub(r"default \d+ms", "", a) == re.sub(r"default \d+ms", "", b), (a, b)
    assert "[0, min(MAX, BASE * 2^(n-1))]" in " ".join(connect.split())


def test_retry_backoff_max_caps_the_wait_in_both_tools() -> None:
    # Three retries with a base of 5 s would wait up to 35 s; capped at 10 ms they are quick.
    port = refused_port()
    start = time.monotonic()
    done = run("rdma-probe", "connect", f"tcp://127.0.0.1:{port}", "-p", "siw", "--retries", "3",
               "--retry-backoff", "5s", "--retry-backoff-max", "10ms", "--json")
    assert done.returncode == 3, done.stderr
    assert '"attempts":4' in done.stdout, done.stdout
    storm = run("rdma-storm", f"tcp://127.0.0.1:{port}", "-n", "1", "-c", "1", "--retries", "3",
                "--retry-mode", "storm", "--retry-backoff", "5s", "--retry-backoff-max", "10ms",
                "--progress", "0", "--json")
    assert storm.returncode == 3, storm.stderr
    assert '"tries":4' in storm.stdout, storm.stdout
    assert time.monotonic() - start < 5
