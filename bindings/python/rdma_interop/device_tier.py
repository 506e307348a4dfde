"""The device tier: the lab's own RDMA devices against each other, node pair by node pair.

    python3 -m rdma_interop.device_tier --lab lab.yml --results DIR [--group NAME]... [--json]
    python3 -m rdma_interop.device_tier --schedule 12 --pair-seconds 40     # plan only

For every ordered (initiator node, responder node) pair of a lab file (rdma_interop.lab) and
every pair of their devices that can talk (iWARP with iWARP, RoCE v2 with RoCE v2, RoCE v1 with
RoCE v1, IB with IB), each test group of rdma_interop.device_groups runs: its server on the
responder node, its client on the initiator node, over SSH. Pairs that share no node run at
the same time, in the rounds of rdma_interop.lab_schedule.

First every node says what it has (`rdma-probe devices --json`): a node with no device is
reported as such, a node that does not answer as unreachable, and neither stops the others.
Every remote command runs under `timeout -s KILL`, so a lost SSH session cannot leave it
running; after each pair the tier looks for our tools and rdma-core's still running on both
nodes and kills them (a FAIL cell "left running" if it found any).

Writes DIR/device-matrix.{txt,json} and DIR/device-junit.xml (rdma_interop.device_matrix) and
prints the text. Exit status: 0 every cell PASS, XFAIL, FINDING or SKIP (or no two nodes
have devices that can talk, and every node answered); 1 a FAIL cell, or a node that did not
answer; 2 bad usage or an unreadable lab file.
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rdma_interop.device_groups import GROUPS, Group, Outcome, PairContext, Verdict
from rdma_interop.device_matrix import DeviceCell, DeviceMatrix, NodeInventory
from rdma_interop.lab import LabFileError, SshHost, load_lab_file
from rdma_interop.lab_schedule import estimate, round_robin

__all__ = ["DeviceTier", "main", "usable_devices"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: Processes a cell may start, looked for (and killed) on both nodes after every pair.
TOOL_NAMES = ("rdma-probe", "verbs-check", "rdma-storm", "rdma-mesh", "rping", "ucmatose",
              "udaddy", "rdma_server", "rdma_client", "ibv_rc_pingpong", "ibv_srq_pingpong",
              "ibv_ud_pingpong", "ibv_xsrq_pingpong", "ib_send_bw", "ib_write_bw", "ib_read_bw",
              "ib_send_lat", "ib_write_lat", "ib_read_lat")
#: ssh's own exit status when it could not reach the node (the command's cannot be 255 here).
SSH_FAILED = 255
BASE_PORT = 20000
#: The environment variable every remote command of a run carries, with the run's token.
SWEEP_TAG = "RDMA_INTEROP_DEVICE_TIER"


def usable_devices(inventory: NodeInventory, pinned: Sequence[str] | None
                   ) -> list[tuple[dict[str, Any], str]]:
    """(device, IPv4 address) for each device the node may use: pinned by the lab file (or
    all), with an ACTIVE port whose netdev has an IPv4 address."""
    out = []
    for dev in inventory.devices:
        if pinned is not None and dev.get("name") not in pinned:
            continue
        for port in dev.get("ports", []):
            if str(port.get("state", "")).upper() != "ACTIVE":
                continue
            v4 = [a.split("/")[0] for a in port.get("addresses", []) if _is_ipv4(a)]
            if v4:
                out.append((dev, v4[0]))
                break
    return out


def _is_ipv4(address: Any) -> bool:
    try:
        ipaddress.IPv4Address(str(address).split("/")[0])
        return True
    except ValueError:
        return False


@dataclass
class _Node:
    host: SshHost
    inventory: NodeInventory
    lock: threading.Lock
    unreachable: str = ""  # why, once the node stopped answering


class DeviceTier:
    def __init__(self, hosts: Sequence[SshHost], groups: Sequence[Group] = GROUPS,
                 progress: Any = None, one_pair_at_a_time: bool = False) -> None:
        self.hosts = list(hosts)
        self.one_pair_at_a_time = one_pair_at_a_time
        self.groups = list(groups)
        self.matrix = DeviceMatrix()
        self._nodes: dict[str, _Node] = {}
        self._port = BASE_PORT
        self._port_lock = threading.Lock()
        self._progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self._gone: dict[tuple[str, str], str] = {}  # (node, device) -> why
        self._token = uuid.uuid4().hex[:16]

    # -- discovery -----------------------------------------------------------------------
    def discover(self) -> None:
        def one(host: SshHost) -> None:
            try:
                inv = self._inventory(host)
            except Exception as e:  # noqa: BLE001 - a node's odd answer is that node's cell
                inv = NodeInventory(host.name, "unreachable",
                                    f"rdma-probe devices gave an answer we cannot read: {e!r}")
            self._nodes[host.name] = _Node(host, inv, threading.Lock(),
                                           inv.detail if inv.status == "unreachable" else "")
        threads = [threading.Thread(target=one, args=(h,)) for h in self.hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.matrix.nodes = [self._nodes[h.name].inventory for h in self.hosts]
        for node in self.matrix.nodes:
            self._progress(f"device-tier: {node.name}: {node.summary()}")

    def _inventory(self, host: SshHost) -> NodeInventory:
        try:
            r = host.run(["timeout", "-s", "KILL", "60", host.rdma_probe, "devices", "--json"],
                         timeout=90)
        except subprocess.TimeoutExpired:
            return NodeInventory(host.name, "unreachable", "no answer over SSH in 90 s")
        if r.returncode == SSH_FAILED:
            return NodeInventory(host.name, "unreachable", r.stderr.strip()[-200:] or "ssh failed")
        try:
            doc = json.loads(r.stdout)
        except json.JSONDecodeError:
            return NodeInventory(host.name, "unreachable",
                                 f"rdma-probe devices exit {r.returncode}: "
                                 f"{(r.stderr or r.stdout).strip()[-200:]}")
        devices = doc.get("devices", []) if isinstance(doc, dict) else None
        if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
            return NodeInventory(host.name, "unreachable",
                                 "rdma-probe devices --json is not a device list")
        if not devices:
            return NodeInventory(host.name, "no-device", doc.get("note", "no RDMA device"))
        return NodeInventory(host.name, "ok", "", devices)

    # -- the run -------------------------------------------------------------------------
    def run(self) -> DeviceMatrix:
        began = time.monotonic()
        control = tempfile.mkdtemp(prefix="rdma-devtier-")
        for i, host in enumerate(self.hosts):
            host.control_path = f"{control}/{i}.sock"  # short: a socket path has 107 octets
        masters = [threading.Thread(target=h.open_master) for h in self.hosts]
        for t in masters:
            t.start()
        for t in masters:
            t.join()
        try:
            self.discover()
            with_devices = [h.name for h in self.hosts
                            if self._nodes[h.name].inventory.status == "ok"]
            self.matrix.schedule = round_robin(with_devices)
            if self.one_pair_at_a_time:  # the baseline the rounds are measured against
                self.matrix.schedule = [[p] for rnd in self.matrix.schedule for p in rnd]
            for i, rnd in enumerate(self.matrix.schedule, 1):
                self._progress(f"device-tier: round {i}/{len(self.matrix.schedule)}: "
                               + ", ".join(f"{a} -> {b}" for a, b in rnd))
                threads = [threading.Thread(target=self._pair, args=(a, b)) for a, b in rnd]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
        finally:
            for host in self.hosts:
                host.close_master()
                host.control_path = None
            shutil.rmtree(control, ignore_errors=True)
            self.matrix.wall_s = time.monotonic() - began
        return self.matrix

    def _next_port(self) -> int:
        with self._port_lock:
            self._port += 16
            if self._port > 60000:
                self._port = BASE_PORT
            return self._port

    def _pair(self, ini_name: str, res_name: str) -> None:
        began = time.monotonic()
        ini, res = self._nodes[ini_name], self._nodes[res_name]
        ini_devs = usable_devices(ini.inventory, ini.host.devices)
        res_devs = usable_devices(res.inventory, res.host.devices)
        for di, ia in ini_devs:
            for dr, ra in res_devs:
                if di.get("kind") != dr.get("kind"):
                    continue
                for group in self.groups:
                    ctx = PairContext(ini_name, res_name, di, dr, ia, ra, self._next_port())
                    try:
                        cell = self._cell(group, ctx, ini, res)
                    except Exception as e:  # noqa: BLE001 - one cell, not the whole run
                        where = traceback.extract_tb(e.__traceback__)[-1]
                        cell = DeviceCell(group.name, f"{ini_name}/{di.get('name')}",
                                          f"{res_name}/{dr.get('name')}", str(dr.get("kind")),
                                          "fail", f"internal error: {e!r} at "
                                          f"{Path(where.filename).name}:{where.lineno}")
                    self.matrix.add(cell)
                    self._progress(f"device-tier: {cell.group:24} {cell.initiator} -> "
                                   f"{cell.responder}: {cell.text(70)} ({cell.seconds:.1f} s)")
        for node in (ini, res):
            left = self._sweep(node)
            if left:
                self.matrix.add(DeviceCell("cleanup", f"{ini_name}", f"{res_name}", "", "fail",
                                           f"left running on {node.inventory.name} and killed: "
                                           f"{left}"))
        self.matrix.pair_seconds[f"{ini_name}--{res_name}"] = time.monotonic() - began

    def _cell(self, group: Group, ctx: PairContext, ini: _Node, res: _Node) -> DeviceCell:
        began = time.monotonic()
        ini_label = f"{ctx.initiator_node}/{ctx.initiator_device.get('name')}"
        res_label = f"{ctx.responder_node}/{ctx.responder_device.get('name')}"

        def cell(v: Verdict) -> DeviceCell:
            return DeviceCell(group.name, ini_label, res_label, ctx.kind, v.verdict, v.detail,
                              v.figure, time.monotonic() - began)

        for node, dev in ((ini, ctx.initiator_device), (res, ctx.responder_device)):
            if node.unreachable and not self._answers(node):
                return cell(Verdict("fail", f"node {node.inventory.name} unreachable: "
                                    f"{node.unreachable}"))
            gone = self._gone.get((node.inventory.name, str(dev.get("name"))))
            if gone:
                return cell(Verdict("skip", gone))
        reason = group.skip(ctx)
        if reason:
            return cell(Verdict("skip", reason))
        verdict = group.judge(ctx, self._execute(group, ctx, ini, res))
        if verdict.verdict == "fail":
            verdict = self._explain_failure(verdict, ctx, ini, res)
            lost = any(self._gone.get((n.inventory.name, str(d.get("name"))))
                       for n, d in ((ini, ctx.initiator_device), (res, ctx.responder_device)))
            if group.retry and not ini.unreachable and not res.unreachable and not lost:
                # Once more, on fresh ports. A pair that fails now and then is worth knowing
                # (the cell keeps the first failure), and not a verdict on its own: a second
                # failure is the verdict.
                first = f"the 1st try failed: {verdict.detail}"
                retry = dataclasses.replace(ctx, port=self._next_port())
                again = group.judge(retry, self._execute(group, retry, ini, res))
                if again.verdict == "fail":
                    again = self._explain_failure(again, retry, ini, res)
                verdict = Verdict(again.verdict, "; ".join(x for x in (again.detail, first) if x),
                                  again.figure)
        return cell(verdict)

    def _remote(self, group: Group, argv: list[str], limit_s: float | None = None) -> list[str]:
        # The tag lets the sweep find what this run started, and only that: a lab's own
        # `rdma-probe serve` services carry the same process names.
        return ["env", f"{SWEEP_TAG}={self._token}", "timeout", "-s", "KILL",
                str(max(1, int(limit_s if limit_s is not None else group.timeout_s))), *argv]

    def _execute(self, group: Group, ctx: PairContext, ini: _Node, res: _Node) -> Outcome:
        server = None
        if group.server is not None:
            server = res.host.popen(self._remote(group, group.server(ctx)),
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            time.sleep(1.0)  # the listener binds; a client that comes too early is retried
        client_rc: int | None = None
        client_out = ""
        deadline = time.monotonic() + group.timeout_s
        for attempt in range(4):
            try:
                left = max(5.0, deadline - time.monotonic())
                tried = time.monotonic()
                r = ini.host.run(self._remote(group, group.client(ctx), left), timeout=left + 10)
                client_rc, client_out = r.returncode, r.stdout + r.stderr
                if client_rc == 137:  # killed by timeout -s KILL
                    client_rc = None
            except subprocess.TimeoutExpired:
                client_rc, client_out = None, "no answer from the initiator node over SSH"
            # A client that failed at once while the server still runs may have come before
            # the listener bound (a slow node): try again. Not one that ran a while: its run
            # counted (a storm's tries are in the listener's counters).
            early = time.monotonic() - tried < 3.0
            if (client_rc == 0 or not early or server is None or server.poll() is not None
                    or attempt == 3 or time.monotonic() > deadline - 5):
                break
            time.sleep(1.0)
        server_rc: int | None = None
        server_out = ""
        stopped = False
        if server is not None:
            try:
                server_out, _ = server.communicate(timeout=3 if group.server_persists else 15)
            except subprocess.TimeoutExpired:
                server.terminate()
                stopped = True
                try:
                    server_out, _ = server.communicate(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server_out, _ = server.communicate()
            server_rc = None if stopped else server.returncode
        return Outcome(client_rc, client_out, server_rc, server_out or "", stopped)

    def _explain_failure(self, verdict: Verdict, ctx: PairContext, ini: _Node,
                         res: _Node) -> Verdict:
        """A failed cell: is a node gone, or one of the devices? Says so in the cell, and
        later cells of that node or device say it without running."""
        for node, dev in ((res, ctx.responder_device), (ini, ctx.initiator_device)):
            # 255 is ssh's status when it cannot reach the node, but also what a tool that
            # returns -1 exits with (cmatose does): ask the node before blaming it.
            if not self._answers(node):
                node.unreachable = node.unreachable or "stopped answering over SSH"
                return Verdict("fail", f"node {node.inventory.name} unreachable during the "
                               f"cell ({node.unreachable}); {verdict.detail}")
            now = self._inventory(node.host)
            names = {d.get("name") for d in now.devices}
            if now.status in ("ok", "no-device") and dev.get("name") not in names:
                why = (f"device {dev.get('name')} went away from {node.inventory.name} during "
                       f"the run (rdma-probe devices no longer lists it)")
                self._gone[(node.inventory.name, str(dev.get("name")))] = why
                return Verdict("fail", f"{why}; {verdict.detail}")
        return verdict

    def _answers(self, node: _Node) -> bool:
        try:
            ok = node.host.run(["true"], timeout=20).returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
        if ok:
            node.unreachable = ""
        return ok

    def _sweep(self, node: _Node) -> str:
        """What this run started on `node` and is still running, killed; '' when none. Found
        by the run's tag in /proc/PID/environ, never by name."""
        if node.unreachable and not self._answers(node):
            return ""
        # Two looks 2 s apart: a busybox `timeout` keeps a watcher process for up to a second
        # after its command ended; only what is still there at the second look was left.
        find = (f"for d in /proc/[0-9]*; do grep -qs {SWEEP_TAG}={self._token} "
                f"\"$d/environ\" 2>/dev/null && echo \"${{d#/proc/}}\"; done")
        script = (f"[ -n \"$({find})\" ] || exit 0; sleep 2; "
                  f"for p in $({find}); do echo \"$(cat /proc/$p/comm 2>/dev/null)[$p]\"; "
                  f"kill -KILL \"$p\" 2>/dev/null; done; true")
        try:
            r = node.host.run(["sh", "-c", script], timeout=30)
        except subprocess.TimeoutExpired:
            return ""
        return " ".join(r.stdout.split()) if r.returncode != SSH_FAILED else ""


