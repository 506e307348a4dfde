"""A process's output read as it comes: stdout as JSON lines (our tools' --json), stderr as
text, each by a daemon thread, so neither pipe fills and blocks the process.

    out = JsonLines(process)
    with out.changed:
        out.changed.wait_for(lambda: any(d.get("event") == "started" for d in out.lines), 5)
    out.join(5)                      # after the process exited: every line is in
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Sequence
from typing import Any


class JsonLines:
    """Every line `process` printed so far: `lines` (a line that is not JSON is kept as
    {"event": "unparsed", "text": ...}) and `stderr_lines`; `changed` is notified (under its
    lock) on each stdout line and when stdout ends."""

    def __init__(self, process: subprocess.Popen[str],
                 first: Sequence[dict[str, Any]] = ()) -> None:
        """`first`: lines the caller already read off stdout (e.g. a server's "listening")."""
        self.process = process
        self.lines: list[dict[str, Any]] = list(first)
        self.stderr_lines: list[str] = []
        self.changed = threading.Condition()
        self._threads = [threading.Thread(target=fn, daemon=True)
                         for fn in (self._read_stdout, self._read_stderr)]
        for t in self._threads:
            t.start()

    def reading(self) -> bool:
        """Whether a pipe is still open (the process may print more)."""
        return any(t.is_alive() for t in self._threads)

    def join(self, timeout: float) -> None:
        """Waits up to `timeout` seconds for each pipe to end."""
        for t in self._threads:
            t.join(timeout=timeout)

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if not line.strip():
                continue
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                doc = {"event": "unparsed", "text": line}
            with self.changed:
                self.lines.append(doc)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr_lines.append(line.rstrip())


class PrintsJsonLines:
    """A base for a handle on one process read through `output` (a JsonLines): its lines and
    stderr lines as the handle's own."""

    output: JsonLines

    @property
    def lines(self) -> list[dict[str, Any]]:
        return self.output.lines

    @property
    def stderr_lines(self) -> list[str]:
        return self.output.stderr_lines
