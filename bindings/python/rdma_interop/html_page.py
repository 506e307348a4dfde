"""One self-contained HTML page per report: the matrix as a coloured grid, each cell opening
its evidence, filters by verdict and by peer.

The page fetches nothing: its CSS and script are inline, it has no images, links or fonts
from anywhere, and its Content-Security-Policy (default-src 'none') stops the browser
from fetching even if something slipped through. Everything that came from a peer or a
file is escaped twice over: printable() (no control characters, no bidirectional
overrides) and then HTML's own escaping, in element text and in attributes alike; the
script reads only the page's own attributes, never text.

Without the script the page still works: every cell links to its evidence (#ev-N, a
<details> that the browser opens on navigation). With it, a click opens the evidence and
marks the cell, and the filters hide what does not match. The filters can also be set from
the address: matrix.html?verdict=finding,fail&peer=siw#ev-3.

Builders (rdma_interop.matrix, .device_matrix, .lab_report) describe a page with HtmlPage,
HtmlGrid, HtmlTable and HtmlCell, whose evidence is a list of Blocks; render_page() makes
the document.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

from rdma_interop.safe_text import html_lines, html_text, printable
from rdma_interop.verdict import LEGEND, Outcome
from rdma_interop.wire_text import decode_mpa_frame, decode_terminate, hex_dump, looks_like_mpa

__all__ = ["COLOURS", "Block", "HtmlCell", "HtmlGrid", "HtmlPage", "HtmlTable", "Section",
           "render_page"]

#: Each verdict's fill in the grid, exactly (the browser test counts these pixels).
COLOURS = {Outcome.PASS: "#8fd19e", Outcome.XFAIL: "#9ec5fe", Outcome.FINDING: "#ffc46b",
           Outcome.FAIL: "#f1807e", Outcome.SKIP: "#cfd4da"}
_CLASS = {o: "v-" + o.label.lower() for o in Outcome}


def _lighter(colour: str) -> str:
    """A tint of `colour` (40% toward white): badges, so that only grid cells have the fill."""
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{c + (255 - c) * 2 // 5:02x}" for c in rgb)


@dataclass(frozen=True)
class Block:
    """One piece of a cell's evidence.

    kind: "text" (lines as a list), "pre" (a log), "crash" (a trace), "fields" (rows of
    name, value[, meaning]), "compare" (rows of name, one side, the other, with `columns`
    naming the sides), "frame" (octets: a hex dump, an MPA Request/Reply decoded),
    "terminate" (octets: decoded field by field, then the hex dump)."""

    kind: str
    title: str
    text: str = ""
    lines: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    columns: tuple[str, ...] = ()
    data: bytes = b""


@dataclass
class HtmlCell:
    outcome: Outcome | None
    label: str  # the grid's text, e.g. "XFAIL no_matching_rtr"
    heading: str  # the evidence's heading, e.g. "siw -> cxgb4 (tcp)"
    peers: tuple[str, ...] = ()  # what the peer filter matches
    blocks: list[Block] = field(default_factory=list)


@dataclass
class HtmlGrid:
    heading: str
    corner: str
    rows: Sequence[str]
    cols: Sequence[str]
    cells: Mapping[tuple[str, str], HtmlCell]
    groups: Mapping[str, str] | None = None  # row -> its group's heading
    note: str = ""


@dataclass
class HtmlTable:
    """A plain table (node inventory, responder services, an overview)."""

    heading: str
    header: Sequence[str]
    rows: Sequence[Sequence[str]]
    note: str = ""


Section = Union[HtmlGrid, HtmlTable]


@dataclass
class HtmlPage:
    title: str
    generated_at: str
    summary: Mapping[Outcome, int]
    sections: list[Section]
    environment: Mapping[str, str] = field(default_factory=dict)
    verdict: str = ""  # one line: what the run's exit status makes of it
    legend: Sequence[str] = ()  # the report's own lines after the verdicts'


_CSS = """
:root { --pass: %(pass)s; --xfail: %(xfail)s; --finding: %(finding)s; --fail: %(fail)s;
        --skip: %(skip)s; }
