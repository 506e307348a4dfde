"""Man pages and bash completion (issue 22), written by each tool from its own option
definitions at build time and installed with the tools: after `cmake --install --prefix`
every tool has its page in share/man/man1 and its script in share/bash-completion/completions;
`man -l` renders each page without a warning; the page lists every option --help lists (so
they cannot drift); and the completion offers each command's options and an option's values.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.tools import TOOLS

from .probe_support import PROBE

COMMANDS = {"rdma-probe": ["serve", "connect", "probe", "personalities", "xrc", "devices"],
            "rdma-mesh": ["node"], "rdma-stream": ["serve", "connect", "measure"]}


@pytest.fixture(scope="module")
def prefix(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if PROBE is None:
        pytest.skip("rdma-probe is not built")
    build = PROBE.parent.parent
    if not (build / "CMakeCache.txt").is_file():
        pytest.skip(f"{PROBE} is not in a CMake build tree")
    out = tmp_path_factory.mktemp("prefix")
    done = subprocess.run(["cmake", "--install", str(build), "--prefix", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def help_options(tool: Path, *command: str) -> set[str]:
    page = subprocess.run([str(tool), *command, "--help"], capture_output=True, text=True,
                          timeout=20).stdout
    return set(re.findall(r"(?m)^  (?:-\w, ?)?(--[\w-]+)", page))


@pytest.mark.parametrize("name", TOOLS)
def test_installed_with_its_man_page_and_completion(prefix: Path, name: str) -> None:
    assert (prefix / "bin" / name).is_file()
    assert (prefix / "share" / "man" / "man1" / f"{name}.1").is_file()
    assert (prefix / "share" / "bash-completion" / "completions" / name).is_file()


@pytest.mark.parametrize("name", TOOLS)
def test_man_renders_the_page_without_a_warning(prefix: Path, name: str) -> None:
    if shutil.which("man") is None:
        pytest.skip("man is not installed (tools/install-deps.sh installs man-db)")
    page = prefix / "share" / "man" / "man1" / f"{name}.1"
    env = {**os.environ, "MANWIDTH": "100", "MAN_KEEP_FORMATTING": "0", "LC_ALL": "C.UTF-8"}
    done = subprocess.run(["man", "--warnings", "-P", "cat", "-l", str(page)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # groff's warnings (-ww) land here
    text = re.sub(r".\x08", "", done.stdout)  # overstrike bold, if any
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "SEE ALSO"):
        assert re.search(rf"(?m)^{section}$", text), section
    assert re.search(rf"(?m)^ +{re.escape(name)} - ", text), text[:400]
    assert "\u2010" not in text  # no hyphenation: every option reads as typed
    tool = prefix / "bin" / name
    for command in [[]] + [[c] for c in COMMANDS.get(name, [])]:
        for option in help_options(tool, *command):
            # ASCII hyphens, so what the page shows can be typed as it reads.
            assert option in text, (command, option)


@pytest.mark.parametrize("name", TOOLS)
def test_apropos_style_name_line(prefix: Path, name: str) -> None:
    source = (prefix / "share" / "man" / "man1" / f"{name}.1").read_text()
    escaped = name.replace("-", "\\-")
    assert f".SH NAME\n{escaped} \\- " in source, source[:300]


def complete(prefix: Path, name: str, words: list[str]) -> list[str]:
    """What the installed completion offers for the command line `words` (the last one being
    completed), as bash would ask it."""
    script = prefix / "share" / "bash-completion" / "completions" / name
    function = "_rdma_interop_" + name.replace("-", "_")
    quoted = " ".join("'" + w + "'" for w in [name, *words])
    program = (f"source '{script}'\nCOMP_WORDS=({quoted})\nCOMP_CWORD={len(words)}\n"
               f"{function}\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True,
                          text=True, timeout=20)
    assert done.returncode == 0, done.stderr
    return [w for w in done.stdout.splitlines() if w]


def test_completion_offers_commands_options_and_values(prefix: Path) -> None:
    assert {"serve", "connect", "personalities"} <= set(complete(prefix, "rdma-probe", [""]))
    assert complete(prefix, "rdma-probe", ["serve", "--ov"]) == ["--overflow",
                                                                  "--overflow-timeout"]
    assert complete(prefix, "rdma-probe", ["serve", "--overflow", ""]) == ["drop", "reject"]
    assert "--retry-backoff-max" in complete(prefix, "rdma-probe", ["connect", "--retry"])
    assert complete(prefix, "rdma-storm", ["--retry-mode", ""]) == ["provider", "storm"]
    assert complete(prefix, "rdma-mesh", ["node", "--mode", "r"]) == ["request-reply"]
    assert "--connections" in complete(prefix, "backlog-stat", ["--con"])
    assert complete(prefix, "verbs-check", ["--ch"]) == ["--check"]
    # A value nothing can guess is not completed with options.
    assert complete(prefix, "rdma-probe", ["serve", "--listen", ""]) == []


@pytest.mark.parametrize("name", TOOLS)
def test_completion_offers_every_option_help_lists(prefix: Path, name: str) -> None:
    tool = prefix / "bin" / name
    for command in [[]] + [[c] for c in COMMANDS.get(name, [])]:
        offered = set(complete(prefix, name, [*command, "--"]))
        assert help_options(tool, *command) <= offered, (command, offered)
