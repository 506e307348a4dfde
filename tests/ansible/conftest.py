"""Fixtures for the ansible tier: playbooks/site.yml over real SSH to namespace nodes.

    /usr/bin/python3 -m pytest tests/ansible -v      (root: network namespaces, sshd)

One lab for the whole tier (see ansible_support.py); the tests run in file order against it:
check mode on fresh nodes, a first run, a second run that changes nothing, and so on.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from tests.support.namespace_lab import namespace_lab
from tests.support.paths import build_dir

from .ansible_support import SSHD, SshNodeLab

N_NODES = 3


@pytest.fixture(scope="session")
def node_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshNodeLab]:
    for tool in ("ansible-playbook", "ssh", "ssh-keygen", SSHD):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (tools/install-deps.sh installs it)")
    if not (build_dir() / "CMakeCache.txt").is_file():
        pytest.skip(f"no build tree at {build_dir()}: the nodes install from it "
                    "(cmake -S . -B build && cmake --build build)")
    with namespace_lab(1 + N_NODES, prefix="rdmai") as lab:
        nodes = SshNodeLab(lab, tmp_path_factory.mktemp("ansible-lab"))
        try:
            nodes.start()
            yield nodes
        finally:
            nodes.stop()
