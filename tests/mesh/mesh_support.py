"""What the mesh tests share: starting a mesh of `rdma-mesh node` processes on lab hosts,
collecting their JSON lines, and reading figures out of them.

    mesh = Mesh.start(hosts, tool, run_dir, port=7300, duration=8, rate=400)
    mesh.wait_started(timeout=30)
    mesh.nodes[4].stop_process()            # SIGSTOP: a peer that stops consuming
    ...
    mesh.wait(timeout=60)                   # every node exits; its summary line is kept
    rate = mesh.node("n1").rate_from("n2", 3.0, 7.0)   # messages/s n1 received from n2
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.json_lines import JsonLines, PrintsJsonLines


#: DDP untagged buffer error "no buffer" (RFC 5041 s7.2): layer DDP (1), etype untagged (2),
#: code 0x02. What a receiver sends to a peer that sent beyond its credits.
NO_BUFFER_TERMINATE = {"layer": 1, "etype": 2, "code": 2}


@dataclass
class MeshNode(PrintsJsonLines):
    """One `rdma-mesh node --json` process and the lines it printed."""

    name: str
    host: Any
    process: subprocess.Popen[str]
    output: JsonLines = field(init=False)

    def __post_init__(self) -> None:
        self.output = JsonLines(self.process)

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_event(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.output.changed:
            while True:
                for doc in self.lines:
                    if doc.get("event") in (event, "error"):
                        if doc["event"] == "error" and event != "error":
                            raise AssertionError(f"{self.name}: {doc['error']}")
                        return doc
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None and not self.output.reading():
                    raise AssertionError(f"{self.name}: no '{event}' line in {timeout} s; "
                                         f"stderr: {self.stderr_lines[-5:]}")
                self.output.changed.wait(min(left, 0.2))

    def stop_process(self) -> None:
        """SIGSTOP: the node stops consuming (and sending) without closing anything."""
        self.process.send_signal(signal.SIGSTOP)

    def continue_process(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    # --- reading the lines -------------------------------------------------------------------

    def events(self, event: str) -> list[dict[str, Any]]:
        return [d for d in self.lines if d.get("event") == event]

    def reports(self) -> list[dict[str, Any]]:
        return self.events("report")

    def summary(self) -> dict[str, Any]:
        found = self.events("summary")
        assert found, f"{self.name} printed no summary; stderr: {self.stderr_lines[-5:]}"
        return found[-1]

    def problems(self) -> list[str]:
        """What made the summary not ok: peers not connected at the end, sequence gaps."""
        out = []
        for peer, p in self.summary()["peers"].items():
            if p["state"] != "connected":
                out.append(f"{self.name}->{peer}: {p['state']}: {p.get('detail', '')}")
            if p["app"]["sequence_errors"]:
                out.append(f"{self.name}<-{peer}: {p['app']['sequence_errors']} sequence errors")
        return out

    def counter(self, report: Mapping[str, Any], peer: str, key: str) -> int:
        """A peer's figure in a report: an endpoint key ("received") or an app key
        ("app.stream_received")."""
        p = report["peers"][peer]
        for part in key.split("."):
            p = p[part]
        return int(p)

    def rate_from(self, peer: str, t0: float, t1: float,
                  key: str = "app.stream_received") -> float:
        """Messages/s this node counted for `peer` between the first report at or after t0
        and the last at or before t1."""
        window = [r for r in self.reports() if t0 <= r["t"] <= t1]
        assert len(window) >= 2, f"{self.name}: fewer than 2 reports in [{t0}, {t1}]"
        a, b = window[0], window[-1]
        return (self.counter(b, peer, key) - self.counter(a, peer, key)) / (b["t"] - a["t"])

    def rss_after(self, t0: float) -> list[tuple[float, int]]:
        return [(r["t"], int(r["rss_kib"])) for r in self.reports() if r["t"] >= t0]

    def terminates(self) -> list[tuple[str, str, dict[str, Any]]]:
        """Every Terminate any line shows: (peer, "sent"|"received", layer/etype/code)."""
        seen = []
        for doc in self.reports() + self.events("summary"):
            for peer, p in doc["peers"].items():
                for way in ("sent", "received"):
                    t = p.get(f"terminate_{way}")
                    if t and (peer, way, t) not in seen:
                        seen.append((peer, way, t))
        return seen


def node_command(tool: str, run_dir: Path, name: str, listen: str,
                 peers: Mapping[str, str], options: Mapping[str, Any]) -> list[str]:
    """rdma-mesh node's command line; options {"rate": 400, "shared_queue": True, ...}
    become --rate 400 --shared-queue (a True value is a flag)."""
    cmd = ["env", f"RDMA_INTEROP_RUN_DIR={run_dir}", tool, "node", "--name", name,
           "--listen", listen, "--json"]
    for peer, uri in peers.items():
        cmd += ["--peer", f"{peer}={uri}"]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is not False and value is not None:
            cmd += [flag, str(value)]
    return cmd


@dataclass
class Mesh:
    nodes: list[MeshNode]

    @classmethod
    def start(cls, hosts: Sequence[Any], tool: str, run_dir: Path, *, port: int,
              names: Sequence[str] | None = None,
              topology: Mapping[str, Sequence[str]] | None = None,
              per_node: Mapping[str, Mapping[str, Any]] | None = None,
              **options: Any) -> Mesh:
        """One node per host, named n1..nN unless `names`; every node peers with every
        other unless `topology` (name -> its peers) says otherwise. `options` go to every
        node, `per_node[name]` on top for that node."""
        names = list(names or [f"n{i + 1}" for i in range(len(hosts))])
        uri = {n: f"tcp://{h.address}:{port}" for n, h in zip(names, hosts)}
        nodes = []
        for name, host in zip(names, hosts):
            peers = topology[name] if topology else [n for n in names if n != name]
            opts = dict(options)
            opts.update((per_node or {}).get(name, {}))
            cmd = node_command(tool, run_dir, name, uri[name], {p: uri[p] for p in peers}, opts)
            nodes.append(MeshNode(name, host, host.popen(cmd)))
        return cls(nodes)

    def node(self, name: str) -> MeshNode:
        return next(n for n in self.nodes if n.name == name)

    def wait_started(self, timeout: float) -> None:
        for n in self.nodes:
            n.wait_event("started", timeout)

    def wait(self, timeout: float) -> None:
        """Every node exits with status 0 (a SIGSTOPped one must have been continued)."""
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            try:
                n.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{n.name} ran over {timeout} s") from None
            n.output.join(timeout=5)
            assert n.process.returncode == 0, (
                f"{n.name} exited {n.process.returncode}: {n.stderr_lines[-5:]} "
                f"{[d for d in n.lines if d.get('event') == 'error']}")

    def kill(self) -> None:
        for n in self.nodes:
            if n.process.poll() is None:
                n.process.send_signal(signal.SIGCONT)
                n.process.kill()
                n.process.wait(timeout=5)


def report(title: str, **figures: Any) -> None:
    """One line of figures for the issue note (visible with -s)."""
    def fmt(v: Any) -> str:
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    print(f"\n[mesh] {title}: " + ", ".join(f"{k}={fmt(v)}" for k, v in figures.items()),
          flush=True)


def slope_per_s(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (t, value) points."""
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mt) * (v - mv) for t, v in points) / var
