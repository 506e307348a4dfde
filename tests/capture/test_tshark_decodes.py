"""Traffic our wire encoders produce, sent over a real loopback TCP connection, decodes in
tshark as iWARP (MPA, RFC 5044; DDP, RFC 5041; RDMAP, RFC 5040).

Each case captures one session of tests/capture/iwarp_capture_peer with tcpdump on `lo` and
dissects the pcap with tshark:

  i->r MPA Request          r->i MPA Reply
  i->r Send                 i->r RDMA Write (1500 octets)   i->r RDMA Read Request
  r->i RDMA Read Response   i->r Send with Invalidate       i->r Send with Solicited Event
  r->i Terminate

What tshark 4.0 does with it (found by running it, Wireshark 4.0.17 on Debian 12):
- The MPA dissector is a heuristic on TCP that keys on the MPA Request/Reply in the same
  capture (it cannot be forced with `-d tcp.port==N,iwarp_mpa`). We run it with
  `tcp.try_heuristic_first` so a port some other dissector registered cannot hide it.
- CRC on: every FPDU shows "CRC check: 0x........ (Good CRC32)" (field iwarp_mpa.crc_check;
  there is no separate status field, the verdict is only in the field's display text).
  CRC off: the field is iwarp_mpa.crc ("CRC: 0x00000000") and nothing is checked.
- Markers: decoded (iwarp_mpa.markers, .marker_res, .marker_fpduptr), placed from the first
  FPDU of each direction, and the CRC still checks - so tshark agrees with our placement.
- Revision 2 (RFC 6581): the FPDUs decode, but the Request/Reply frames are only understood
  as RFC 5044: the Enhanced flag shows as "Reserved: 0x10", the IRD/ORD words are raw
  private data, and `-z expert` warns "Res field is NOT set to zero as required by RFC 5044"
  and "Rev field is NOT set to one as required by RFC 5044" (see test_rev2_...).
- Two heuristic sub-dissectors on iwarp_ddp_rdmap (RPC-over-RDMA `rpcrdma_iwarp`, SMB Direct
  `smb_direct_iwarp`) look into every Send payload; RPCoRDMA claims our plain-text Send and
  reports "[Malformed Packet: RPCoRDMA]". That says nothing about the iWARP bytes, so the
  main test disables both; test_default_heuristics_... pins down that this is all it is.

Needs root (capturing on lo), tcpdump, tshark, and the built peer: it is looked up in
$RDMA_INTEROP_BUILD (a CMake build dir) or build/ at the repository root.
"""

from __future__ import annotations

import dataclasses
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Optional

import pytest

from tests.support.paths import build_dir, build_dir_named

PEER_NAME = "iwarp_capture_peer"
PEER_EXIT_PORT_IN_USE = 3
MARKER_INTERVAL = 512  # RFC 5044 s4.3

# Disabled for the main checks: they dissect Send payloads as their own protocols.
PAYLOAD_HEURISTICS = ("rpcrdma_iwarp", "smb_direct_iwarp")
# The two warnings tshark 4.0 gives every revision-2 Request/Reply (it knows only RFC 5044).
RFC5044_ONLY_WARNINGS = (
    "Res field is NOT set to zero as required by RFC 5044",
    "Rev field is NOT set to one as required by RFC 5044",
)

# Must match the constants in iwarp_capture_peer.cc.
PRIVATE_DATA = b"rdma-interop capture"
IRD_ORD = 16


# ---- The session we expect to see ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ExpectedFpdu:
    sender: str  # "initiator" or "responder"
    name: str  # tshark's name for the opcode (packet-iwarp-ddp-rdmap.c)
    opcode: int  # RFC 5040 s4.3
    ulpdu_length: int  # DDP/RDMAP header + payload, what MPA's ULPDU_Length says
    # Field name -> int (compared with the field's value) or bytes (its raw octets).
    fields: dict


