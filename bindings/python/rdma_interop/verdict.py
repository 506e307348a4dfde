"""The five verdicts every report of this project uses, and what each does to a run.

    PASS     it worked as the standards require
    XFAIL    the standard requires this failure, and both sides reported it
    FINDING  the peer deviates from the standard or crashed; the evidence is attached. The
             run is not failed by it, unless it is run strict (--strict)
    FAIL     we, or the harness, did something wrong or unexplained
    SKIP     not run, with the reason (the device's own, e.g. EOPNOTSUPP, or the lab's)

A crash of the peer is a FINDING wherever it happens, with its trace, whatever the case
would otherwise have read. The matrix (terminal, JSON, JUnit, HTML), the device matrix, the
lab report and the exit status of interop-run all speak these words; `Outcome` values are
the JSON spellings.

Colour goes to a terminal only, never to a file, and never when NO_COLOR is set
(https://no-color.org: present and not empty).
"""

from __future__ import annotations

import os
from enum import Enum
from typing import TextIO

__all__ = ["LEGEND", "Outcome", "fails_run", "paint", "use_colour"]


class Outcome(str, Enum):
    PASS = "pass"
    XFAIL = "expected-fail"
    FINDING = "finding"
    FAIL = "fail"
    SKIP = "skip"

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def from_label(cls, label: str) -> Outcome:
        for outcome, text in _LABELS.items():
            if text == label:
                return outcome
        raise ValueError(f"no verdict {label!r}")


_LABELS = {Outcome.PASS: "PASS", Outcome.XFAIL: "XFAIL", Outcome.FINDING: "FINDING",
           Outcome.FAIL: "FAIL", Outcome.SKIP: "SKIP"}

#: One line per verdict, for every report's legend.
LEGEND = (
    "PASS     worked as the standards require\n"
    "XFAIL    failed as the standard requires for this pair, and both sides reported it\n"
    "FINDING  the peer deviates from the standard or crashed (evidence attached); fails the\n"
    "         run only with --strict\n"
    "FAIL     we or the harness did something wrong or unexplained: fails the run\n"
    "SKIP     not run, with the reason"
)


def fails_run(outcome: Outcome, *, strict: bool = False) -> bool:
    """Whether a cell with this verdict fails the run: a FAIL always, a FINDING when strict."""
    return outcome is Outcome.FAIL or (strict and outcome is Outcome.FINDING)


# ---- colour (terminals only) ------------------------------------------------------------

#: SGR parameters per verdict: green, blue, yellow, bold red, dim.
_SGR = {Outcome.PASS: "32", Outcome.XFAIL: "34", Outcome.FINDING: "33", Outcome.FAIL: "1;31",
        Outcome.SKIP: "2"}


def use_colour(stream: TextIO | None = None, *, markup: bool | None = None) -> bool:
    """Whether to colour text for `stream`: never with NO_COLOR set (and not empty) or
    TERM=dumb; otherwise `markup` when the caller knows (pytest's terminal writer does),
    else whether `stream` is a terminal."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    if markup is not None:
        return markup
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, outcome: Outcome) -> str:
    """`text` in the verdict's colour (ANSI SGR)."""
    return f"\x1b[{_SGR[outcome]}m{text}\x1b[0m"
