"""What the test tiers share, so each tier's conftest holds only what is its own.

    paths          the repository, the build tree under test ($RDMA_INTEROP_BUILD), the
                   shipped personalities, the results directory, Debian's Python
    tools          the operator tools a tier runs: find_tool(), require_tools(), built_tool(),
                   tool_or_skip()
    package        which rdma_interop package the tests import (a named build tree's first)
    waiting        eventually(): polling with a deadline instead of a fixed sleep
    namespace_lab  a lab of network-namespace hosts for a tier, skipped where there can be none
    json_lines     a process's JSON lines and stderr, read as they come
    guest          the qemu guest with the kernel's siw and rxe (kernel and devices tiers)
    fixtures       fixtures every tier may use (the root conftest.py loads them)

Every tier is a package (tests/<tier>/__init__.py), so two tiers' modules never share a name
and `pytest tests` collects them all in one session; tests import what they share as
`tests.support.<module>` and their own tier's helpers relatively (`from .mesh_support import
Mesh`).
"""
