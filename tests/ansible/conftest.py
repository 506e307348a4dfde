"""Fixtures for the ansible tier: playbooks/site.yml over real SSH to namespace nodes.

    /usr/bin/python3 -m pytest tests/ansible -v      (root: network namespaces, sshd)

One lab for the whole tier (see ansible_support.py); the tests run in file order against it:
check mode on fresh nodes, a first run, a second run that changes nothing, and so on.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from ansible_support import SSHD, SshNodeLab, build_dir

from rdma_interop.lab import LabError, NamespaceLab, namespaces_available

N_NODES = 3


@pytest.fixture(scope="session")
def node_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNodeLab]:
    ok, why = namespaces_available()
    if not ok:
        pytest.skip(why)
    for tool in ("ansible-playbook", "ssh", "ssh-keygen", SSHD):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (tools/install-deps.sh installs it)")
    if not (build_dir() / "CMakeCache.txt").is_file():
        pytest.skip(f"no build tree at {build_dir()}: the nodes install from it "
                    "(cmake -S . -B build && cmake --build build)")
    lab = NamespaceLab(1 + N_NODES, prefix="rdmai")
    try:
        lab.start()
    except LabError as e:
        pytest.skip(f"cannot build the namespace lab: {e}")
    nodes = SshNodeLab(lab, tmp_path_factory.mktemp("ansible-lab"))
    try:
        nodes.start()
        yield nodes
    finally:
        nodes.stop()
        lab.close()
