"""The device tier's test groups: what runs on the responder and the initiator for one pair of
devices, and how the outcome is judged.

A group is a server command (on the responder node; None when the group has none), a client
command (on the initiator node) and a judge. The rdma-core tools are the "RDMA utilities" of
the OFA interoperability test plan and are independent peers: our code is not in them. Each is
judged from its exit status and its parsed output, with its figure (perftest's Gbit/s and µs)
in the cell. Our own tools (rdma-probe, verbs-check, rdma-storm, rdma-mesh) run on verbs://.

A device without what a group needs is a SKIP with the reason the device gave: the devices'
inventory (`rdma-probe devices --json`) asked for it for real, e.g. ibv_open_xrcd's
EOPNOTSUPP for XRC on siw and rxe, or no UD QP on iWARP.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rdma_interop.tool_output import json_lines

__all__ = ["GROUPS", "Group", "PairContext", "Outcome", "Verdict"]


@dataclass(frozen=True)
class PairContext:
    """One (initiator device, responder device) pair, as the groups need it."""

    initiator_node: str
    responder_node: str
    initiator_device: Mapping[str, Any]  # an `rdma-probe devices --json` entry
    responder_device: Mapping[str, Any]
    initiator_address: str  # IPv4 of the initiator device's netdev
    responder_address: str
    port: int  # a port this cell may use (and port + 1 .. port + 15)

    @property
    def kind(self) -> str:
        return str(self.responder_device.get("kind", ""))

    def gid_index(self, which: str) -> int | None:
        """The GID index of the device's IPv4 address (an IPv4-mapped GID, RoCE v2 first):
        what the ibv_*_pingpong tools need with -g to leave on the right address."""
        dev = self.initiator_device if which == "initiator" else self.responder_device
        addr = ipaddress.IPv4Address(self.initiator_address if which == "initiator"
                                     else self.responder_address)
        best = None
        for port in dev.get("ports", []):
            for gid in port.get("gids", []):
                try:
                    mapped = ipaddress.IPv6Address(str(gid.get("gid", ""))).ipv4_mapped
                except ValueError:
                    continue
                if mapped == addr and (best is None or gid.get("type") == "roce-v2"):
                    best = int(gid["index"])
        return best


@dataclass(frozen=True)
class Outcome:
    """What the two sides did."""

    client_rc: int | None  # None: killed at its time limit
    client_output: str
    server_rc: int | None  # None: no server, or stopped by us after the client ended
    server_output: str
    server_stopped: bool = False


@dataclass(frozen=True)
class Verdict:
    verdict: str  # pass, fail, skip, finding, expected-fail
    detail: str = ""
    figure: str | None = None


@dataclass(frozen=True)
class Group:
    name: str
    client: Callable[[PairContext], list[str]]
    server: Callable[[PairContext], list[str]] | None = None
    judge: Callable[[PairContext, Outcome], Verdict] = field(
        default=lambda ctx, out: _exit_status_judge(ctx, out))
    skip: Callable[[PairContext], str | None] = field(default=lambda ctx: None)
    timeout_s: float = 60.0
    # The server runs on after the client (e.g. rdma-probe serve without --once): stop it.
    server_persists: bool = False
    # Both sides are peers (rdma-mesh): the "server" is the responder node's own node process.
    symmetric: bool = False
    # A failed cell runs once more (the cell keeps the first failure). Not for a group that
    # retries inside (verbs-check tries each connect for its whole --timeout): a second run
    # would only double a long failure.
    retry: bool = True


def _tail(text: str, lines: int = 3) -> str:
    kept = [ln.strip() for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)[:300]


def _exit_status_judge(ctx: PairContext, out: Outcome) -> Verdict:
    if out.client_rc == 0 and (out.server_rc in (0, None) or out.server_stopped):
        return Verdict("pass")
    return _failed(out)


def _failed(out: Outcome, why: str = "") -> Verdict:
    parts = []
    if why:
        parts.append(why)
    client = "timed out" if out.client_rc is None else f"exit {out.client_rc}"
    parts.append(f"client {client}: {_tail(out.client_output)}")
    if out.server_rc is not None or out.server_output:
        server = "running" if out.server_rc is None else f"exit {out.server_rc}"
        parts.append(f"server {server}: {_tail(out.server_output)}")
    return Verdict("fail", "; ".join(parts))


def _capability(ctx: PairContext, name: str) -> str | None:
    """None when both devices have capability `name`, else the device's reason."""
    for side, dev, node in (("initiator", ctx.initiator_device, ctx.initiator_node),
                            ("responder", ctx.responder_device, ctx.responder_node)):
        cap = dev.get("capabilities", {}).get(name, {})
        if not cap.get("supported", False):
            return f"{node}/{dev.get('name')}: no {name.upper()}: {cap.get('detail', 'not reported')}"
    return None