EXPECTED_FPDUS = (
    ExpectedFpdu("initiator", "Send", 0x3, 18 + 13,
                 {"iwarp_ddp.tagged_flag": 0, "iwarp_ddp.last_flag": 1, "iwarp_ddp.qn": 0,
                  "iwarp_ddp.msn": 1, "iwarp_ddp.mo": 0}),
    ExpectedFpdu("initiator", "Write", 0x0, 14 + 1500,
                 {"iwarp_ddp.tagged_flag": 1, "iwarp_ddp.last_flag": 1,
                  "iwarp_ddp.stag": 0x1A2B3C01, "iwarp_ddp.tagged_offset": 0x1000}),
    ExpectedFpdu("initiator", "Read Request", 0x1, 18 + 28,
                 {"iwarp_ddp.qn": 1, "iwarp_ddp.msn": 1, "iwarp_ddp.mo": 0,
                  "iwarp_rdma.sinkstag": 0x1A2B3C02, "iwarp_rdma.sinkto": 0x2000,
                  "iwarp_rdma.rdmardsz": 700, "iwarp_rdma.srcstag": 0x5E6F7A03,
                  "iwarp_rdma.srcto": 0x3000}),
    ExpectedFpdu("responder", "Read Response", 0x2, 14 + 700,
                 {"iwarp_ddp.tagged_flag": 1, "iwarp_ddp.last_flag": 1,
                  "iwarp_ddp.stag": 0x1A2B3C02, "iwarp_ddp.tagged_offset": 0x2000}),
    ExpectedFpdu("initiator", "Send with Invalidate", 0x4, 18 + 20,
                 {"iwarp_ddp.qn": 0, "iwarp_ddp.msn": 2, "iwarp_rdma.inval_stag": 0x5E6F7A04}),
    ExpectedFpdu("initiator", "Send with SE", 0x5, 18 + 9,
                 {"iwarp_ddp.qn": 0, "iwarp_ddp.msn": 3}),
    # RDMAP / remote protection / invalid STag, quoting the RDMA Write: M and D set, DDP
    # segment length 1514, the Write's 14-octet tagged header.
    ExpectedFpdu("responder", "Terminate", 0x7, 18 + 4 + 2 + 14,
                 {"iwarp_ddp.qn": 2, "iwarp_ddp.msn": 1, "iwarp_ddp.mo": 0,
                  "iwarp_rdma.term_layer": 0, "iwarp_rdma.term_etype_rdma": 1,
                  "iwarp_rdma.term_errcode_rdma": 0, "iwarp_rdma.term_hdrct_m": 1,
                  "iwarp_rdma.hdrct_d": 1, "iwarp_rdma.hdrct_r": 0,
                  "iwarp_rdma.term_ddp_seg_len": bytes.fromhex("05ea"),
                  "iwarp_rdma.term_ddp_h": bytes.fromhex("c1401a2b3c010000000000001000")}),
)


@dataclasses.dataclass(frozen=True)
class PeerConfig:
    revision: int
    crc: bool
    markers: bool

    @property
    def id(self) -> str:
        return f"rev{self.revision}-{'crc' if self.crc else 'nocrc'}" + (
            "-markers" if self.markers else "")

    def args(self) -> list[str]:
        args = ["--revision", str(self.revision), "--crc" if self.crc else "--no-crc"]
        return args + (["--markers"] if self.markers else [])

    def private_data(self) -> bytes:
        if self.revision == 2:
            # RFC 6581 s3: IRD word, ORD word (no peer-to-peer, no RTR) before the app's data.
            return IRD_ORD.to_bytes(2, "big") + IRD_ORD.to_bytes(2, "big") + PRIVATE_DATA
        return PRIVATE_DATA


CONFIGS = [PeerConfig(rev, crc, markers)
           for rev in (1, 2) for crc in (True, False) for markers in (False, True)]


# ---- Tools and the peer binary ---------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Tools:
    tcpdump: str
    tshark: str
    tshark_version: str
    peer: Path


