"""The interop suite's lab, responders and matrix.

    /usr/bin/python3 -m pytest tests/interop -v              # default: 2 namespace hosts (root)
    /usr/bin/python3 -m pytest tests/interop --lab lab.yaml  # real hosts over SSH

Host 1 runs one `rdma-probe serve` per responder personality (one port each, from 7174); host 0
runs `rdma-probe connect --json` for every (initiator, responder) pair. Each case is checked
against oracle.py on both sides and becomes a cell of the interop matrix, printed at the end
and written to $RDMA_INTEROP_RESULTS (default ./interop-results): matrix.json
(rdma-interop/matrix/2), matrix-junit.xml, matrix.txt, matrix.html and each responder's JSON
lines. A results directory that cannot be written is refused before any case runs.

Options (or environment): --lab FILE ($RDMA_INTEROP_LAB), --lab-hosts INITIATOR,RESPONDER
($RDMA_INTEROP_LAB_HOSTS: two of the lab file's hosts by name), --rdma-probe PATH ($RDMA_PROBE),
--personality-dir DIR (default tools/personalities), --results DIR ($RDMA_INTEROP_RESULTS),
--strict-findings ($RDMA_INTEROP_STRICT=1: FINDING cells are failures in the JUnit file).
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from rdma_interop.lab import Lab, SshLab, load_lab_file
from rdma_interop.matrix import CaseResult, InteropMatrix, Outcome
from rdma_interop.results import results_dir_problem
from rdma_interop.verdict import use_colour

from tests.support.namespace_lab import namespace_lab
from tests.support.paths import REPO_ROOT
from tests.support.tools import find_tool

from .judge import judge
from .oracle import Personality, load_personalities
from .responders import ResponderError, ResponderPool

# The shipped personalities, in the matrix's order; other files in the directory follow.
SHIPPED_ORDER = ["siw", "cxgb4", "cxgb4-write", "cxgb4-rev1", "freebsd-cxgbe", "irdma", "qedr",
                 "erdma", "rev1-only", "never-rtr", "strict"]
TEST_PERSONALITY_DIR = Path(__file__).resolve().parent / "personalities"
# The tests whose cases are matrix cells (parameters "initiator" and "responder").
MATRIX_TESTS = ("test_initiator_meets_responder", "test_required_failure")
MATRIX_KEY = pytest.StashKey[InteropMatrix]()
PROGRESS_KEY = pytest.StashKey[dict[str, int]]()
POOL_KEY = pytest.StashKey[ResponderPool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("interop", "rdma-interop interop matrix")
    group.addoption("--lab", default=os.environ.get("RDMA_INTEROP_LAB"),
                    help="YAML lab file of real hosts (default: a 2-host namespace lab)")
    group.addoption("--lab-hosts", default=os.environ.get("RDMA_INTEROP_LAB_HOSTS"),
                    metavar="INITIATOR,RESPONDER",
                    help="the lab file's hosts to use, by name (default: its first two)")
    group.addoption("--rdma-probe", default=os.environ.get("RDMA_PROBE"),
                    help="rdma-probe to run (default: build tree, then PATH)")
    group.addoption("--personality-dir", default=str(REPO_ROOT / "tools" / "personalities"),
                    help="personality files for the matrix and the oracle")
    group.addoption("--test-personality-dir", default=str(TEST_PERSONALITY_DIR),
                    help="test-only personalities for test_negotiation_failures.py")
    group.addoption("--results", default=os.environ.get("RDMA_INTEROP_RESULTS", "interop-results"),
                    help="where matrix.json and matrix-junit.xml go")
    group.addoption("--connect-timeout", type=float, default=30.0,
                    help="rdma-probe connect --timeout, seconds")
    group.addoption("--strict-findings", action="store_true",
                    default=os.environ.get("RDMA_INTEROP_STRICT") == "1",
                    help="FINDING cells are failures in matrix-junit.xml ($RDMA_INTEROP_STRICT=1)")


# ---- what to run -------------------------------------------------------------------------


def personality_names(config: pytest.Config) -> list[str]:
    directory = Path(config.getoption("personality_dir"))
    names = sorted(p.stem for p in directory.glob("*.json"))
    return [n for n in SHIPPED_ORDER if n in names] + [n for n in names if n not in SHIPPED_ORDER]


def personality_dirs(config: pytest.Config) -> list[str]:
    return [config.getoption("personality_dir"), config.getoption("test_personality_dir")]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.function.__name__ == "test_initiator_meets_responder":
        names = personality_names(metafunc.config)
        pairs = [(i, r) for i in names for r in names]
        metafunc.parametrize(("initiator", "responder"), pairs,
                             ids=[f"{i}->{r}" for i, r in pairs])


def find_rdma_probe(config: pytest.Config) -> str | None:
    """--rdma-probe when given, else the one find_tool() finds (tests/support/tools.py)."""
    explicit = config.getoption("rdma_probe")
    if explicit:
        return explicit
    found = find_tool("rdma-probe")
    return str(found) if found else None


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("help") and not config.getoption("collectonly"):
        problem = results_dir_problem(results_dir(config))
        if problem:
            raise pytest.UsageError(f"--results: {problem}")
    names = personality_names(config)
    config.stash[MATRIX_KEY] = InteropMatrix(
        "Interop matrix: MPA connection setup and data transfer (RFC 5044, RFC 5040, RFC 6581)",
        initiators=names, responders=names)
    config.stash[PROGRESS_KEY] = {"done": 0}


def pytest_report_header(config: pytest.Config) -> list[str]:
    probe = find_rdma_probe(config)
    lab = config.getoption("lab") or "2 network namespaces (198.18.0.0/15)"
    return [f"interop: rdma-probe {probe or 'NOT FOUND'}",
            f"interop: lab {lab}; personalities {config.getoption('personality_dir')}"]


def pytest_collection_finish(session: pytest.Session) -> None:
    # After -k/-m deselection: the cases that will really run.
    session.config.stash[PROGRESS_KEY]["total"] = sum(
        1 for i in session.items if i.name.startswith(MATRIX_TESTS))


# ---- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def matrix(pytestconfig: pytest.Config) -> InteropMatrix:
    return pytestconfig.stash[MATRIX_KEY]


@pytest.fixture(scope="session")
def personalities(pytestconfig: pytest.Config) -> dict[str, Personality]:
    """Shipped personalities, then the test-only ones (a shipped name wins)."""
    found: dict[str, Personality] = {}
    for directory in personality_dirs(pytestconfig):
        for name, p in load_personalities(Path(directory)).items():
            found.setdefault(name, p)
    return found


@pytest.fixture(scope="session")
def rdma_probe(pytestconfig: pytest.Config) -> str:
    """The rdma-probe namespace hosts run. Lab-file hosts run probe_on(host, this): their own
    (the lab file's rdma_probe, else their PATH) unless --rdma-probe names one for all."""
    if pytestconfig.getoption("lab"):
        return pytestconfig.getoption("rdma_probe") or ""
    probe = find_rdma_probe(pytestconfig)
    if probe is None:
        pytest.skip("rdma-probe not found: build it (cmake --build build), install it "
                    "(cmake --install build) or pass --rdma-probe PATH")
    return probe


@pytest.fixture(scope="session")
def lab(pytestconfig: pytest.Config, matrix: InteropMatrix) -> Iterator[Lab]:
    """Two hosts: the lab file's first two, or a fresh pair of network namespaces."""
    lab_file = pytestconfig.getoption("lab")
    if lab_file:
        ssh_lab = load_lab_file(lab_file)
        chosen = pytestconfig.getoption("lab_hosts")
        if chosen:
            by_name = {h.name: h for h in ssh_lab.hosts}
            names = chosen.split(",")
            unknown = [n for n in names if n not in by_name]
            if len(names) != 2 or unknown:
                pytest.fail(f"--lab-hosts {chosen}: want INITIATOR,RESPONDER of the hosts in "
                            f"{lab_file} ({', '.join(by_name)})")
            ssh_lab = SshLab([by_name[n] for n in names], source=ssh_lab.source)
        if len(ssh_lab.hosts) < 2:
            pytest.fail(f"{lab_file}: the interop suite needs at least 2 hosts")
        ssh_lab.check_reachable()
        matrix.environment["lab"] = f"{lab_file}: " + ", ".join(
            f"{h.name}={h.address}" for h in ssh_lab.hosts[:2])
        matrix.environment["rdma-probe"] = ", ".join(
            f"{h.name}: {probe_on(h, pytestconfig.getoption('rdma_probe') or '')}"
            for h in ssh_lab.hosts[:2])
        with ssh_lab:
            yield ssh_lab
        return
    with namespace_lab(2, prefix="rdmai") as ns_lab:
        matrix.environment["lab"] = repr(ns_lab)
        yield ns_lab


def probe_on(host: Any, rdma_probe: str) -> str:
    """The rdma-probe to run on `host`: the fixture's, else the lab file's for that host."""
    return rdma_probe or getattr(host, "rdma_probe", "rdma-probe")


def personality_args(config: pytest.Config) -> list[str]:
    """Where rdma-probe finds personalities: our directories on namespace hosts (same
    filesystem, so the oracle and the CLI read the same files); on lab-file hosts, what is
    installed there."""
    if config.getoption("lab"):
        return []
    return [arg for d in personality_dirs(config) for arg in ("--personality-dir", d)]


@pytest.fixture(scope="session")
def responders(pytestconfig: pytest.Config, lab: Lab, rdma_probe: str,
               matrix: InteropMatrix) -> Iterator[ResponderPool]:
    """`rdma-probe serve` on host 1, one per responder personality, started on first use."""
    pool = ResponderPool(lab.hosts[1], [probe_on(lab.hosts[1], rdma_probe)],
                         personality_args(pytestconfig),
                         personality_names(pytestconfig))
    pytestconfig.stash[POOL_KEY] = pool
    yield pool
    pool.stop_all()
    for name, r in pool.started.items():
        if r.returncode != 0:
            matrix.environment[f"responder {name}"] = (
                f"exited {r.returncode} on SIGTERM: " + " | ".join(r.stderr_tail[-3:]))


def run_connect(host: Any, probe: str, uri: str, personality: str, extra: list[str],
                timeout: float) -> tuple[dict[str, Any] | None, int, str]:
    """`rdma-probe connect URI --personality P --json` on `host`: (report, exit code, stderr)."""
    cmd = [probe, "connect", uri, "--personality", personality, *extra,
           "--timeout", f"{timeout:g}", "--json"]
    try:
        done = host.run(cmd, timeout=timeout + 15)
    except Exception as e:  # TimeoutExpired: the CLI broke its own --timeout
        return None, -1, f"{type(e).__name__}: {e}"
    report = None
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            report = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    return report, done.returncode, done.stderr


@pytest.fixture
def run_case(pytestconfig: pytest.Config, lab: Lab, rdma_probe: str, responders: ResponderPool,
             personalities: dict[str, Personality], matrix: InteropMatrix,
             record_property: Any) -> Any:
    """Runs one (initiator, responder) case end to end and records it in the matrix."""
    from .oracle import expect

    extra = personality_args(pytestconfig)
    timeout = float(pytestconfig.getoption("connect_timeout"))

    def run(initiator: str, responder: str) -> CaseResult:
        for name in (initiator, responder):
            if name not in personalities:
                pytest.fail(f"no personality {name!r} in {personality_dirs(pytestconfig)}")
        if pytestconfig.getoption("lab") and not all(
                name in personality_names(pytestconfig) for name in (initiator, responder)):
            pytest.skip("test-only personalities are not installed on lab-file hosts")
        expected = expect(personalities[initiator], personalities[responder])
        try:
            serve = responders.get(responder)
        except ResponderError as e:
            case = CaseResult(initiator, responder, Outcome.FAIL, expected=expected.describe(),
                              mismatches=[str(e)])
            matrix.add(case)
            record_property("cell", case.cell())
            return case
        late = serve.drain()
        report, code, stderr = run_connect(lab.hosts[0], probe_on(lab.hosts[0], rdma_probe),
                                           serve.uri, initiator, extra, timeout)
        events = serve.take_connections(len(expected.responder_connections),
                                        timeout=expected.settle_seconds + 5.0)
        case = judge(expected, report, code, events, stderr=stderr)
        if late:
            case.notes.append(f"{len(late)} late responder line(s) from an earlier case ignored")
        matrix.add(case)
        record_property("cell", case.cell())
        return case

    return run


# ---- progress and the matrix at the end ----------------------------------------------------


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    outcome = yield
    report = outcome.get_result()
    if not item.name.startswith(MATRIX_TESTS) or not hasattr(item, "callspec"):
        return
    params = item.callspec.params
    m = item.config.stash[MATRIX_KEY]
    if m.get(params["initiator"], params["responder"]) is not None:
        return
    # Never reached the case itself: a skip (no root, no rdma-probe) or a broken fixture is
    # still a cell of the matrix.
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        m.add(CaseResult(params["initiator"], params["responder"], Outcome.SKIP,
                         notes=[reason.removeprefix("Skipped: ")]))
    elif report.failed:
        m.add(CaseResult(params["initiator"], params["responder"], Outcome.FAIL,
                         mismatches=[f"{report.when}: {call.excinfo.exconly() if call.excinfo else 'error'}"]))


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> Any:
    if report.when != "call" or not any(f"::{t}[" in report.nodeid for t in MATRIX_TESTS):
        return None
    props = dict(report.user_properties)
    if "cell" not in props:
        return None
    # Called again for the short summary: count each case once.
    progress = config.stash[PROGRESS_KEY]
    if report.nodeid not in progress:
        progress[report.nodeid] = progress["done"] = progress["done"] + 1
    tag = f"{props['cell']}  ({progress[report.nodeid]}/{progress.get('total', '?')})"
    if report.passed:
        return "passed", ".", "PASSED  " + tag
    if report.failed:
        return "failed", "F", "FAILED  " + tag
    return None


def results_dir(config: pytest.Config) -> Path:
    path = Path(config.getoption("results"))
    return path if path.is_absolute() else Path(config.invocation_params.dir) / path


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    m = session.config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    out = results_dir(session.config)
    m.environment.setdefault("host", f"{platform.node()} {platform.system()} {platform.release()}")
    m.environment.setdefault("rdma-probe", find_rdma_probe(session.config) or "not found")
    m.environment["finished_at"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    strict = session.config.getoption("strict_findings")
    m.write_json(out / "matrix.json")
    m.write_junit(out / "matrix-junit.xml", strict=strict)
    (out / "matrix.txt").write_text(m.render_table())
    m.write_html(out / "matrix.html", strict=strict)
    pool = session.config.stash.get(POOL_KEY, None)
    if pool is not None:
        for name, r in pool.started.items():
            with open(out / f"responder-{name}.jsonl", "w") as f:
                for line in r.lines:
                    f.write(json.dumps(line) + "\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    m = config.stash.get(MATRIX_KEY, None)
    if m is None or len(m) == 0:
        return
    terminalreporter.write_sep("=", "interop matrix")
    markup = config.get_terminal_writer().hasmarkup
    terminalreporter.write(m.render_table(colour=use_colour(markup=markup)))
    for key, value in m.environment.items():
        if key.startswith("responder "):
            terminalreporter.write_line(f"{key}: {value}", red=True)
    out = results_dir(config)
    terminalreporter.write_line(f"matrix written to {out}/matrix.json, {out}/matrix-junit.xml, "
                                f"{out}/matrix.txt, {out}/matrix.html")