def _iwarp_no_hand_made_qps(ctx: PairContext) -> str | None:
    # RFC 5040 and the iWARP verbs: an RC QP runs over a TCP connection the CM (iw_cm) makes;
    # ibv_*_pingpong move QPs to RTR/RTS by hand with a GID path, which iWARP has no way to do.
    if ctx.kind == "iwarp":
        return ("iWARP QPs are connected only through the CM (a TCP connection and MPA); this "
                "tool connects them by hand (ibv_modify_qp with a path), which iWARP cannot do")
    return None


# -- perftest ---------------------------------------------------------------------------------

def _perftest(tool: str, size: int, iters: int) -> Group:
    bw = tool.endswith("_bw")
    common = [tool, "-R", "-n", str(iters), "-s", str(size)] + (["--report_gbits"] if bw else [])

    def server(ctx: PairContext) -> list[str]:
        # perftest's server listens on every address; the client's address picks the device.
        return [*common, "-p", str(ctx.port)]

    def client(ctx: PairContext) -> list[str]:
        return [*common, "-p", str(ctx.port), ctx.responder_address]

    return Group(tool, server=server, client=client, judge=_perftest_judge, timeout_s=30)


_PERF_HEADER = re.compile(r"#bytes\s+#iterations")


def perftest_figure(output: str) -> tuple[str, float] | None:
    """('Gbit/s', BW average) or ('us', t_avg) from perftest's result table, None without
    one. The bandwidth header splits into more words than its row has columns
    ("BW peak[Gb/sec]"), so its average is the fourth column."""
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if not _PERF_HEADER.search(line):
            continue
        header = line.split()
        for row in lines[i + 1:]:
            cols = row.split()
            if len(cols) < 4 or not cols[0].isdigit():
                continue
            try:
                if "average[Gb/sec]" in header:
                    return "Gbit/s", float(cols[3])
                if "t_avg[usec]" in header:
                    return "us", float(cols[header.index("t_avg[usec]")])
            except (ValueError, IndexError):
                return None
        return None
    return None


def _perftest_judge(ctx: PairContext, out: Outcome) -> Verdict:
    if out.client_rc != 0 or out.server_rc not in (0, None):
        return _failed(out)
    figure = perftest_figure(out.client_output)
    if figure is None:
        return _failed(out, "no result table in the client's output")
    unit, value = figure
    return Verdict("pass", figure=f"{value:.2f} Gbit/s" if unit == "Gbit/s" else f"{value:.1f} µs")


# -- ibv_*_pingpong ---------------------------------------------------------------------------

def _pingpong(tool: str, skip: Callable[[PairContext], str | None],
              extra: Sequence[str] = ()) -> Group:
    def args(ctx: PairContext, side: str) -> list[str]:
        dev = ctx.responder_device if side == "responder" else ctx.initiator_device
        gid = ctx.gid_index(side)
        out = [tool, "-d", str(dev["name"]), "-p", str(ctx.port), "-n", "100", *extra]
        return out + (["-g", str(gid)] if gid is not None else [])

    return Group(tool, server=lambda ctx: args(ctx, "responder"),
                 client=lambda ctx: [*args(ctx, "initiator"), ctx.responder_address],
                 judge=_pingpong_judge, skip=skip)