.badge.v-pass { background: %(pass_badge)s; } .badge.v-xfail { background: %(xfail_badge)s; }
.badge.v-finding { background: %(finding_badge)s; } .badge.v-fail { background: %(fail_badge)s; }
.badge.v-skip { background: %(skip_badge)s; }
body { font: 14px/1.4 sans-serif; margin: 16px; color: #111; background: #fff; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 20px 0 6px; }
.meta { color: #555; margin: 0 0 6px; } .verdict-line { font-weight: 600; }
.badge { padding: 0 6px; border-radius: 3px; white-space: nowrap; }
td.v-pass { background: var(--pass); } td.v-xfail { background: var(--xfail); }
td.v-finding { background: var(--finding); } td.v-fail { background: var(--fail); }
td.v-skip { background: var(--skip); }
#filters { margin: 8px 0; } #filters label { margin-right: 10px; }
table.grid { border-collapse: separate; border-spacing: 2px; }
table.grid th { font-weight: 600; padding: 2px 6px; white-space: nowrap; text-align: left; }
table.grid th.corner { color: #555; font-weight: 400; }
table.grid tr.group th { background: #eee; font-weight: 600; }
td.cell { min-width: 7.5em; max-width: 16em; height: 1.9em; padding: 0 6px;
          white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
td.cell a { color: #111; text-decoration: none; display: block; }
td.cell.off { visibility: hidden; }
td.cell.selected { outline: 3px solid #111; }
table.plain { border-collapse: collapse; }
table.plain th, table.plain td { border: 1px solid #ccc; padding: 2px 6px; text-align: left;
                                 vertical-align: top; }
details.ev { border: 1px solid #ccc; margin: 4px 0; padding: 2px 8px; }
details.ev > summary { cursor: pointer; }
details.ev:target { outline: 2px solid #111; }
pre { background: #f4f4f4; padding: 6px; overflow: auto; margin: 4px 0; }
pre.crash { background: #fde2e1; }
td.differs { font-weight: 600; }
.legend pre { background: none; padding: 0; }
"""

_SCRIPT = """
(function () {
  var boxes = Array.prototype.slice.call(document.querySelectorAll('#filters input[name=verdict]'));
  var peerSel = document.getElementById('peer');
  function peersOf(el) {
    try { return JSON.parse(el.getAttribute('data-peers') || '[]'); } catch (e) { return []; }
  }
  function apply() {
    var on = {};
    boxes.forEach(function (b) { if (b.checked) on[b.value] = true; });
    var peer = peerSel ? peerSel.value : '';
    function match(el) {
      return on[el.getAttribute('data-verdict')] === true &&
             (!peer || peersOf(el).indexOf(peer) >= 0);
    }
    document.querySelectorAll('td.cell').forEach(function (td) {
      td.classList.toggle('off', !match(td));
    });
    document.querySelectorAll('table.grid').forEach(function (t) {
      var rows = Array.prototype.slice.call(t.tBodies[0].rows);
      var head = t.tHead.rows[0].cells;
      rows.forEach(function (tr) {
        if (tr.hasAttribute('data-row')) tr.hidden = !tr.querySelector('td.cell:not(.off)');
      });
      for (var i = 1; i < head.length; i++) {
        var used = rows.some(function (tr) {
          var c = tr.cells[i];
          return tr.hasAttribute('data-row') && !tr.hidden && c && c.matches('td.cell:not(.off)');
        });
        head[i].hidden = !used;
        rows.forEach(function (tr) {
          if (tr.hasAttribute('data-row') && tr.cells[i]) tr.cells[i].hidden = !used;
        });
      }
      var group = null;
      rows.forEach(function (tr) {
        if (tr.classList.contains('group')) { group = tr; tr.hidden = true; }
        else if (group && !tr.hidden) group.hidden = false;
      });
    });
    document.querySelectorAll('details.ev').forEach(function (d) { d.hidden = !match(d); });
  }
  function openEvidence(id, scroll) {
    var d = document.getElementById(id);
    if (!d || !d.classList.contains('ev')) return;
    d.open = true;
    document.querySelectorAll('td.cell.selected').forEach(function (c) {
      c.classList.remove('selected');
    });
    var cell = document.querySelector('td.cell[data-ev="' + id + '"]');
    if (cell) cell.classList.add('selected');
    if (scroll) d.scrollIntoView();
  }
  var q = new URLSearchParams(window.location.search);
  if (q.has('verdict')) {
    var wanted = q.get('verdict').toLowerCase().split(',');
    boxes.forEach(function (b) {
      b.checked = wanted.indexOf(b.value) >= 0 || wanted.indexOf(b.getAttribute('data-label')) >= 0;
    });
  }
  if (q.has('peer') && peerSel) peerSel.value = q.get('peer');
  boxes.forEach(function (b) { b.addEventListener('change', apply); });
  if (peerSel) peerSel.addEventListener('change', apply);
  document.addEventListener('click', function (e) {
    var a = e.target.closest ? e.target.closest('td.cell a') : null;
    if (a) openEvidence(a.getAttribute('href').slice(1), false);
  });
  window.addEventListener('hashchange', function () {
    openEvidence(window.location.hash.slice(1), true);
  });
  apply();
  if (window.location.hash) openEvidence(window.location.hash.slice(1), true);
  document.body.setAttribute('data-ready', 'yes');
})();
"""

_CSP = ("default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
        "img-src 'none'; font-src 'none'; connect-src 'none'; base-uri 'none'; "
        "form-action 'none'")


def _peers_attr(peers: Sequence[str]) -> str:
    """The peer filter's attribute: JSON (ASCII only, so no control or bidirectional
    character survives) of the names as the <select> shows them, HTML-escaped."""
    return html.escape(json.dumps([printable(p) for p in peers], ensure_ascii=True), quote=True)


def _block(b: Block) -> str:
    title = f"<h4>{html_text(b.title)}</h4>" if b.title else ""
    if b.kind == "text":
        items = "".join(f"<li>{html_text(line)}</li>" for line in (b.lines or (b.text,)))
        return f"{title}<ul>{items}</ul>"
    if b.kind in ("pre", "crash"):
        cls = ' class="crash"' if b.kind == "crash" else ""
        return f"{title}<pre{cls}>{html_lines(b.text)}</pre>"
    if b.kind == "fields":
        body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>"
                       for row in b.rows)
        return f'{title}<table class="plain">{body}</table>'
    if b.kind == "compare":
        head = "".join(f"<th>{html_text(c)}</th>" for c in ("", *b.columns))
        body = ""
        for row in b.rows:
            differs = len(set(row[1:])) > 1
            cells = "".join(f'<td{" class=differs" if differs else ""}>{html_text(c)}</td>'
                            for c in row[1:])
            body += f"<tr><th>{html_text(row[0])}</th>{cells}</tr>"
        return f'{title}<table class="plain"><tr>{head}</tr>{body}</table>'
    if b.kind in ("frame", "terminate"):
        fields: list[tuple[str, str, str]] = []
        if b.kind == "terminate":
            fields = decode_terminate(b.data)
        elif looks_like_mpa(b.data):
            fields = decode_mpa_frame(b.data)
        table = ""
        if fields:
            table = '<table class="plain">' + "".join(
                "<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>"
                for row in fields) + "</table>"
        return (f"{title}{table}<pre>{html_lines(hex_dump(b.data))}</pre>"
                f"<p class=meta>{len(b.data)} octets</p>")
    return f"{title}<pre>{html_lines(b.text)}</pre>"


class _Ids:
    def __init__(self) -> None:
        self.n = 0
        self.evidence: list[str] = []

    def cell(self, c: HtmlCell) -> tuple[str, str]:
        """The grid <td> and remembers the evidence <details> for the list below."""
        self.n += 1
        ev = f"ev-{self.n}"
        outcome = c.outcome
        verdict = outcome.value if outcome else "none"
        cls = _CLASS[outcome] if outcome else ""
        peers = _peers_attr(c.peers)
        td = (f'<td class="cell {cls}" data-verdict="{verdict}" data-peers="{peers}" '
              f'data-ev="{ev}" title="{html_text(c.label)}"><a href="#{ev}">'
              f"{html_text(c.label)}</a></td>")
        badge = (f'<span class="badge {cls}">{outcome.label}</span> ' if outcome else "")
        body = "".join(_block(b) for b in c.blocks)
        self.evidence.append(
            f'<details class="ev" id="{ev}" data-verdict="{verdict}" data-peers="{peers}">'
            f"<summary>{badge}{html_text(c.heading)}: {html_text(c.label)}</summary>"
            f"{body}</details>")
        return td, ev


def _grid(g: HtmlGrid, ids: _Ids) -> str:
    # The corner is ours (a backslash in "initiator \ responder"): escaped for HTML only.
    head = f'<th class="corner">{html.escape(g.corner)}</th>' + "".join(
        f'<th class="col">{html_text(c)}</th>' for c in g.cols)
    body = []
    group = None
    for r in g.rows:
        if g.groups is not None and g.groups.get(r) != group:
            group = g.groups.get(r)
            if group:
                body.append(f'<tr class="group"><th colspan="{len(g.cols) + 1}">'
                            f"{html_text(group)}</th></tr>")
        cells = []
        for c in g.cols:
            cell = g.cells.get((r, c))
            cells.append(ids.cell(cell)[0] if cell else '<td class="empty"></td>')
        body.append(f'<tr data-row="{html_text(r)}"><th class="row">{html_text(r)}</th>'
                    + "".join(cells) + "</tr>")
    note = f'<p class="meta">{html_text(g.note)}</p>' if g.note else ""
    return (f"<section><h2>{html_text(g.heading)}</h2>{note}<table class=\"grid\">"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></section>")


def _table(t: HtmlTable) -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in t.header)
    rows = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>"
                   for row in t.rows)
    note = f'<p class="meta">{html_text(t.note)}</p>' if t.note else ""
    return (f"<section><h2>{html_text(t.heading)}</h2>{note}<table class=\"plain\">"
            f"<tr>{head}</tr>{rows}</table></section>")


def render_page(page: HtmlPage) -> str:
    """The whole document."""
    ids = _Ids()
    sections = "".join(_grid(s, ids) if isinstance(s, HtmlGrid) else _table(s)
                       for s in page.sections)
    peers = sorted({p for s in page.sections if isinstance(s, HtmlGrid)
                    for c in s.cells.values() for p in c.peers})
    total = sum(page.summary.values())
    counts = " ".join(f'<span class="badge {_CLASS[o]}">{page.summary.get(o, 0)} {o.label}'
                      f"</span>" for o in Outcome)
    boxes = "".join(f'<label><input type="checkbox" name="verdict" value="{o.value}" '
                    f'data-label="{o.label.lower()}" checked> {o.label}</label>'
                    for o in Outcome)
    options = "".join(f'<option value="{html_text(p)}">{html_text(p)}</option>' for p in peers)
    env = "".join(f"<tr><th>{html_text(k)}</th><td>{html_text(v)}</td></tr>"
                  for k, v in page.environment.items())
    legend = "\n".join([LEGEND, *page.legend])
    verdict = (f'<p class="verdict-line">{html_text(page.verdict)}</p>' if page.verdict else "")
    names = {o: o.label.lower() for o in Outcome}
    css = _CSS % ({names[o]: COLOURS[o] for o in Outcome}
                  | {names[o] + "_badge": _lighter(COLOURS[o]) for o in Outcome})
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{_CSP}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html_text(page.title)}</title>
<style>{css}</style></head>
<body>
<header><h1>{html_text(page.title)}</h1>
<p class="meta">generated {html_text(page.generated_at)}; {total} cells: {counts}</p>
{verdict}
<form id="filters">verdict: {boxes}
<label>peer: <select id="peer"><option value="">all</option>{options}</select></label></form>
</header>
<main>{sections}
<section class="legend"><h2>Legend</h2><pre>{html_lines(legend)}</pre></section>
<section id="evidence"><h2>Evidence, cell by cell</h2>{"".join(ids.evidence)}</section>
<section><h2>Environment</h2><table class="plain">{env}</table></section>
</main>
<script>{_SCRIPT}</script>
</body></html>
"""
