"""Fixtures for the kernel tier: one qemu guest with kernel siw and rxe for the session, and
the tier's one matrix (kernel_matrix.py), written at the end to $RDMA_INTEROP_RESULTS/kernel/
(default ./interop-results/kernel): matrix.txt, matrix.json, matrix-junit.xml (FINDINGs are
failures there only with RDMA_INTEROP_STRICT=1) and matrix.html.

Set RDMA_INTEROP_SKIP_KERNEL=1 to skip the tier in quick local loops; CI runs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rdma_interop.matrix import InteropMatrix
from rdma_interop.results import results_dir_problem
from rdma_interop.verdict import use_colour

from tests.support.guest import Guest, default_log_dir
from tests.support.paths import items_in, results_dir

from .kernel_matrix import GROUPS, LEGEND, PEERS, render

MATRIX_KEY = pytest.StashKey[InteropMatrix]()


def strict() -> bool:
    return os.environ.get("RDMA_INTEROP_STRICT") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kernel: needs the qemu guest with kernel siw/rxe")
    if not config.getoption("help") and not config.getoption("collectonly"):
        problem = results_dir_problem(results_dir("kernel"))
        if problem:
            raise pytest.UsageError(f"RDMA_INTEROP_RESULTS: {problem}")
    config.stash[MATRIX_KEY] = InteropMatrix(
        "Our stack against the Linux kernel's siw and rxe (qemu guest)", layout="checks",
        peers=PEERS, groups=GROUPS, legend=LEGEND)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = items_in(Path(__file__).parent, items)
    for item in ours:
        item.add_marker(pytest.mark.kernel)
    if os.environ.get("RDMA_INTEROP_SKIP_KERNEL") == "1":
        skip = pytest.mark.skip(reason="RDMA_INTEROP_SKIP_KERNEL=1")
        for item in ours:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def guest() -> Iterator[Guest]:
    g = Guest(log_dir=default_log_dir())
    g.start()
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture()
def live_guest(guest: Guest) -> Guest:
    """The session's guest, rebooted first if an earlier test crashed or hung it."""
    if not guest.alive():
        guest.restart()
    return guest


@pytest.fixture(scope="session")
def kernel_matrix(request: pytest.FixtureRequest, guest: Guest) -> InteropMatrix:
    """The kernel tier's matrix: tests add() a CaseResult per check they ran, with `group`,
    `check` and `peer` (one of PEERS) set, short notes, and the evidence (crash traces,
    frames). Written to interop-results/kernel/ at the end."""
    m = request.config.stash[MATRIX_KEY]
    m.environment["guest kernel"] = guest.kernel_version
    return m


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    m = session.config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    out = results_dir("kernel")
    m.write_json(out / "matrix.json")
    m.write_junit(out / "matrix-junit.xml", strict=strict())
    (out / "matrix.txt").write_text(render(m))
    m.write_html(out / "matrix.html", strict=strict())


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int,
                            config: pytest.Config) -> None:
    m = config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    terminalreporter.write_sep("=", "kernel interop matrix")
    colour = use_colour(markup=config.get_terminal_writer().hasmarkup)
    terminalreporter.write(render(m, colour=colour))
    out = results_dir("kernel")
    terminalreporter.write_line(f"written to {out}/matrix.json, matrix.txt, matrix-junit.xml "
                                "and matrix.html")