_PINGPONG_RATE = re.compile(r"=\s*([\d.]+)\s*Mbit/sec")
_PINGPONG_ITER = re.compile(r"([\d.]+)\s*usec/iter")


def _pingpong_judge(ctx: PairContext, out: Outcome) -> Verdict:
    if out.client_rc != 0 or out.server_rc not in (0, None):
        return _failed(out)
    rate = _PINGPONG_RATE.search(out.client_output)
    it = _PINGPONG_ITER.search(out.client_output)
    figure = None
    if rate and it:
        figure = f"{float(rate.group(1)) / 1000:.2f} Gbit/s, {float(it.group(1)):.0f} µs/iter"
    return Verdict("pass", figure=figure)


# -- our tools --------------------------------------------------------------------------------

#: Our tools' MPA personality. Over verbs:// the kernel's iWARP CM (or the IB CM) speaks
#: MPA, not our engine; rdma-probe still wants one named, and siw's is the plain one.
_PERSONALITY = ("--personality", "siw")


def _verbs_uri(address: str, port: int) -> str:
    return f"verbs://{address}:{port}"


def _exchange_judge(ctx: PairContext, out: Outcome) -> Verdict:
    if out.client_rc != 0 or out.server_rc not in (0, None):
        return _failed(out)
    docs = json_lines(out.client_output)
    if not docs:
        return _failed(out, "rdma-probe connect printed no JSON")
    doc = docs[-1]
    return Verdict("pass", figure=f"{doc.get('negotiated', {}).get('ird', '?')}/"
                   f"{doc.get('negotiated', {}).get('ord', '?')} IRD/ORD"
                   if isinstance(doc.get("negotiated"), Mapping) else None)


#: verbs-check's checks (kChecks in tools/verbs-check/checks.h, ``verbs-check --list``): a
#: run that reports fewer did not finish.
VERBS_CHECKS = 9


def _verbs_check_judge(ctx: PairContext, out: Outcome) -> Verdict:
    """verbs-check's own verdicts: "fail" is the device answering otherwise than the RC
    semantics require (a FINDING, with what it answered), "error" a check that could not
    run (a FAIL: ours or the pair's)."""
    checks = [c for c in json_lines(out.client_output) if "check" in c]
    if not checks:
        return _failed(out, "verbs-check printed no result")
    if out.client_rc not in (0, 1) or len(checks) < VERBS_CHECKS:
        return _failed(out, f"verbs-check ended after {len(checks)} of {VERBS_CHECKS} checks")
    errors = [c for c in checks if c.get("result") == "error"]
    if errors:
        server = "" if out.server_rc is None and not out.server_output else (
            f"; serve exit {out.server_rc}: {_tail(out.server_output)}")
        return Verdict("fail", "; ".join(f"{c.get('check')}: {c.get('detail', '')}"
                                         for c in errors) + server)
    served = [c for c in json_lines(out.server_output) if "check" in c]
    if out.server_rc not in (0, None) or any(not c.get("ok") for c in served):
        return _failed(out, "the serve side did not end every check as asked")
    deviations = [c for c in checks if c.get("result") == "fail"]
    if deviations:
        return Verdict("finding", "; ".join(
            f"{c.get('check')}: expected {c.get('expected')}, got {c.get('got')}"
            for c in deviations), figure=f"{len(checks) - len(deviations)}/{len(checks)} checks")
    return Verdict("pass", figure=f"{len(checks)}/{len(checks)} checks")


def _probe_judge(ctx: PairContext, out: Outcome) -> Verdict:
    docs = [d for d in json_lines(out.client_output) if "uri" in d]
    if out.client_rc != 0 or not docs:
        return _failed(out)
    return Verdict("pass")