def _find_peer() -> Path:
    build = build_dir()
    candidates = [build / "tests" / "capture" / PEER_NAME, build / PEER_NAME]
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    where = (f"RDMA_INTEROP_BUILD={build}" if build_dir_named()
             else f"{build} (set RDMA_INTEROP_BUILD)")
    message = (f"{PEER_NAME} not built in {where}: cmake --build <build dir> "
               f"--target {PEER_NAME}")
    if build_dir_named():  # the caller named a build dir: a missing binary is an error
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def tools() -> Tools:
    if os.geteuid() != 0:
        pytest.skip("capturing on lo needs root (CAP_NET_RAW) for tcpdump")
    tcpdump = shutil.which("tcpdump") or (
        "/usr/bin/tcpdump" if os.path.exists("/usr/bin/tcpdump") else None)
    if not tcpdump:
        pytest.skip("tcpdump is not installed (apt-get install tcpdump)")
    tshark = shutil.which("tshark")
    if not tshark:
        pytest.skip("tshark is not installed (apt-get install tshark)")
    version = subprocess.run([tshark, "--version"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    return Tools(tcpdump, tshark, version, _find_peer())


# ---- Capturing one session -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackCapture:
    """tcpdump on lo for TCP and UDP `port`, written packet by packet to `pcap`.

    Readiness and completeness are proven, not slept for: a UDP datagram carrying a fresh
    token goes to the port until the token shows up in the file (the capture is running),
    and another one after the session (everything before it has been written).
    """

    def __init__(self, tcpdump: str, port: int, pcap: Path):
        self.port = port
        self.pcap = pcap
        self.log = pcap.with_suffix(".tcpdump.log")
        self.nonce = secrets.token_hex(8)
        self._log_file = open(self.log, "wb")
        # --immediate-mode: hand each packet over at once (no 1 s ring-block timeout, whose
        # packets a SIGINT would lose). -U: write each packet to the file as it comes.
        # -Z root: do not drop to the tcpdump user, who cannot write into a 0700 temp dir.
        self.proc: Optional[subprocess.Popen] = subprocess.Popen(
            [tcpdump, "-i", "lo", "-n", "-s", "0", "--immediate-mode", "-U", "-Z", "root",
             "-w", str(pcap), f"tcp port {port} or udp port {port}"],
            stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT)

    def __enter__(self) -> "LoopbackCapture":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def _log_text(self) -> str:
        return self.log.read_text(errors="replace").strip()

    def _mark_and_wait(self, what: str, timeout: float = 15.0) -> None:
        token = f"rdma-interop-capture-{what}-{self.nonce}".encode()
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    pytest.fail(f"tcpdump exited with {self.proc.returncode}: {self._log_text()}")
                udp.sendto(token, ("127.0.0.1", self.port))
                time.sleep(0.05)
                if self.pcap.exists() and token in self.pcap.read_bytes():
                    return
        pytest.fail(f"tcpdump did not record the {what} marker within {timeout} s: "
                    f"{self._log_text()}")

    def wait_until_running(self) -> None:
        self._mark_and_wait("start")

    def stop(self) -> None:
        """Flushes (end marker seen), then stops tcpdump with SIGINT as a user would."""
        self._mark_and_wait("end")
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("tcpdump did not exit within 10 s of SIGINT")
        self.proc = None
        assert rc == 0, f"tcpdump exited with {rc}: {self._log_text()}"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self._log_file.close()


@dataclasses.dataclass(frozen=True)
class CapturedSession:
    config: PeerConfig
    port: int
    pcap: Path
    summary: str


def capture_session(tools: Tools, tmp_path: Path, config: PeerConfig) -> CapturedSession:
    for _attempt in range(5):
        port = _free_port()
        pcap = tmp_path / f"{config.id}-{port}.pcap"
        with LoopbackCapture(tools.tcpdump, port, pcap) as capture:
            capture.wait_until_running()
            peer = subprocess.run([str(tools.peer), *config.args(), str(port)],
                                  capture_output=True, text=True, timeout=60)
            if peer.returncode == PEER_EXIT_PORT_IN_USE:
                continue  # someone took the port between our probe and the peer's bind
            capture.stop()
        assert peer.returncode == 0, (
            f"{PEER_NAME} {' '.join(config.args())} {port} failed ({peer.returncode}): "
            f"{peer.stderr.strip()}")
        summary = peer.stdout.strip()
        assert summary.startswith(f"{PEER_NAME}: ok port={port} rev={config.revision} "), summary
        assert len(summary.splitlines()) == 1, f"the peer printed more than a summary: {summary}"
        return CapturedSession(config, port, pcap, summary)
    pytest.fail("no free port after 5 attempts")


class SessionCache:
    """One capture per configuration, shared by the tests of a module."""

    def __init__(self, tools: Tools, tmp_path_factory: pytest.TempPathFactory):
        self._tools = tools
        self._tmp = tmp_path_factory
        self._cache: dict[PeerConfig, CapturedSession] = {}

    def get(self, config: PeerConfig) -> CapturedSession:
        if config not in self._cache:
            self._cache[config] = capture_session(self._tools, self._tmp.mktemp(config.id),
                                                  config)
        return self._cache[config]


@pytest.fixture(scope="module")
def sessions(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> SessionCache:
    return SessionCache(tools, tmp_path_factory)


# ---- Reading tshark's dissection -------------------------------------------------------


@dataclasses.dataclass
class Packet:
    number: int
    srcport: int
    dstport: int
    seq: int  # relative
    tcp_len: int
    protos: list[str]  # <proto> names in order
    fields: dict  # name -> list of <field> elements in tree order
    proto_shownames: list[str]

    def all(self, name: str) -> list[ET.Element]:
        return self.fields.get(name, [])

    def has(self, name: str) -> bool:
        return name in self.fields

    def show(self, name: str) -> str:
        found = self.all(name)
        assert found, f"frame {self.number}: tshark shows no {name}"
        return found[0].get("show", "")

    def int(self, name: str) -> int:
        return int(self.show(name), 0)

    def raw(self, name: str) -> bytes:
        found = self.all(name)
        assert found, f"frame {self.number}: tshark shows no {name}"
        return bytes.fromhex(found[0].get("value", ""))

    def showname(self, name: str) -> str:
        found = self.all(name)
        assert found, f"frame {self.number}: tshark shows no {name}"
        return found[0].get("showname", "")


def tshark_args(tools: Tools, session: CapturedSession, heuristics_off: bool = True) -> list:
    args = [tools.tshark, "-r", str(session.pcap), "-n",
            "-o", "tcp.try_heuristic_first:TRUE"]
    if heuristics_off:
        for h in PAYLOAD_HEURISTICS:
            args += ["--disable-heuristic", h]
    return args


def dissect(tools: Tools, session: CapturedSession, heuristics_off: bool = True) -> list[Packet]:
    """Every TCP segment with data on the session's port, as tshark dissects it.

    A (spurious) retransmission - e.g. a tail loss probe on loopback - repeats a segment
    already dissected; tshark hands it to no upper layer, so it is left out here.
    """
    display = f"tcp.port == {session.port} && tcp.len > 0 && !tcp.analysis.retransmission"
    out = subprocess.run(tshark_args(tools, session, heuristics_off)
                         + ["-Y", display, "-T", "pdml"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"tshark failed: {out.stderr}"
    packets = []
    for p in ET.fromstring(out.stdout).iter("packet"):
        fields: dict[str, list[ET.Element]] = {}
        for f in p.iter("field"):
            fields.setdefault(f.get("name", ""), []).append(f)
        protos = [pr.get("name", "") for pr in p.iter("proto")]
        shownames = [pr.get("showname", "") for pr in p.iter("proto")]
        first = lambda n: fields[n][0].get("show", "")  # noqa: E731
        packets.append(Packet(int(first("frame.number")), int(first("tcp.srcport")),
                              int(first("tcp.dstport")), int(first("tcp.seq")),
                              int(first("tcp.len")), protos, fields, shownames))
    return packets


@dataclasses.dataclass(frozen=True)
class ExpertRow:
    severity: str  # "Errors", "Warns", "Notes", "Chats", "Comments"
    frequency: int
    protocol: str  # as -z expert prints it, e.g. "IWARP_MPA", "TCP"
    summary: str


def expert_summary(tools: Tools, session: CapturedSession,
                   heuristics_off: bool = True) -> list[ExpertRow]:
    """The rows of `tshark -z expert`.

    The MPA dissector raises some expert infos without a tree item; those appear only here,
    not in PDML/-T fields.
    """
    out = subprocess.run(tshark_args(tools, session, heuristics_off)
                         + ["-q", "-z", "expert"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"tshark failed: {out.stderr}"
    rows, severity = [], None
    for line in out.stdout.splitlines():
        s = line.strip()
        head = s.split(" (")[0]
        if head in ("Errors", "Warns", "Notes", "Chats", "Comments"):
            severity = head
            continue
        parts = s.split(None, 3)
        if severity and len(parts) == 4 and parts[0].isdigit():
            rows.append(ExpertRow(severity, int(parts[0]), parts[2], parts[3]))
    return rows


def tshark_fields(tools: Tools) -> list[str]:
    out = subprocess.run([tools.tshark, "-G", "fields"], capture_output=True, text=True,
                         check=True, timeout=120)
    return [line.split("\t")[2] for line in out.stdout.splitlines()
            if line.startswith("F\t") and line.count("\t") >= 4]


# ---- Checks ----------------------------------------------------------------------------


def check_mpa_frame(pkt: Packet, key: str, config: PeerConfig) -> None:
    assert pkt.has(f"iwarp_mpa.key.{key}"), f"frame {pkt.number}: no MPA {key} key"
    assert pkt.int("iwarp_mpa.crc_flag") == int(config.crc)
    assert pkt.int("iwarp_mpa.marker_flag") == int(config.markers)
    assert pkt.int("iwarp_mpa.rej_flag") == 0
    assert pkt.int("iwarp_mpa.rev") == config.revision
    pd = config.private_data()
    assert pkt.int("iwarp_mpa.pdlength") == len(pd)
    assert pkt.raw("iwarp_mpa.privatedata") == pd
    assert pkt.tcp_len == 20 + len(pd), f"frame {pkt.number}: MPA frame not alone in its segment"
    # tshark 4.0 knows no RFC 6581 Enhanced flag: it shows it as a reserved bit.
    assert pkt.int("iwarp_mpa.res") == (0x10 if config.revision == 2 else 0)


def check_fpdu(pkt: Packet, want: ExpectedFpdu, config: PeerConfig, stream_offset: int) -> None:
    where = f"frame {pkt.number} ({want.sender} {want.name})"
    assert "iwarp_ddp_rdmap" in pkt.protos, f"{where}: not dissected as iwarp_ddp_rdmap"
    assert pkt.has("iwarp_mpa.fpdu"), f"{where}: not an MPA FPDU"
    assert pkt.int("iwarp_rdma.opcode") == want.opcode, (
        f"{where}: opcode {pkt.showname('iwarp_rdma.opcode')}")
    assert want.name in pkt.showname("iwarp_rdma.opcode")
    assert pkt.int("iwarp_ddp.dv") == 1 and pkt.int("iwarp_rdma.version") == 1
    assert pkt.int("iwarp_mpa.ulpdulength") == want.ulpdu_length, where
    for name, value in want.fields.items():
        got = pkt.raw(name) if isinstance(value, bytes) else pkt.int(name)
        assert got == value, f"{where}: {name} is {got!r}, sent {value!r}"

    # RFC 5044 s4.1: length field + ULPDU + pad to 4 + CRC, plus markers.
    markers = [m for m in range(math.ceil(stream_offset / MARKER_INTERVAL) * MARKER_INTERVAL,
                                stream_offset + pkt.tcp_len, MARKER_INTERVAL)] \
        if config.markers else []
    unmarked = 2 + want.ulpdu_length + (-(2 + want.ulpdu_length) % 4) + 4
    assert pkt.tcp_len == unmarked + 4 * len(markers), (
        f"{where}: segment of {pkt.tcp_len} octets is not exactly one FPDU")

    if config.crc:
        verdict = pkt.showname("iwarp_mpa.crc_check")
        assert verdict.endswith("(Good CRC32)"), f"{where}: tshark says {verdict!r}"
        assert not pkt.has("iwarp_mpa.crc")
    else:
        # CRC not negotiated: the field is sent as zero and tshark checks nothing.
        assert not pkt.has("iwarp_mpa.crc_check"), f"{where}: tshark checked a CRC"
        assert pkt.int("iwarp_mpa.crc") == 0

    # RFC 5044 s4.3: a marker's FPDUPTR is the distance back to the FPDU's ULPDU_Length
    # field; a marker on the FPDU's first octet (so just before that field) carries 0.
    # tshark displays the pointers but does not check them, so this check is ours.
    length_field = stream_offset + (4 if markers and markers[0] == stream_offset else 0)
    assert [int(f.get("show", ""), 0) for f in pkt.all("iwarp_mpa.marker_fpduptr")] == \
        [0 if m == stream_offset else m - length_field for m in markers], \
        f"{where}: marker pointers"
    assert all(int(f.get("show", ""), 0) == 0 for f in pkt.all("iwarp_mpa.marker_res"))


def check_no_complaints(packets: list[Packet], experts: list[ExpertRow], config: PeerConfig) -> None:
    malformed = [(p.number, p.proto_shownames) for p in packets if "_ws.malformed" in p.protos]
    assert not malformed, f"tshark calls these frames malformed: {malformed}"
    allowed = set(RFC5044_ONLY_WARNINGS) if config.revision == 2 else set()
    complaints = [row for row in experts
                  if row.severity in ("Errors", "Warns") and row.protocol != "TCP"
                  and row.summary not in allowed]
    assert not complaints, f"tshark expert info: {complaints}"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.id)
def test_session_decodes_as_iwarp(tools, sessions, config: PeerConfig):
    session = sessions.get(config)
    packets = dissect(tools, session)
    by_sender = {"initiator": [p for p in packets if p.dstport == session.port],
                 "responder": [p for p in packets if p.srcport == session.port]}
    assert packets, "nothing captured on the port"

    # MPA Request first from the initiator, then the Reply: the dissector's state machine
    # needs both to recognise anything after them.
    request, reply = by_sender["initiator"][0], by_sender["responder"][0]
    check_mpa_frame(request, "req", config)
    check_mpa_frame(reply, "rep", config)
    assert request.number < reply.number

    fpdus = [p for p in packets if p not in (request, reply)]
    unrecognised = [p.number for p in fpdus if "iwarp_ddp_rdmap" not in p.protos]
    assert not unrecognised, f"frames with data that tshark did not dissect as iWARP: " \
        f"{unrecognised}"

    # Opcodes in order, per direction and overall (the peer runs in lockstep).
    for sender, sent in by_sender.items():
        got = [p.show("iwarp_rdma.opcode") for p in sent if p not in (request, reply)]
        want = [hex(e.opcode) for e in EXPECTED_FPDUS if e.sender == sender]
        assert [int(g, 0) for g in got] == [int(w, 16) for w in want], (
            f"{sender} opcodes: tshark shows {got}, sent {want}")
    assert len(fpdus) == len(EXPECTED_FPDUS)

    mpa_length = {"initiator": request.tcp_len, "responder": reply.tcp_len}
    for pkt, want in zip(fpdus, EXPECTED_FPDUS):
        sender = "initiator" if pkt.dstport == session.port else "responder"
        assert sender == want.sender, f"frame {pkt.number}: expected {want.name} from " \
            f"{want.sender}"
        # Marker positions count from the first FPDU of the direction, just after the MPA
        # frame (relative sequence numbers start at 1 after the SYN).
        check_fpdu(pkt, want, config, pkt.seq - 1 - mpa_length[sender])

    check_no_complaints(packets, expert_summary(tools, session), config)


def test_rev2_enhanced_ird_ord_decoded(tools, sessions):
    """RFC 6581 Request/Reply fields (Enhanced flag, IRD/ORD, peer-to-peer, RTR types).

    tshark 4.0's MPA dissector implements only RFC 5044, so there is nothing to check; the
    test proves that on a real capture (so the skip reason is a fact, not a guess) and skips.
    """
    names = [n for n in tshark_fields(tools) if n.startswith("iwarp_mpa.")]
    rfc6581 = [n for n in names if any(k in n for k in ("ird", "ord", "rtr", "p2p", "enhanced"))]
    if rfc6581:
        pytest.fail(f"{tools.tshark_version} has RFC 6581 MPA fields {rfc6581}: extend this "
                    "test to check them against the IRD/ORD the peer sends")

    session = sessions.get(PeerConfig(revision=2, crc=True, markers=False))
    packets = dissect(tools, session)
    request, reply = packets[0], packets[1]
    for pkt, key in ((request, "req"), (reply, "rep")):
        assert pkt.has(f"iwarp_mpa.key.{key}")
        assert pkt.showname("iwarp_mpa.res") == "...1 0000 = Reserved: 0x10"
        assert pkt.raw("iwarp_mpa.privatedata")[:4] == bytes.fromhex("00100010")
    warnings = {row.summary: row.frequency for row in expert_summary(tools, session)
                if row.protocol == "IWARP_MPA" and row.severity == "Warns"}
    # Once for the Request, once for the Reply.
    assert warnings == {w: 2 for w in RFC5044_ONLY_WARNINGS}, warnings
    pytest.skip(f"{tools.tshark_version}: the iwarp_mpa dissector implements only RFC 5044 - "
                "it has no RFC 6581 fields, shows the Enhanced flag (0x10) as 'Reserved', "
                "leaves the IRD/ORD words (00 10 00 10) in 'Private data', and warns "
                f"{RFC5044_ONLY_WARNINGS[0]!r} and {RFC5044_ONLY_WARNINGS[1]!r}; "
                "the revision-2 FPDUs themselves decode (test_session_decodes_as_iwarp[rev2-*])")


def test_default_heuristics_misread_send_payload_only(tools, sessions):
    """With tshark's defaults a Send may show as "[Malformed Packet: RPCoRDMA]".

    The RPC-over-RDMA heuristic (rpcrdma_iwarp) tries every untagged Send payload as an
    RPC-over-RDMA header and throws on our plain text. Pin down that this is the only effect
    of the defaults, so nobody reads it as an encoder bug: the iWARP layers are dissected
    the same, and only the Send payload's owner differs.
    """
    session = sessions.get(PeerConfig(revision=1, crc=True, markers=False))
    plain = dissect(tools, session, heuristics_off=False)
    for pkt in plain:
        if "_ws.malformed" not in pkt.protos:
            continue
        assert any("RPCoRDMA" in s for s in pkt.proto_shownames), (
            f"frame {pkt.number} malformed for another reason: {pkt.proto_shownames}")
        assert pkt.int("iwarp_rdma.opcode") in (0x3, 0x4, 0x5, 0x6), (
            f"frame {pkt.number}: RPCoRDMA claimed a non-Send")
        assert "iwarp_ddp_rdmap" in pkt.protos
    off = {p.number: p.show("iwarp_rdma.opcode") for p in dissect(tools, session)
           if p.has("iwarp_rdma.opcode")}
    on = {p.number: p.show("iwarp_rdma.opcode") for p in plain if p.has("iwarp_rdma.opcode")}
    assert on == off
