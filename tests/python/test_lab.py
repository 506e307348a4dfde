"""rdma_interop.lab: namespace labs are real, reachable, isolated, and always torn down.

The namespace tests need root and `ip netns` and skip with the reason otherwise. They use
their own prefix so they never meet the interop suite's namespaces.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rdma_interop import lab as labmod
from rdma_interop.lab import (
    LAB_NETWORK,
    LabFileError,
    NamespaceLab,
    SshHost,
    load_lab_file,
    namespaces_available,
)

PREFIX = "rdmaitest"
AVAILABLE, WHY_NOT = namespaces_available()
needs_namespaces = pytest.mark.skipif(not AVAILABLE, reason=WHY_NOT)

# A TCP echo server: prints "ready" once listening, echoes one connection, exits.
ECHO_SERVER = textwrap.dedent(
    """
    import socket, sys
    srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
    print("ready", flush=True)
    conn, peer = srv.accept()
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
    print(peer[0], flush=True)
    """
)
ECHO_CLIENT = textwrap.dedent(
    """
    import socket, sys
    payload = bytes(range(256)) * 64
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    sys.exit(0 if got == payload else 1)
    """
)


def all_namespaces() -> set[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True,
                         check=True).stdout.strip()
    return {entry["name"] for entry in json.loads(out)} if out else set()


def ours(names: set[str]) -> set[str]:
    return {n for n in names if n.startswith(PREFIX + "-")}


def root_links_and_addresses() -> str:
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True, check=True)
    addrs = subprocess.run(["ip", "-br", "addr"], capture_output=True, text=True, check=True)
    return links.stdout + addrs.stdout


def echo_between(server: labmod.NamespaceHost, client: labmod.NamespaceHost, port: int) -> str:
    """Runs the echo pair; returns the client address the server saw."""
    srv = server.popen([sys.executable, "-c", ECHO_SERVER, server.address, str(port)])
    assert srv.stdout is not None
    assert srv.stdout.readline().strip() == "ready"
    result = client.run([sys.executable, "-c", ECHO_CLIENT, server.address, str(port)], timeout=20)
    assert result.returncode == 0, result.stderr
    out, _ = srv.communicate(timeout=10)
    return out.strip()


@pytest.fixture(autouse=True)
def no_leftovers():
    """Every test leaves no namespace of ours behind."""
    before = ours(all_namespaces()) if AVAILABLE else set()
    yield
    if AVAILABLE:
        assert ours(all_namespaces()) - before == set()


@needs_namespaces
def test_two_host_lab_echoes_tcp_between_namespaces() -> None:
    with NamespaceLab(2, prefix=PREFIX) as lab:
        h0, h1 = lab.hosts
        assert lab.topology == "veth"
        assert echo_between(h1, h0, 9000) == h0.address
        assert echo_between(h0, h1, 9001) == h1.address


@needs_namespaces
def test_three_host_lab_joins_hosts_on_a_bridge_in_its_own_namespace() -> None:
    with NamespaceLab(3, prefix=PREFIX) as lab:
        assert lab.topology == "bridge"
        assert lab.bridge_netns in all_namespaces()
        h0, h1, h2 = lab.hosts
        assert echo_between(h2, h0, 9000) == h0.address
        assert echo_between(h2, h1, 9001) == h1.address
        assert echo_between(h0, h1, 9002) == h1.address
    assert lab.bridge_netns not in all_namespaces()


@needs_namespaces
def test_hosts_get_addresses_in_the_benchmarking_range_with_loopback_up() -> None:
    with NamespaceLab(2, prefix=PREFIX) as lab:
        addresses = [ipaddress.ip_address(h.address) for h in lab.hosts]
        assert all(a in LAB_NETWORK for a in addresses)
        assert len(set(addresses)) == 2
        for host in lab.hosts:
            shown = json.loads(host.run(["ip", "-j", "addr"]).stdout)
            by_name = {link["ifname"]: link for link in shown}
            assert "UP" in by_name["lo"]["flags"]
            assert [a["local"] for a in by_name["eth0"]["addr_info"] if a["family"] == "inet"] == [
                host.address
            ]
            assert by_name["eth0"]["mtu"] == 1500  # the kernel's default, untouched


@needs_namespaces
def test_two_labs_at_once_use_different_subnets_and_namespaces() -> None:
    with NamespaceLab(2, prefix=PREFIX) as a, NamespaceLab(2, prefix=PREFIX) as b:
        assert a.subnet != b.subnet
        assert not set(a.namespaces) & set(b.namespaces)


@needs_namespaces
def test_lab_adds_nothing_to_the_callers_namespace() -> None:
    before = root_links_and_addresses()
    with NamespaceLab(3, prefix=PREFIX):
        during = root_links_and_addresses()
    assert during == before
    assert root_links_and_addresses() == before


@needs_namespaces
def test_teardown_leaves_no_namespace_when_the_body_raises() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with NamespaceLab(2, prefix=PREFIX) as lab:
            names = set(lab.namespaces)
            assert names <= all_namespaces()
            raise RuntimeError("boom")
    assert not names & all_namespaces()


@needs_namespaces
def test_teardown_stops_processes_started_on_hosts() -> None:
    with NamespaceLab(2, prefix=PREFIX) as lab:
        sleeper = lab[1].popen(["sleep", "600"])
        # A grandchild the lab never saw: killed because it lives in the lab's namespace.
        lab[0].popen(["sh", "-c", "sleep 600 & wait"])
        time.sleep(0.2)
        assert sleeper.poll() is None
    assert sleeper.poll() is not None


def run_lab_child(script: str) -> subprocess.Popen[str]:
    """A separate Python process that opens a lab and prints its namespaces as JSON."""
    package_root = str(Path(labmod.__file__).resolve().parents[1])
    code = textwrap.dedent(
        f"""
        import json, sys, time
        sys.path.insert(0, {package_root!r})
        from rdma_interop.lab import NamespaceLab
        """
    ) + textwrap.dedent(script)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


LAB_THEN_WAIT = f"""
lab = NamespaceLab(2, prefix={PREFIX!r})
with lab:
    print(json.dumps(lab.namespaces), flush=True)
    time.sleep(600)
