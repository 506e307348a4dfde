"""The HTML report: one self-contained page per run, the matrix as a coloured grid whose cells
open their evidence, filters by verdict and peer, everything a peer sent escaped, nothing
fetched from anywhere.

The page is checked as markup here, and in a real browser: Debian's headless Chromium
renders it, and the screenshot (a PNG read with zlib and struct) must show the grid: each
verdict's fill in proportion to its cells, the columns where they belong, and the filters
taking cells away. Chromium's network log must show no request, where a control page with
one shows it.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rdma_interop import wire
from rdma_interop.device_matrix import DeviceCell, DeviceMatrix, NodeInventory
from rdma_interop.html_page import COLOURS
from rdma_interop.matrix import CaseResult, Evidence, InteropMatrix, Outcome, SideError
from rdma_interop.wire_text import cause_text, decode_mpa_frame, decode_terminate, hex_dump

HOSTILE = ('<img src="http://evil.invalid/i.png"><script src=//evil.invalid/s.js></script>'
           '<link rel=stylesheet href="https://evil.invalid/c.css"> "quoted" \'single\' & '
           '\x1b[2J\u202e</details></pre>')
SIW_TERMINATE = bytes.fromhex("0026414700000000000000020000000100000000110003000010c14025b02500"
                              "000055ff43cb53405e79ed05")
SIW_REQUEST = bytes.fromhex("4d504120494420526571204672616d655f02000480108010")


# ---- the markup ------------------------------------------------------------------------


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data
        self.text.append(data)


def parse(page: str) -> Tags:
    tags = Tags()
    tags.feed(page)
    return tags


def hostile_matrix() -> InteropMatrix:
    m = InteropMatrix(f"title {HOSTILE}", initiators=["siw"], responders=["siw", HOSTILE],
                      environment={"lab": HOSTILE})
    m.add(CaseResult("siw", HOSTILE, Outcome.FAIL, reason=HOSTILE, notes=[HOSTILE],
                     expected=HOSTILE, negotiated={"rtr": HOSTILE, HOSTILE: 1},
                     responder_error=SideError(failure="peer_rejected", detail=HOSTILE,
                                               terminate={"layer": 2, "etype": 0, "code": 7}),
                     evidence=[Evidence("log", HOSTILE, HOSTILE),
                               Evidence.frame(HOSTILE, HOSTILE.encode("utf-8", "replace"))]))
    m.add(CaseResult("siw", "siw", Outcome.PASS, negotiated={"rtr": "write"}))
    return m


def test_everything_a_peer_sent_is_escaped_in_text_and_attributes() -> None:
    page = hostile_matrix().to_html()
    assert "<img" not in page and "<link" not in page and page.count("<script") == 1
    assert "\x1b" not in page and "\u202e" not in page
    assert "</details></pre>" not in page
    assert "&lt;img src=&quot;http://evil.invalid/i.png&quot;&gt;" in page
    assert "\\x1b[2J\\u202e" in page
    tags = parse(page)
    # The peer filter's attribute carries the name as JSON, intact once unescaped.
    peers = [json.loads(a["data-peers"] or "[]") for t, a in tags.tags if "data-peers" in a]
    assert any(p == ["siw", HOSTILE.replace("\x1b", "\\x1b").replace("\u202e", "\\u202e")]
               for p in peers)


def test_the_page_fetches_nothing_from_anywhere() -> None:
    page = hostile_matrix().to_html()
    tags = parse(page)
    names = {t for t, _ in tags.tags}
    assert not names & {"img", "link", "iframe", "object", "embed", "base", "video", "audio",
                        "source", "frame"}
    for tag, attrs in tags.tags:
        assert "src" not in attrs and "srcset" not in attrs and "action" not in attrs, (tag, attrs)
        if "href" in attrs:
            assert (attrs["href"] or "").startswith("#"), (tag, attrs)
    assert "url(" not in tags.style and "@import" not in tags.style
    csp = next(a["content"] for t, a in tags.tags
               if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp is not None and "default-src 'none'" in csp and "connect-src 'none'" in csp


def test_each_cell_opens_its_evidence() -> None:
    m = InteropMatrix("kernel", layout="checks", peers=["ours->siw"])
    m.add(CaseResult("fault:write_invalid_stag", "kernel-siw", Outcome.FINDING,
                     reason="deviation", group="faults", check="write_invalid_stag",
                     peer="ours->siw", notes=["the M flag is clear"],
                     negotiated={"revision": 2, "crc": True},
                     responder_negotiated={"revision": 2, "crc": False},
                     evidence=[Evidence.frame("our MPA Request", SIW_REQUEST),
                               Evidence.terminate("kernel siw's Terminate (FPDU)", SIW_TERMINATE),
                               Evidence.crash("kernel BUG at iwcm.c:969!", "trace line"),
                               Evidence("text", "deviations", "the M flag\nthe D flag")]))
    page = m.to_html()
    tags = parse(page)
    cell = next(a for t, a in tags.tags if t == "td" and "cell" in (a.get("class") or ""))
    ev = cell["data-ev"]
    link = next(a for t, a in tags.tags if t == "a" and a.get("href") == f"#{ev}")
    assert link is not None
    details = next(a for t, a in tags.tags if t == "details" and a.get("id") == ev)
    assert details["data-verdict"] == "finding"
    text = " ".join(tags.text)
    assert "0000  4d 50 41 20 49 44 20 52  65 71 20 46 72 61 6d 65  |MPA ID Req Frame|" in text
    assert "MPA Request" in text and "reserved bits" in text  # the Request decoded
    assert "DDP/tagged buffer/invalid STag (1/1/0x00)" in text  # the Terminate decoded
    assert "kernel BUG at iwcm.c:969!" in text and "trace line" in text
    assert "<li>the M flag</li><li>the D flag</li>" in page  # one item per line
    # What each side negotiated, side by side; the cells that differ marked.
    assert '<td class=differs>True</td><td class=differs>False</td>' in page


def test_a_device_matrix_and_its_junit_say_finding_without_failing() -> None:
    m = DeviceMatrix()
    m.nodes = [NodeInventory("n1", "ok", "", [{"name": "siw0", "kind": "iwarp"}])]
    m.add(DeviceCell("verbs-check", "n1/siw0", "n2/siw0", "iwarp", "finding",
                     "bad-rkey-read: expected remote_access_error, got flushed"))
    m.add(DeviceCell("rping", "n1/siw0", "n2/siw0", "iwarp", "pass"))
    page = m.to_html()
    assert 'class="cell v-finding" data-verdict="finding"' in page
    assert "got flushed" in page
    assert m.ok() and not m.ok(strict=True)
    assert m.to_junit().getroot().find(".//failure") is None
    failure = m.to_junit(strict=True).getroot().find(".//failure")
    assert failure is not None and failure.get("type") == "finding"


# ---- the decoders --------------------------------------------------------------------


def test_cause_names_match_the_cpp_ones_for_every_code() -> None:
    for layer in range(4):
        for etype in range(4):
            for code in [*range(0x0B), 0xFF]:
                assert cause_text(layer, etype, code) == wire._core.describe_cause(
                    layer, etype, code), (layer, etype, code)


def test_a_terminate_fpdu_is_decoded_field_by_field() -> None:
    fields = {name: (value, meaning) for name, value, meaning in decode_terminate(SIW_TERMINATE)}
    assert fields["ULPDU_Length"][0] == "38"
    assert fields["QN / MSN / MO"][0] == "2 / 1 / 0"
    assert fields["Layer / EType / Code"] == ("1 / 1 / 0x00",
                                              "DDP/tagged buffer/invalid STag (1/1/0x00)")
    assert fields["M / D / R"][0] == "0 / 0 / 0" and "0x0300" in fields["M / D / R"][1]
    assert fields["following octets"][0] == "0010c14025b02500000055ff43cb5340"
    assert fields["CRC32c"][0] == "5e79ed05"
    ulpdu = {name: value for name, value, _ in decode_terminate(SIW_TERMINATE[2:40])}
    assert "ULPDU_Length" not in ulpdu and ulpdu["Layer / EType / Code"] == "1 / 1 / 0x00"
    assert decode_terminate(b"\x00\x01")[-1][0] == "octets"  # too short: octets, no exception


def test_an_mpa_request_is_decoded() -> None:
    fields = {name: (value, meaning) for name, value, meaning in decode_mpa_frame(SIW_REQUEST)}
    assert fields["Key"] == ("MPA ID Req Frame", "MPA Request")
    assert fields["flags"] == ("0x5f", "C, enhanced")
    assert fields["reserved bits"][0] == "0xf"
    assert fields["IRD"] == ("16", "peer-to-peer") and fields["ORD"] == ("16", "RTR Write")
    assert hex_dump(b"AB\x00") == "0000  " + "41 42 00".ljust(23) + "  " + " " * 23 + "  |AB.|"


# ---- in a real browser -----------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (900, 640)


@pytest.fixture(scope="module")
def chromium() -> str:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (tools/install-deps.sh installs Debian's)")
    return CHROMIUM


def browse(chromium: str, tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on `url`: no sandbox (we are root), no GPU, nothing in the
    background, every host name unresolvable, a fresh profile."""
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--disable-extensions", "--hide-scrollbars",
            "--force-device-scale-factor=1", f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={WINDOW[0]},{WINDOW[1]}",
            *extra, url]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": str(tmp)})
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def read_png(path: Path) -> tuple[int, int, int, bytes]:
    """(width, height, channels, pixels) of an 8-bit RGB or RGBA PNG, rows unfiltered."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, colour_type, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, header
    ch = 3 if colour_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * ch
    out = bytearray()
    prev = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:
            for x in range(ch, stride):
                line[x] = (line[x] + line[x - ch]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif kind == 3:
            for x in range(stride):
                left = line[x - ch] if x >= ch else 0
                line[x] = (line[x] + ((left + prev[x]) >> 1)) & 0xFF
        elif kind == 4:
            for x in range(stride):
                a = line[x - ch] if x >= ch else 0
                b = prev[x]
                c = prev[x - ch] if x >= ch else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        out += line
        prev = line
    return width, height, ch, bytes(out)


Box = tuple[int, int, int, int]  # x0, y0, x1, y1


def verdict_pixels(png: Path) -> dict[Outcome, tuple[int, Box | None]]:
    """Per verdict: how many pixels have its exact grid fill, and their bounding box."""
    width, height, ch, px = read_png(png)
    want = {bytes(int(c[i:i + 2], 16) for i in (1, 3, 5)): o for o, c in COLOURS.items()}
    count = {o: 0 for o in Outcome}
    box: dict[Outcome, list[int]] = {}
    for y in range(height):
        row = px[y * width * ch:(y + 1) * width * ch]
        for x in range(width):
            o = want.get(row[x * ch:x * ch + 3])
            if o is not None:
                count[o] += 1
                b = box.setdefault(o, [x, y, x, y])
                b[0], b[1], b[2], b[3] = min(b[0], x), min(b[1], y), max(b[2], x), max(b[3], y)
    return {o: (count[o], (box[o][0], box[o][1], box[o][2], box[o][3]) if o in box else None)
            for o in Outcome}


#: The grid the browser draws: 3 initiators x 4 responders; column res3 is all XFAIL,
#: column res4 FINDING, FAIL, FINDING; 6 PASS, 3 XFAIL, 2 FINDING, 1 FAIL, no SKIP.
LAYOUT = {"ini1": [Outcome.PASS, Outcome.PASS, Outcome.XFAIL, Outcome.FINDING],
          "ini2": [Outcome.PASS, Outcome.PASS, Outcome.XFAIL, Outcome.FAIL],
          "ini3": [Outcome.PASS, Outcome.PASS, Outcome.XFAIL, Outcome.FINDING]}


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    m = InteropMatrix("browser test", initiators=list(LAYOUT),
                      responders=["res1", "res2", "res3", "res4"], environment={"lab": HOSTILE})
    for ini, row in LAYOUT.items():
        for j, outcome in enumerate(row):
            m.add(CaseResult(ini, f"res{j + 1}", outcome, negotiated={"rtr": "read"},
                             expected_failure="rtr", reason="dev", notes=[HOSTILE],
                             evidence=[Evidence.terminate("a Terminate", SIW_TERMINATE)]))
    return m.write_html(tmp_path_factory.mktemp("html") / "matrix.html")


@pytest.fixture(scope="module")
def full_render(chromium: str, page: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[dict[Outcome, tuple[int, Box | None]], str]]:
    """The page's screenshot, read; and Chromium's network log of the visit."""
    tmp = tmp_path_factory.mktemp("chromium")
    png, netlog = tmp / "full.png", tmp / "net.json"
    browse(chromium, tmp, page.as_uri(), f"--screenshot={png}", f"--log-net-log={netlog}",
           "--net-log-capture-mode=Everything")
    yield verdict_pixels(png), netlog.read_text()


def test_the_browser_draws_the_grid_in_its_verdicts_colours(
        full_render: tuple[dict[Outcome, tuple[int, Box | None]], str]) -> None:
    pixels, _ = full_render
    cells = {o: sum(row.count(o) for row in LAYOUT.values()) for o in Outcome}
    area = sum(n for n, _ in pixels.values()) / sum(cells.values())  # one cell's fill
    assert area > 1500, pixels  # a cell of about 115 x 27 pixels, less its text
    for outcome, (n, _) in pixels.items():
        assert n == pytest.approx(cells[outcome] * area, rel=0.2, abs=1), (outcome, pixels)
    # Where they are: PASS in the first two columns, XFAIL right of them, FINDING and FAIL
    # in the last column, FAIL between the two FINDINGs; every column three rows high.
    (_, p), (_, x), (_, f), (_, fail) = (pixels[o] for o in (Outcome.PASS, Outcome.XFAIL,
                                                                Outcome.FINDING, Outcome.FAIL))
    assert p and x and f and fail
    assert p[2] < x[0] and x[2] < f[0] and x[2] < fail[0]
    assert f[1] < fail[1] and fail[3] < f[3]
    assert abs((p[3] - p[1]) - (x[3] - x[1])) <= 2 and abs((f[3] - f[1]) - (x[3] - x[1])) <= 2
    assert (p[2] - p[0]) > 1.8 * (x[2] - x[0])  # two columns against one


@pytest.mark.parametrize("query,shown", [
    ("?verdict=finding", {Outcome.FINDING: 2}),
    ("?peer=res3", {Outcome.XFAIL: 3}),
    ("?verdict=finding,fail&peer=res4", {Outcome.FINDING: 2, Outcome.FAIL: 1}),
])
def test_the_filters_take_the_other_cells_away(
        chromium: str, page: Path, tmp_path: Path, query: str, shown: dict[Outcome, int],
        full_render: tuple[dict[Outcome, tuple[int, Box | None]], str]) -> None:
    png = tmp_path / "filtered.png"
    browse(chromium, tmp_path, page.as_uri() + query, f"--screenshot={png}")
    pixels = verdict_pixels(png)
    full, _ = full_render
    for outcome in Outcome:
        n = pixels[outcome][0]
        if outcome in shown:
            per_cell = full[outcome][0] / sum(r.count(outcome) for r in LAYOUT.values())
            assert n == pytest.approx(shown[outcome] * per_cell, rel=0.1), (outcome, pixels)
        else:
            assert n == 0, (outcome, pixels)


def test_a_cell_address_opens_its_evidence(chromium: str, page: Path, tmp_path: Path) -> None:
    dom = browse(chromium, tmp_path, page.as_uri() + "#ev-4", "--dump-dom").stdout
    tags = parse(dom)
    body = next(a for t, a in tags.tags if t == "body")
    assert body.get("data-ready") == "yes"  # the script ran
    details = {a.get("id"): a for t, a in tags.tags if t == "details"}
    assert "open" in details["ev-4"] and "open" not in details["ev-3"]
    selected = [a for t, a in tags.tags if t == "td" and "selected" in (a.get("class") or "")]
    assert [a["data-ev"] for a in selected] == ["ev-4"]


def page_requests(text: str) -> list[str]:
    """The URLs the page asked for, from Chromium's network log: each request job started
    for a document (its initiator an origin, "null" for file://, or its isolation key the
    file:// page's). The browser's own background requests (network time, the component
    updater: initiator "not an origin", no page in their key) are not the page's."""
    log = json.loads(text)
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if event.get("type") != start_job or "url" not in params:
            continue
        key = str(params.get("network_isolation_key", ""))
        if params.get("initiator") != "not an origin" or key.startswith("file://"):
            urls.append(str(params["url"]))
    return urls


def test_the_browser_fetches_nothing_for_the_page(
        chromium: str, tmp_path: Path,
        full_render: tuple[dict[Outcome, tuple[int, Box | None]], str]) -> None:
    _, log = full_render
    assert page_requests(log) == [] and "evil.invalid" not in log
    # The control: a page that does fetch shows up in the log, so the check above can fail.
    control = tmp_path / "control.html"
    control.write_text('<!DOCTYPE html><img src="http://evil.invalid/i.png">')
    netlog = tmp_path / "control.json"
    browse(chromium, tmp_path, control.as_uri(), "--dump-dom", f"--log-net-log={netlog}",
           "--net-log-capture-mode=Everything")
    assert page_requests(netlog.read_text()) == ["http://evil.invalid/i.png"]
