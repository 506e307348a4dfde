"""Where a run's reports go, checked before anything runs.

A run that cannot write its results must say so at once, in one line, not after an hour of
cases (pytest would otherwise die in its session-finish hook with an INTERNALERROR and
save nothing). The check does what the reports will do: it creates the directory if it
is missing, then creates and removes a file in it. Permission bits alone would not tell
(root may write anywhere but to a read-only or special file system).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["results_dir_problem"]


def results_dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why reports cannot be written under `path` (one sentence), or None when they can.
    Creates `path` when it is missing."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        return f"{target} is not a directory"
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"{target} cannot be created: {e.strerror or e}"
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=target)
    except OSError as e:
        return f"{target} is not writable: {e.strerror or e}"
    os.close(fd)
    os.unlink(probe)
    return None
