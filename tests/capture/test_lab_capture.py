"""A capture of a real lab run decodes in tshark as iWARP.

Two network-namespace hosts; tcpdump runs inside the responder's namespace while
`rdma-probe connect` (cxgb4: revision 2, CRC, peer-to-peer with a Read RTR) meets
`rdma-probe serve` (siw) and runs the interop exchange. Wireshark's independent dissectors
must recognise the MPA Request and Reply, dissect the FPDUs as DDP/RDMAP with every RDMAP
operation the exchange uses, and find every checked CRC good.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from tests.support.namespace_lab import namespace_lab
from tests.support.tools import require_tools

PORT = 7174
# tshark's payload heuristics would read the exchange's JSON Sends as their own protocols.
PAYLOAD_HEURISTICS = ("rpcrdma_iwarp", "smb_direct_iwarp")
# RDMAP opcodes the exchange must produce (RFC 5040 s4.3).
SEND, RDMA_WRITE, READ_REQUEST, READ_RESPONSE = 3, 0, 1, 2


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for tool in ("tcpdump", "tshark"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    pcap = tmp_path_factory.mktemp("lab-capture") / "lab.pcap"
    rdma_probe = require_tools("rdma-probe")["rdma-probe"]
    with namespace_lab(2, prefix="rdmacap") as lab:
        client, server = lab.hosts
        dump = server.popen(["tcpdump", "-i", "eth0", "-n", "-U", "--immediate-mode",
                             "-w", str(pcap), "tcp", "port", str(PORT)])
        assert dump.stderr is not None
        line = dump.stderr.readline()  # "listening on eth0 ..." once the capture runs
        assert "listening" in line, line
        serve = server.popen([rdma_probe, "serve", "--json", "--listen",
                              f"tcp://{server.address}:{PORT}", "--personality", "siw", "--once"])
        assert serve.stdout is not None
        assert json.loads(serve.stdout.readline())["event"] == "listening"
        run = client.run([rdma_probe, "connect", f"tcp://{server.address}:{PORT}",
                          "--personality", "cxgb4", "--json", "--timeout", "10"], timeout=60)
        report = json.loads(run.stdout)
        assert report["ok"], report
        assert serve.wait(timeout=10) == 0
        time.sleep(0.2)  # the last FIN/ACK reach the capture
        dump.send_signal(signal.SIGINT)
        dump.wait(timeout=10)
    return pcap


def dissect(pcap: Path) -> list[ET.Element]:
    args = ["tshark", "-r", str(pcap), "-n", "-o", "tcp.try_heuristic_first:TRUE"]
    for h in PAYLOAD_HEURISTICS:
        args += ["--disable-heuristic", h]
    out = subprocess.run(args + ["-Y", "tcp.len > 0", "-T", "pdml"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return list(ET.fromstring(out.stdout).iter("packet"))


def fields(packet: ET.Element, name: str) -> list[ET.Element]:
    return [f for f in packet.iter("field") if f.get("name") == name]


def test_lab_run_decodes_as_iwarp(capture: Path):
    packets = dissect(capture)
    protocols = Counter(p.get("name") for pkt in packets for p in pkt.iter("proto"))
    assert protocols["iwarp_mpa"] > 0, "tshark recognised no MPA traffic"
    assert protocols["iwarp_ddp_rdmap"] > 0, "tshark dissected no DDP/RDMAP segments"

    requests = [pkt for pkt in packets if fields(pkt, "iwarp_mpa.key.req")]
    replies = [pkt for pkt in packets if fields(pkt, "iwarp_mpa.key.rep")]
    assert len(requests) == 1 and len(replies) == 1

    opcodes = Counter(int(f.get("show", "-1"), 0)
                      for pkt in packets for f in fields(pkt, "iwarp_rdma.opcode"))
    for op in (SEND, RDMA_WRITE, READ_REQUEST, READ_RESPONSE):
        assert opcodes[op] > 0, f"no RDMAP opcode {op} in the capture: {dict(opcodes)}"

    crc_checks = [f.get("showname", "") for pkt in packets
                  for f in fields(pkt, "iwarp_mpa.crc_check")]
    assert crc_checks, "cxgb4 asks for CRC, so tshark must check CRCs"
    bad = [c for c in crc_checks if "(Good CRC32)" not in c]
    assert not bad, f"{len(bad)} of {len(crc_checks)} CRCs not good: {bad[:3]}"
