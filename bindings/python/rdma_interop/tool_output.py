"""What our tools print with --json: one JSON object per line.

The device tier reads its groups' output with this, and the kernel tier's tests read what the
tools print inside the guest with it too, so both skip the same noise the same way.
"""

from __future__ import annotations

import json
from typing import Any


def json_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects among the lines of a tool's output (anything else, a shell's noise or
    a cut-off line, is skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out