def _tail(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:200]


def _schedule_text(nodes: int, pair_seconds: float) -> str:
    e = estimate(nodes, pair_seconds)
    return (f"{nodes} nodes: {e.pairs} ordered pairs; one pair at a time {e.sequential_s / 60:.1f} "
            f"min; {e.rounds} rounds of up to {nodes // 2} pairs {e.rounds_s / 60:.1f} min "
            f"({e.speedup:.1f}x)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m rdma_interop.device_tier",
        description="Runs the lab's RDMA devices against each other, every ordered node pair "
                    "and every pair of devices that can talk, and writes the device matrix.",
        epilog="Exit status: 0 no FAIL cell (a lab without device pairs, every node answering, "
               "included); 1 a FAIL cell or a node that did not answer; 2 bad usage or lab "
               "file.")
    parser.add_argument("--lab", metavar="FILE", help="YAML lab file (rdma_interop.lab schema; "
                        "per node 'path' and 'devices: all | [names]')")
    parser.add_argument("--results", metavar="DIR", default="interop-results/devices",
                        help="where device-matrix.{txt,json} and device-junit.xml go")
    parser.add_argument("--group", action="append", metavar="NAME",
                        help="run only this test group; repeatable (see --list-groups)")
    parser.add_argument("--list-groups", action="store_true", help="print the groups and exit")
    parser.add_argument("--one-pair-at-a-time", action="store_true",
                        help="run the node pairs one after another instead of in rounds (the "
                             "baseline to measure the rounds against)")
    parser.add_argument("--json", action="store_true",
                        help="print the matrix as JSON on stdout instead of the text")
    parser.add_argument("--schedule", type=int, metavar="N",
                        help="print the round schedule of an N-node lab and what it would take "
                             "(with --pair-seconds), then exit")
    parser.add_argument("--pair-seconds", type=float, default=60.0, metavar="S",
                        help="(--schedule) the time one node pair takes (default 60)")
    args = parser.parse_args(argv)

    if args.list_groups:
        for g in GROUPS:
            print(g.name)
        return EXIT_OK
    if args.schedule is not None:
        if not 2 <= args.schedule <= 1000 or not 0 < args.pair_seconds < 86400:
            parser.error("--schedule wants 2..1000 nodes and --pair-seconds 0..86400")
        names = [f"n{i + 1}" for i in range(args.schedule)]
        for i, rnd in enumerate(round_robin(names), 1):
            print(f"round {i}: " + ", ".join(f"{a}->{b}" for a, b in rnd))
        print(_schedule_text(args.schedule, args.pair_seconds))
        return EXIT_OK
    if not args.lab:
        parser.error("--lab FILE is needed (or --schedule N, --list-groups)")
    groups = list(GROUPS)
    if args.group:
        known = {g.name: g for g in GROUPS}
        unknown = [n for n in args.group if n not in known]
        if unknown:
            parser.error(f"unknown group(s) {', '.join(unknown)}; see --list-groups")
        groups = [known[n] for n in args.group]
    try:
        lab = load_lab_file(args.lab)
    except LabFileError as e:
        print(f"device-tier: {e}", file=sys.stderr)
        return EXIT_USAGE
    tier = DeviceTier(lab.hosts, groups, one_pair_at_a_time=args.one_pair_at_a_time)
    matrix = tier.run()
    matrix.write(args.results)
    if args.json:
        print(json.dumps(matrix.to_json(), indent=2))
    else:
        print(matrix.render_text(), end="")
    if not matrix.cells:
        # No two nodes with devices that can talk: a fact of the lab when every node answered
        # (the report says which have none), a failure when one did not.
        answered = all(n.status in ("ok", "no-device") for n in matrix.nodes)
        return EXIT_OK if answered else EXIT_FAILED
    answered = all(n.status != "unreachable" for n in matrix.nodes)
    return EXIT_OK if matrix.ok() and answered else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