def _storm_judge(ctx: PairContext, out: Outcome) -> Verdict:
    """The storm's tallies against the listener's counters, one for one: rdma_cm shows the
    listener every connect request, so its "requests" are the storm's tries."""
    reports = [d for d in json_lines(out.client_output)
               if d.get("schema") == "rdma-interop/storm/1"]
    counters = next((d for d in reversed(json_lines(out.server_output))
                     if d.get("event") == "counters"), None)
    if out.client_rc != 0 or not reports or counters is None:
        return _failed(out, "no storm report" if not reports else
                       "no listener counters" if counters is None else "")
    report = reports[-1]
    tries = report.get("tries_by_outcome", {})
    connected = int(report.get("outcomes", {}).get("connected", 0))
    overflow = int(tries.get("overflow_rejected", 0))
    pairs = {"connected = accepted": (connected, int(counters.get("accepted", -1))),
             "overflow rejects": (overflow, int(counters.get("overflow_rejected", -1))),
             "tries = requests": (sum(int(v) for v in tries.values()),
                                  int(counters.get("requests", -1)))}
    wrong = [f"{name}: storm {a}, listener {b}" for name, (a, b) in pairs.items() if a != b]
    if wrong:
        return Verdict("fail", "tallies disagree with the listener's counters: "
                       + "; ".join(wrong))
    if connected == 0:
        return Verdict("fail", f"no connection established: {report.get('outcomes')}")
    return Verdict("pass", figure=f"{connected} in, {overflow} overflow-rejected")


def _mesh_judge(ctx: PairContext, out: Outcome) -> Verdict:
    """Both nodes' summaries: ok, and each received what the other sent (stream mode;
    nothing is lost on a reliable connection once the drain is over)."""
    mine = next((d for d in json_lines(out.client_output) if d.get("event") == "summary"), None)
    theirs = next((d for d in json_lines(out.server_output) if d.get("event") == "summary"),
                  None)
    if out.client_rc != 0 or out.server_rc not in (0, None) or not mine or not theirs:
        return _failed(out, "a mesh node printed no summary" if not (mine and theirs) else "")
    problems = [f"{d.get('node')}: not ok" for d in (mine, theirs) if not d.get("ok")]

    def app(doc: Mapping[str, Any], key: str) -> int:
        return sum(int(p.get("app", {}).get(key, 0)) for p in doc.get("peers", {}).values())

    # The application's own counts: the endpoint's also hold the start barrier's messages.
    sent_i, got_r = app(mine, "stream_sent"), app(theirs, "stream_received")
    sent_r, got_i = app(theirs, "stream_sent"), app(mine, "stream_received")
    if (sent_i, sent_r) != (got_r, got_i) or not sent_i or not sent_r:
        problems.append(f"stream messages sent {sent_i} and {sent_r}, received {got_r} and "
                        f"{got_i}")
    gaps = app(mine, "sequence_errors") + app(theirs, "sequence_errors")
    if gaps:
        problems.append(f"{gaps} sequence errors")
    if problems:
        return Verdict("fail", "; ".join(problems))
    return Verdict("pass", figure=f"{sent_i + sent_r} messages")


def _mesh(ctx: PairContext, me: str) -> list[str]:
    names = {"initiator": ("A", ctx.initiator_address), "responder": ("B", ctx.responder_address)}
    other = "responder" if me == "initiator" else "initiator"
    name, addr = names[me]
    peer, peer_addr = names[other]
    return ["rdma-mesh", "node", "--name", name, "--listen", _verbs_uri(addr, ctx.port),
            "--peer", f"{peer}={_verbs_uri(peer_addr, ctx.port)}", "--duration", "2",
            "--rate", "200", "--setup-timeout", "30", "--json"]


