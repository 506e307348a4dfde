"""playbooks/site.yml over real SSH: deploy, serve, run every node pair, bring the matrix home.

The tests share one lab and run in file order: check mode on fresh nodes, a first run, a
second run that changes nothing, a responder killed and restarted by its supervisor,
stop.yml. (Check mode on converged nodes is left out: another minute, and the second run
already shows nothing would change.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.paths import SHIPPED_PERSONALITIES
from tests.support.waiting import eventually

from .ansible_support import PLAYBOOKS, SshNodeLab

PERSONALITIES = ["siw", "rev1-only"]
BASE_PORT = 7300
# node1 is the controller and an initiator, node2 both, node3 a responder.
PAIRS = {("node1", "node2"), ("node1", "node3"), ("node2", "node3")}
RESPONDERS = ["node2", "node3"]
NODES = ["node1", "node2", "node3"]
CELLS = {(i, r) for i in PERSONALITIES for r in PERSONALITIES}


def inventory(lab: SshNodeLab) -> Path:
    """Each pair's matrix is the PERSONALITIES x PERSONALITIES cells (4, not 25: a short tier)."""
    matrix_dir = lab.workdir / "personalities"
    matrix_dir.mkdir(exist_ok=True)
    for name in PERSONALITIES:
        (matrix_dir / f"{name}.json").write_text(
            (SHIPPED_PERSONALITIES / f"{name}.json").read_text())
    return lab.write_inventory(
        rdma_interop_personalities=PERSONALITIES, rdma_interop_base_port=BASE_PORT,
        rdma_interop_pytest_args=["--personality-dir", str(matrix_dir),
                                  "-k", "test_initiator_meets_responder"])


def report(lab: SshNodeLab) -> dict:
    return json.loads((lab.workdir / "report" / "lab-matrix.json").read_text())


def serve_pids(lab: SshNodeLab, node_name: str) -> dict[int, int]:
    """{port: pid} of the rdma-probe serve processes listening in a node's namespace."""
    node = next(n for n in lab.nodes if n.name == node_name)
    done = node.host.run(["ss", "-Hltnp"])
    pids = {}
    for line in done.stdout.splitlines():
        match = re.search(r':(\d+)\s.*users:\(\("rdma-probe",pid=(\d+)', line)
        if match:
            pids[int(match.group(1))] = int(match.group(2))
    return pids


