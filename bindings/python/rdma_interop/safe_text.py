"""Text that came from a peer or a file, made safe for a terminal, XML and HTML.

A report may hold what a peer sent (a reject's private data, a Terminate detail, a process
name). C0 controls (but tab), DEL, C1 controls, bidirectional controls and line separators,
and lone surrogates (what surrogateescape makes of bytes that are not UTF-8) would forge or
reorder lines on a terminal and make XML 1.0 that no JUnit reader accepts; they are written
as escapes instead, and a backslash as two. HTML then escapes its own specials on top.
"""

from __future__ import annotations

import html
import re
import xml.etree.ElementTree as ET

__all__ = ["html_text", "html_lines", "printable", "xml_safe"]

_UNPRINTABLE = re.compile("[\\\\\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e"
                          "\u2066-\u2069\ud800-\udfff\ufffe\uffff]")


def printable(text: str) -> str:
    """``text`` with every control character (but tab), bidirectional control, line separator,
    lone surrogate and XML non-character escaped as ``\\xNN`` / ``\\uNNNN`` and each backslash
    doubled: one line, safe on a terminal and in XML."""
    def escape(m: re.Match[str]) -> str:
        c = ord(m.group())
        if c == 0x5C:
            return "\\\\"  # a backslash: so an escape in the text cannot pass for ours
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    return _UNPRINTABLE.sub(escape, text)


# What XML 1.0 cannot carry at all (s2.2 Char): text that printable() has not already seen.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(root: ET.Element) -> None:
    """Escapes what XML 1.0 cannot carry in every text and attribute under ``root``."""
    def escape(m: re.Match[str]) -> str:
        c = ord(m.group())
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for el in root.iter():
        if el.text:
            el.text = _NOT_XML.sub(escape, el.text)
        if el.tail:
            el.tail = _NOT_XML.sub(escape, el.tail)
        for k, v in el.attrib.items():
            el.attrib[k] = _NOT_XML.sub(escape, v)


def html_text(text: object) -> str:
    """One line of text for HTML, element content or a quoted attribute: printable() first
    (no controls, no bidirectional overrides), then &, <, >, " and ' escaped."""
    return html.escape(printable(str(text)), quote=True)


def html_lines(text: object) -> str:
    """Like html_text, keeping the line breaks (logs, traces, hex dumps in <pre>)."""
    return "\n".join(html_text(line) for line in str(text).split("\n"))