GROUPS: tuple[Group, ...] = (
    Group("rdma-probe exchange",
          server=lambda c: ["rdma-probe", "serve", "--listen",
                            _verbs_uri(c.responder_address, c.port), "--once",
                            *_PERSONALITY],
          client=lambda c: ["rdma-probe", "connect", _verbs_uri(c.responder_address, c.port),
                            "--json", "--timeout", "20", *_PERSONALITY],
          judge=_exchange_judge),
    Group("rdma-probe probe",
          server=lambda c: ["rdma-probe", "serve", "--listen",
                            _verbs_uri(c.responder_address, c.port), *_PERSONALITY],
          client=lambda c: ["rdma-probe", "--json", "--timeout", "5", "-q",
                            _verbs_uri(c.responder_address, c.port)],
          judge=_probe_judge, server_persists=True, timeout_s=120),
    Group("verbs-check",
          server=lambda c: ["verbs-check", "--serve", _verbs_uri(c.responder_address, c.port),
                            "--json"],
          client=lambda c: ["verbs-check", "--peer", _verbs_uri(c.responder_address, c.port)
                            + f"?source={c.initiator_address}", "--json"],
          judge=_verbs_check_judge, timeout_s=240, retry=False),
    Group("rdma-storm",
          server=lambda c: ["rdma-probe", "serve", "--listen",
                            _verbs_uri(c.responder_address, c.port), "--backlog", "2",
                            "--overflow", "reject", "--accept-delay", "200",
                            "--exchange-timeout", "2", "--json", *_PERSONALITY],
          client=lambda c: ["rdma-storm", _verbs_uri(c.responder_address, c.port)
                            + f"?source={c.initiator_address}", "--attempts", "24",
                            "--concurrency", "8", "--retries", "0", "--retry-mode", "storm",
                            "--hold", "200", "--timeout", "10", "--duration-limit", "30",
                            "--json"],
          judge=_storm_judge, server_persists=True, timeout_s=90),
    Group("rdma-mesh", server=lambda c: _mesh(c, "responder"),
          client=lambda c: _mesh(c, "initiator"), judge=_mesh_judge, timeout_s=90),
    Group("rping",
          server=lambda c: ["rping", "-s", "-a", c.responder_address, "-p", str(c.port),
                            "-C", "5", "-S", "64", "-V"],
          client=lambda c: ["rping", "-c", "-a", c.responder_address, "-p", str(c.port),
                            "-C", "5", "-S", "64", "-V"]),
    Group("ucmatose",
          server=lambda c: ["ucmatose", "-b", c.responder_address, "-p", str(c.port),
                            "-c", "2", "-C", "10"],
          client=lambda c: ["ucmatose", "-s", c.responder_address, "-p", str(c.port),
                            "-c", "2", "-C", "10"]),
    Group("udaddy",
          server=lambda c: ["udaddy", "-b", c.responder_address, "-c", "1", "-C", "10"],
          client=lambda c: ["udaddy", "-s", c.responder_address, "-c", "1", "-C", "10"],
          skip=lambda c: _capability(c, "ud")),
    Group("rdma_server/rdma_client",
          server=lambda c: ["rdma_server", "-s", c.responder_address, "-p", str(c.port)],
          client=lambda c: ["rdma_client", "-s", c.responder_address, "-p", str(c.port)]),
    _pingpong("ibv_rc_pingpong", _iwarp_no_hand_made_qps),
    _pingpong("ibv_srq_pingpong", lambda c: _iwarp_no_hand_made_qps(c) or _capability(c, "srq")),
    _pingpong("ibv_ud_pingpong", lambda c: _capability(c, "ud") or _iwarp_no_hand_made_qps(c),
              ["-s", "512"]),
    _pingpong("ibv_xsrq_pingpong", lambda c: _capability(c, "xrc") or _iwarp_no_hand_made_qps(c)),
    _perftest("ib_send_bw", 65536, 100),
    _perftest("ib_write_bw", 65536, 100),
    _perftest("ib_read_bw", 65536, 100),
    _perftest("ib_send_lat", 2, 200),
    _perftest("ib_write_lat", 2, 200),
    _perftest("ib_read_lat", 2, 200),
)