def test_playbooks_are_ansible_lint_clean(tmp_path: Path) -> None:
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "NO_COLOR": "1"}
    done = subprocess.run(["ansible-lint", "--offline", "-p", "site.yml", "stop.yml"],
                          cwd=PLAYBOOKS, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Passed with production profile" in done.stdout + done.stderr


def test_check_mode_on_fresh_nodes_says_what_would_change_and_changes_nothing(
        node_lab: SshNodeLab) -> None:
    inventory(node_lab)
    run = node_lab.playbook("site.yml", "--check")
    assert run.returncode == 0, run.tail()
    assert set(NODES) <= set(run.recap), run.tail()
    assert all(run.recap[n]["failed"] == 0 and run.recap[n]["unreachable"] == 0 for n in NODES)
    # Every node would get its state directory and (responders) their services.
    assert all(run.changed()[n] > 0 for n in NODES), run.changed()
    for node in node_lab.nodes:
        assert not node.prefix.exists(), f"--check installed into {node.prefix}"
        assert not node.state_dir.exists(), f"--check created {node.state_dir}"
        assert serve_pids(node_lab, node.name) == {}


def test_site_deploys_serves_runs_every_pair_and_brings_the_matrix_home(
        node_lab: SshNodeLab) -> None:
    run = node_lab.playbook("site.yml")
    assert run.returncode == 0, run.tail()
    assert all(run.recap[n]["failed"] == 0 for n in [*NODES, "localhost"]), run.recap
    assert "soft RDMA" in run.output  # the soft_rdma role said what it did, on every node

    for node in node_lab.nodes:
        assert (node.prefix / "bin" / "rdma-probe").is_file()
        assert (node.prefix / "share" / "rdma-interop" / "personalities" / "siw.json").is_file()
    for name in NODES:
        ports = set(serve_pids(node_lab, name))
        want = {BASE_PORT + i for i in range(len(PERSONALITIES))} if name in RESPONDERS else set()
        assert ports == want, f"{name} serves on {ports}"

    doc = report(node_lab)
    assert doc["schema"] == "rdma-interop/lab-matrix/1"
    assert doc["controller"] == "node1"
    assert {(p["initiator"], p["responder"]) for p in doc["pairs"]} == PAIRS
    addresses = {n.name: n.address for n in node_lab.nodes}
    for pair in doc["pairs"]:
        where = f"{pair['initiator']} -> {pair['responder']}"
        assert pair["status"] == "ok", (where, pair["problem"], pair["summary"])
        summary = pair["summary"]
        assert summary["total"] == len(CELLS), (where, summary)
        assert summary["pass"] + summary["expected-fail"] == len(CELLS), (where, summary)
        # The cases really ran between that pair's nodes, over SSH, with their own installs.
        env = pair["matrix"]["environment"]
        assert f"{pair['initiator']}={addresses[pair['initiator']]}" in env["lab"]
        assert f"{pair['responder']}={addresses[pair['responder']]}" in env["lab"]
        assert f"node{pair['responder'][-1]}/prefix/bin/rdma-probe" in env["rdma-probe"]
        assert {(c["initiator"], c["responder"]) for c in pair["matrix"]["cases"]} == CELLS
    assert doc["summary"]["missing"] == 0 and doc["summary"]["fail"] == 0

    services = {(s["node"], s["personality"]): s for s in doc["services"]}
    assert set(services) == {(n, p) for n in RESPONDERS for p in PERSONALITIES}
    for (node, personality), svc in services.items():
        assert svc["outcome"] == "probed", svc
        index = PERSONALITIES.index(personality)
        assert svc["uri"] == f"tcp://{addresses[node]}:{BASE_PORT + index}"
        want_revision = 1 if personality == "rev1-only" else 2
        assert svc["responder_policy"]["revision"] == want_revision, svc

    junit = ET.parse(node_lab.workdir / "report" / "lab-junit.xml").getroot()
    assert int(junit.get("tests", "0")) == doc["summary"]["total"] == len(PAIRS) * len(CELLS)
    assert int(junit.get("failures", "1")) == 0 and int(junit.get("errors", "1")) == 0
    text = (node_lab.workdir / "report" / "lab-matrix.txt").read_text()
    assert "== node1 -> node3 ==" in text and f"OK {len(CELLS)}/{len(CELLS)}" in text
    assert "== node2 -> node3 ==" in run.output  # the play shows the report too
    # The device tier ran over the same SSH lab file; namespace nodes have no RDMA device
    # (this kernel has no RDMA), and the report says so for each instead of failing.
    devices = doc["devices"]
    assert devices is not None and devices["schema"] == "rdma-interop/device-matrix/1"
    assert {n["name"]: n["status"] for n in devices["nodes"]} == {n: "no-device" for n in NODES}
    assert devices["cells"] == [] and devices["schedule"] == []
    for name in NODES:
        assert f"  {name}: no RDMA device" in text


def test_second_run_changes_nothing_and_brings_a_fresh_matrix(node_lab: SshNodeLab) -> None:
    before = report(node_lab)
    pids_before = serve_pids(node_lab, "node2")
    time.sleep(1.1)  # generated_at has one-second resolution
    run = node_lab.playbook("site.yml")
    assert run.returncode == 0, run.tail()
    assert set(NODES) | {"localhost"} <= set(run.recap)
    assert run.changed() == {host: 0 for host in run.recap}, run.tail(120)
    after = report(node_lab)
    assert after["generated_at"] > before["generated_at"]
    assert {(p["initiator"], p["responder"]) for p in after["pairs"]} == PAIRS
    assert all(p["status"] == "ok" for p in after["pairs"])
    # Unchanged responders were left running, not restarted.
    assert serve_pids(node_lab, "node2") == pids_before


def test_a_killed_responder_comes_back_under_its_supervisor(node_lab: SshNodeLab) -> None:
    pids = serve_pids(node_lab, "node3")
    assert BASE_PORT in pids
    os.kill(pids[BASE_PORT], 9)  # same machine: the namespace shares our pid space
    if not eventually(lambda: serve_pids(node_lab, "node3").get(BASE_PORT)
                      not in (None, pids[BASE_PORT]), timeout=15, interval=0.2):
        pytest.fail(f"the siw responder on node3 did not come back: {serve_pids(node_lab, 'node3')}")
    log = next(n for n in node_lab.nodes if n.name == "node3").state_dir / "log" / "serve-siw.log"
    assert "exited with status" in log.read_text()


def test_stop_playbook_stops_every_responder(node_lab: SshNodeLab) -> None:
    run = node_lab.playbook("stop.yml")
    assert run.returncode == 0, run.tail()
    assert all(run.changed()[n] > 0 for n in RESPONDERS), run.changed()
    for name in NODES:
        assert serve_pids(node_lab, name) == {}, name
    again = node_lab.playbook("stop.yml")
    assert again.returncode == 0, again.tail()
    assert again.changed() == {host: 0 for host in again.recap}, again.tail()