"""


@needs_namespaces
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_tears_the_lab_down(sig: signal.Signals) -> None:
    child = run_lab_child(LAB_THEN_WAIT)
    assert child.stdout is not None
    names = set(json.loads(child.stdout.readline()))
    assert names and names <= all_namespaces()
    child.send_signal(sig)
    _, err = child.communicate(timeout=30)
    assert child.returncode != 0
    assert f"interrupted by {sig.name}" in err
    assert not names & all_namespaces()


@needs_namespaces
def test_atexit_tears_down_a_lab_that_was_never_closed() -> None:
    child = run_lab_child(
        f"""
        lab = NamespaceLab(2, prefix={PREFIX!r})
        lab.start()
        print(json.dumps(lab.namespaces), flush=True)
        """
    )
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    names = set(json.loads(out))
    assert names and not names & all_namespaces()


@needs_namespaces
def test_stale_namespaces_of_a_killed_run_are_removed_and_others_are_not() -> None:
    killed = run_lab_child(
        f"""
        lab = NamespaceLab(3, prefix={PREFIX!r})
        lab.start()
        lab.hosts[1].popen(["sleep", "600"])  # an orphan once we are SIGKILLed
        print(json.dumps(lab.namespaces), flush=True)
        time.sleep(600)
        """
    )
    alive = run_lab_child(LAB_THEN_WAIT)
    unrelated = f"{PREFIX}-not-ours-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", unrelated], check=True)
    try:
        assert killed.stdout is not None and alive.stdout is not None
        stale = set(json.loads(killed.stdout.readline()))
        live = set(json.loads(alive.stdout.readline()))
        killed.kill()  # SIGKILL: no cleanup ran
        killed.wait(timeout=10)
        assert stale <= all_namespaces()

        with NamespaceLab(2, prefix=PREFIX) as lab:
            assert set(lab.removed_stale) == stale
            remaining = all_namespaces()
            assert not stale & remaining
            assert live <= remaining
            assert unrelated in remaining
    finally:
        alive.terminate()
        alive.communicate(timeout=30)
        subprocess.run(["ip", "netns", "del", unrelated], check=False)
    assert not live & all_namespaces()


def test_lab_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="n_hosts"):
        NamespaceLab(0)
    with pytest.raises(ValueError, match="prefix"):
        NamespaceLab(2, prefix="bad-prefix")
    with pytest.raises(ValueError, match="exactly 2"):
        NamespaceLab(3, topology="veth")


# ---- lab files ---------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lab.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_lab_file_lists_ssh_hosts(tmp_path: Path) -> None:
    (tmp_path / "id_lab").write_text("not really a key")
    (tmp_path / "lab_known").write_text("")
    lab = load_lab_file(write(tmp_path, """
        hosts:
          - name: node1
            address: 198.18.10.1
            rdma_probe: /opt/ri/bin/rdma-probe
            ssh: {host: node1.lab, user: root, port: 2222, key: id_lab, known_hosts: lab_known}
          - name: node2
            address: 198.18.10.2
    """))
    node1, node2 = lab.hosts
    assert (node1.name, node1.address, node1.ssh_host, node1.user, node1.port) == (
        "node1", "198.18.10.1", "node1.lab", "root", 2222)
    assert node1.key == str(tmp_path / "id_lab")
    assert node1.known_hosts == str(tmp_path / "lab_known")
    assert node1.rdma_probe == "/opt/ri/bin/rdma-probe"
    assert (node2.ssh_host, node2.user, node2.port, node2.key) == ("198.18.10.2", None, 22, None)
    assert (node2.known_hosts, node2.rdma_probe) == (None, "rdma-probe")
    assert (node2.path, node2.environment, node2.devices) == ((), (), None)


def test_lab_file_device_tier_keys(tmp_path: Path) -> None:
    lab = load_lab_file(write(tmp_path, """
        hosts:
          - name: node1
            address: 198.18.10.1
            path: [/opt/ri/bin, /opt/ri/tools]
            environment: {RDMA_INTEROP_PERSONALITY_DIR: "/srv/my p", DEPTH: 4}
            devices: [mlx5_0, irdma1]
    """))
    node = lab.hosts[0]
    assert node.path == ("/opt/ri/bin", "/opt/ri/tools")
    assert node.environment == (("RDMA_INTEROP_PERSONALITY_DIR", "/srv/my p"), ("DEPTH", "4"))
    assert node.devices == ("mlx5_0", "irdma1")
    remote = node.command(["rdma-probe", "devices"])[-1]
    assert remote == ("RDMA_INTEROP_PERSONALITY_DIR='/srv/my p'; export RDMA_INTEROP_PERSONALITY_DIR; "
                      "DEPTH=4; export DEPTH; PATH=/opt/ri/bin:/opt/ri/tools:\"$PATH\"; export PATH; "
                      "rdma-probe devices")


def test_ssh_host_runs_commands_in_batch_mode_with_quoting() -> None:
    host = SshHost(name="n", address="198.18.10.1", ssh_host="n.lab", user="lab", port=2222,
                   key="/k")
    argv = host.command(["rdma-probe", "serve", "--personality", "my peer"])
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-i") + 1] == "/k"
    assert argv[argv.index("-l") + 1] == "lab"
    assert "UserKnownHostsFile" not in " ".join(argv)
    pinned = SshHost(name="n", address="198.18.10.1", ssh_host="n.lab", known_hosts="/lab/kh")
    assert "UserKnownHostsFile=/lab/kh" in pinned.command(["true"])
    assert argv[-3:] == ["--", "n.lab", "rdma-probe serve --personality 'my peer'"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "top level: expected a mapping"),
        ("hosts: []", "hosts: expected a non-empty list"),
        ("hosts: [{address: 198.18.0.1}]", r"hosts\[0\].name: expected a name"),
        ("hosts: [{name: a, address: nowhere}]", r"hosts\[0\] \(a\).address: expected an IP"),
        ("hosts: [{name: a, address: 10.0.0.1, ssh: {port: 0}}]", r"ssh.port: expected an integer"),
        ("hosts: [{name: a, address: 10.0.0.1, ssh: {port: '22'}}]", r"ssh.port"),
        ("hosts: [{name: a, address: 10.0.0.1, ssh: {hostname: x}}]", r"ssh: unknown key\(s\) hostname"),
        ("hosts: [{name: a, address: 10.0.0.1, ssh: {key: /nonexistent/k}}]", "ssh.key: no such file"),
        ("hosts: [{name: a, address: 10.0.0.1, ssh: {host: -oProxyCommand=x}}]", "ssh.host"),
        ("hosts: [{name: a, address: 10.0.0.1, ssh: {known_hosts: /nonexistent/kh}}]",
         "ssh.known_hosts: no such file"),
        ("hosts: [{name: a, address: 10.0.0.1, rdma_probe: 7}]", "rdma_probe: expected a path"),
        ("hosts: [{name: a, address: 10.0.0.1}, {name: a, address: 10.0.0.2}]", "duplicate host name"),
        ("hosts: [{name: a, address: 10.0.0.1, port: 22}]", r"unknown key\(s\) port"),
        ("hosts: [{name: a, address: 10.0.0.1, path: bin}]", r"path: expected a list of absolute"),
        ("hosts: [{name: a, address: 10.0.0.1, path: [/a:/b]}]", r"path: expected"),
        ("hosts: [{name: a, address: 10.0.0.1, environment: {'A B': x}}]", r"environment: expected"),
        ("hosts: [{name: a, address: 10.0.0.1, devices: some}]", r"devices: expected 'all'"),
        ("hosts: [{name: a, address: 10.0.0.1, devices: ['-x']}]", r"devices: expected"),
        ("hosts: [{name: a, address: 10.0.0.1", "not valid YAML"),
    ],
)
def test_lab_file_errors_name_the_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(LabFileError, match=message) as info:
        load_lab_file(path)
    assert str(path) in str(info.value)


def test_missing_lab_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LabFileError, match="cannot read lab file"):
        load_lab_file(tmp_path / "absent.yaml")


# ---- SSH hosts, through a stand-in `ssh` that runs the remote command locally ---------------

FAKE_SSH = """#!/bin/sh
# Stand-in for ssh: checks BatchMode is asked for, skips the options up to "--", then the
# destination, and runs the remote command line with sh, as sshd would.
case " $* " in *" BatchMode=yes "*) ;; *) echo "no BatchMode" >&2; exit 255 ;; esac
while [ "$1" != "--" ]; do shift; done
shift 2
exec sh -c "$1"
"""


@pytest.fixture
def fake_ssh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    ssh = tmp_path / "bin" / "ssh"
    ssh.parent.mkdir()
    ssh.write_text(FAKE_SSH)
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{ssh.parent}:{os.environ['PATH']}")
    return ssh


def test_ssh_host_runs_a_command_with_its_arguments_intact(fake_ssh: Path) -> None:
    host = SshHost(name="n", address="198.18.10.1", ssh_host="n.lab")
    result = host.run(["printf", "%s|", "two words", "it's", "$HOME"])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "two words|it's|$HOME|"


def test_ssh_process_gets_sigterm_on_the_remote_side(fake_ssh: Path, tmp_path: Path) -> None:
    lab = load_lab_file(write(tmp_path, "hosts: [{name: a, address: 198.18.10.1}]"))
    lab.check_reachable()
    (host,) = lab.hosts
    script = "trap 'echo got-term; exit 3' TERM; echo ready; while :; do sleep 0.05; done"
    proc = host.popen(["sh", "-c", script])
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.terminate()
    out, _ = proc.communicate(timeout=10)
    assert "got-term" in out
    assert proc.returncode == 3


def test_closing_an_ssh_lab_stops_what_runs_on_its_hosts(fake_ssh: Path, tmp_path: Path) -> None:
    pidfile = tmp_path / "remote.pid"
    started = time.monotonic()
    with load_lab_file(write(tmp_path, "hosts: [{name: a, address: 198.18.10.1}]")) as lab:
        proc = lab.hosts[0].popen(["sh", "-c", f"echo $$ > {pidfile}; exec sleep 600"])
        while not pidfile.exists():
            time.sleep(0.05)
    assert proc.poll() is not None
    assert not Path(f"/proc/{pidfile.read_text().strip()}").exists()  # the remote one, too
    assert time.monotonic() - started < 5  # by SIGTERM, not the SIGKILL after the grace time
