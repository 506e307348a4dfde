"""A lab of network-namespace hosts for a tier (rdma_interop.lab.NamespaceLab on a bridge,
198.18.0.0/15), or a skip with the reason where the machine cannot have one (not root, no
`ip netns`).

    lab = namespace_lab_fixture(5, prefix="rdmams")      # in a tier's conftest.py

    with namespace_lab(2, prefix="rdmai") as lab:       # inside a fixture of one's own
        ...

Each tier uses its own prefix, so two tiers' labs on one machine never share a name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from rdma_interop.lab import LabError, NamespaceLab, namespaces_available


@contextmanager
def namespace_lab(n_hosts: int, prefix: str) -> Iterator[NamespaceLab]:
    """A started lab of `n_hosts` namespace hosts, closed afterwards; skips the test when
    namespaces are unavailable or the lab cannot be built."""
    ok, why = namespaces_available()
    if not ok:
        pytest.skip(why)
    lab = NamespaceLab(n_hosts, prefix=prefix)
    try:
        lab.start()
    except LabError as e:
        pytest.skip(f"cannot build the namespace lab: {e}")
    try:
        yield lab
    finally:
        lab.close()


def namespace_lab_fixture(n_hosts: int, prefix: str) -> Callable[[], Iterator[NamespaceLab]]:
    """A session fixture that yields namespace_lab(n_hosts, prefix): one lab for a tier."""

    @pytest.fixture(scope="session")
    def lab() -> Iterator[NamespaceLab]:
        with namespace_lab(n_hosts, prefix) as started:
            yield started

    return lab
