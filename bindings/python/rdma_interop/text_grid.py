"""A verdict grid as terminal text that never runs wider than it may.

Row names down, column names across, " | " between cells. When the whole table would be
wider than `width` (100 by default), the columns are folded: the table is printed in
blocks of as many columns as fit, each block with the row names again and a line saying
which columns it holds. A single name or cell longer than a block can hold is cut with
"...". Rows may be grouped under a heading line. Only the verdict word of a cell is
coloured, and only when asked (a terminal): padding is counted on the plain text, so the
columns line up either way.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rdma_interop.verdict import Outcome, paint

__all__ = ["WIDTH", "GridCell", "cut", "render_grid", "wrap_note"]

#: The widest line any report prints.
WIDTH = 100
#: Row names longer than this are cut.
MAX_ROW_NAME = 40


@dataclass(frozen=True)
class GridCell:
    text: str  # already printable (no control characters)
    outcome: Outcome | None = None


def cut(text: str, width: int) -> str:
    """`text`, cut to `width` characters with "..." when longer."""
    if len(text) <= width:
        return text
    return text[: max(width - 3, 0)] + "..." if width >= 3 else text[:width]


def _coloured(text: str, outcome: Outcome | None, colour: bool) -> str:
    if not colour or outcome is None or not text.startswith(outcome.label):
        return text
    return paint(outcome.label, outcome) + text[len(outcome.label):]


def render_grid(corner: str, rows: Sequence[str], cols: Sequence[str],
                cells: Mapping[tuple[str, str], GridCell], *, width: int = WIDTH,
                colour: bool = False, groups: Mapping[str, str] | None = None,
                fold_what: str = "columns") -> list[str]:
    """The grid's lines. `cells` maps (row, column) to a cell; a missing one prints blank.
    `groups` maps a row to its group: a heading line precedes each run of rows of one
    group. `fold_what` names the columns in the folding note ("responders", "peers")."""
    first = min(max([len(corner), *(len(r) for r in rows)]), MAX_ROW_NAME)
    room = max(width - first - 3, 8)  # what one column may take in a block
    widths = []
    for col in cols:
        texts = [len(col), *(len(cells[(r, col)].text) for r in rows if (r, col) in cells)]
        widths.append(min(max(texts), room))

    blocks: list[list[int]] = []
    used = first
    for j, w in enumerate(widths):
        if not blocks or used + 3 + w > width:
            blocks.append([])
            used = first
        blocks[-1].append(j)
        used += 3 + w

    lines: list[str] = []
    for b, block in enumerate(blocks):
        if len(blocks) > 1:
            if b:
                lines.append("")
            lines.append(f"({fold_what} {block[0] + 1}-{block[-1] + 1} of {len(cols)})")
        line_width = first + sum(3 + widths[j] for j in block)
        header = cut(corner, first).ljust(first) + "".join(
            " | " + cut(cols[j], widths[j]).ljust(widths[j]) for j in block)
        lines.append(header.rstrip())
        lines.append("-" * first + "".join("-+-" + "-" * widths[j] for j in block))
        group = None
        for r in rows:
            if groups is not None and groups.get(r) != group:
                group = groups.get(r)
                if group:
                    lines.append(cut(f"-- {group} ", line_width).ljust(line_width, "-"))
            parts = [cut(r, first).ljust(first)]
            for j in block:
                cell = cells.get((r, cols[j]))
                text = cut(cell.text, widths[j]) if cell else ""
                pad = " " * (widths[j] - len(text))
                parts.append(" | " + _coloured(text, cell.outcome if cell else None, colour) + pad)
            lines.append("".join(parts).rstrip())
    return lines


def wrap_note(mark: str, text: str, width: int = WIDTH, indent: int | None = None) -> list[str]:
    """A numbered note, `mark` first ("[ 3] "), wrapped to `width`; the lines after the
    first are indented by `indent` spaces (default: as wide as `mark`). Long unbroken words
    (hex) are broken too, so no line is wider."""
    return textwrap.wrap(text, width=width, initial_indent=mark,
                         subsequent_indent=" " * (len(mark) if indent is None else indent),
                         break_long_words=True, break_on_hyphens=False) or [mark.rstrip()]
