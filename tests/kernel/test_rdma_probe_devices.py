"""rdma-probe devices on the guest's kernel siw and rxe: what a device-pair runner reads.

The guest has siw0 on eth0 (10.0.2.15), rxe0 on veth-a (10.9.0.1) and rxe1 on veth-b
(10.9.0.2). Each fact asserted here comes from the kernel's own answer:

- kind: siw is iWARP (IBV_TRANSPORT_IWARP); rxe's GID entries are all RoCE v2;
- driver: the uverbs driver id RDMA netlink gives (soft devices have no sysfs driver link);
- netdev and addresses: RDMA_NLDEV_CMD_PORT_GET, as `rdma link` shows them; siw's GID entry
  names no netdev, so netlink is the only source for iWARP;
- XRC: ibv_open_xrcd fails with EOPNOTSUPP on both (they have no XRC);
- SRQ: ibv_create_srq succeeds on both;
- UD: siw refuses an IBV_QPT_UD QP with EOPNOTSUPP (iWARP has no datagram service); rxe
  creates one.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.guest import (GUEST_RXE_ADDRESSES, GUEST_SIW_ADDRESS, Guest, guest_path,
                                 json_lines)
from tests.support.tools import built_tool

EOPNOTSUPP = 95
ENOSYS = 38  # XRC from older providers


def rdma_probe() -> str:
    return guest_path(built_tool("rdma-probe"))


@pytest.fixture(scope="module")
def inventory(guest: Guest) -> dict[str, dict[str, Any]]:
    """`rdma-probe devices --json` in the guest, by device name."""
    if not guest.alive():
        guest.restart()
    result = guest.run(f"{rdma_probe()} devices --json", timeout=120)
    assert result.rc == 0, result.output
    docs = json_lines(result.output)
    assert len(docs) == 1, result.output
    report = docs[0]
    assert report["schema"] == "rdma-interop/devices/1"
    assert "note" not in report
    return {d["name"]: d for d in report["devices"]}


def addresses(device: dict[str, Any]) -> list[str]:
    return [a.split("/")[0] for a in device["ports"][0]["addresses"]]


@pytest.mark.parametrize("name,kind,driver,netdev,address", [
    ("siw0", "iwarp", "siw", "eth0", GUEST_SIW_ADDRESS),
    ("rxe0", "roce-v2", "rxe", "veth-a", GUEST_RXE_ADDRESSES[0]),
    ("rxe1", "roce-v2", "rxe", "veth-b", GUEST_RXE_ADDRESSES[1]),
])
def test_each_device_has_its_kind_driver_netdev_and_address(
        inventory: dict[str, dict[str, Any]], name: str, kind: str, driver: str, netdev: str,
        address: str) -> None:
    dev = inventory[name]
    assert dev["kind"] == kind
    assert (dev["driver"], dev["driver_source"], dev["bus_driver"]) == (driver, "netlink", None)
    assert len(dev["ports"]) == 1
    port = dev["ports"][0]
    assert port["state"] == "ACTIVE" and port["phys_state"] == "LINK_UP"
    assert port["link_layer"] == "Ethernet" and port["lid"] is None
    assert port["netdev"]["name"] == netdev and port["netdev"]["source"] == "netlink", port
    assert port["netdev_unknown"] is None
    assert addresses(dev)[0] == address, port["addresses"]


def test_only_equal_kinds_pair(inventory: dict[str, dict[str, Any]]) -> None:
    assert inventory["rxe0"]["kind"] == inventory["rxe1"]["kind"]
    assert inventory["siw0"]["kind"] != inventory["rxe0"]["kind"]


def test_iwarp_gid_entries_name_no_netdev_so_netlink_does(
        inventory: dict[str, dict[str, Any]]) -> None:
    siw = inventory["siw0"]
    assert siw["transport"] == "iwarp"
    assert siw["ports"][0]["roce_versions"] == []
    gids = siw["ports"][0]["gids"]
    assert gids and all(g["netdev_index"] is None for g in gids), gids
    rxe = inventory["rxe0"]
    assert rxe["transport"] == "ib"
    assert rxe["ports"][0]["roce_versions"] == ["roce-v2"]
    ifindex = rxe["ports"][0]["netdev"]["ifindex"]
    rxe_gids = rxe["ports"][0]["gids"]
    assert {g["type"] for g in rxe_gids} == {"roce-v2"}
    assert {g["netdev_index"] for g in rxe_gids} == {ifindex}
    # The IPv4 GID of RoCE v2 is the address mapped into IPv6 (::ffff:10.9.0.1).
    assert f"::ffff:{GUEST_RXE_ADDRESSES[0]}" in [g["gid"] for g in rxe_gids]


@pytest.mark.parametrize("name", ["siw0", "rxe0"])
def test_soft_devices_have_no_xrc_and_have_srq(inventory: dict[str, dict[str, Any]],
                                               name: str) -> None:
    caps = inventory[name]["capabilities"]
    xrc = caps["xrc"]
    assert not xrc["supported"], xrc
    assert xrc["errno"] in (EOPNOTSUPP, ENOSYS), xrc
    assert "not supported" in xrc["detail"] and "ibv_open_xrcd" in xrc["detail"], xrc
    assert caps["srq"]["supported"], caps["srq"]
    assert caps["srq"]["errno"] is None


def test_ud_is_refused_by_iwarp_and_created_by_rxe(inventory: dict[str, dict[str, Any]]) -> None:
    siw_ud = inventory["siw0"]["capabilities"]["ud"]
    assert not siw_ud["supported"]
    assert siw_ud["errno"] == EOPNOTSUPP
    assert "EOPNOTSUPP" in siw_ud["detail"], siw_ud
    rxe_ud = inventory["rxe0"]["capabilities"]["ud"]
    assert rxe_ud["supported"], rxe_ud


def test_text_output_is_one_block_per_device(guest: Guest) -> None:
    result = guest.run(f"{rdma_probe()} devices", timeout=120)
    assert result.rc == 0, result.output
    blocks = {b.split()[0]: b for b in result.output.split("\n\n")[1:] if b.strip()}
    assert result.output.splitlines()[0].endswith(": 3 RDMA devices"), result.output
    assert set(blocks) == {"siw0", "rxe0", "rxe1"}, result.output
    siw, rxe = blocks["siw0"], blocks["rxe0"]
    assert siw.startswith("siw0  kind iwarp  driver siw  ")
    assert "    netdev eth0 (ifindex " in siw
    assert f"from netlink): {GUEST_SIW_ADDRESS}/24 " in siw
    assert "    ud              no  (ibv_create_qp(IBV_QPT_UD) failed: " in siw
    assert "    srq             yes (ibv_create_srq succeeded" in siw
    assert "    xrc             no  (not supported: ibv_open_xrcd: " in siw
    assert rxe.startswith("rxe0  kind roce-v2  driver rxe  ")
    assert f"from netlink): {GUEST_RXE_ADDRESSES[0]}/24 " in rxe
    assert "    ud              yes " in rxe


def test_one_device_and_an_unknown_one(guest: Guest) -> None:
    one = guest.run(f"{rdma_probe()} devices --device rxe1 --json", timeout=120)
    assert one.rc == 0, one.output
    assert [d["name"] for d in json_lines(one.output)[0]["devices"]] == ["rxe1"]
    bad = guest.run(f"{rdma_probe()} devices --device mlx5_0", timeout=60)
    assert bad.rc == 2
    line = bad.output.strip()
    prefix = "rdma-probe devices: error: no RDMA device 'mlx5_0' on this node (present: "
    assert line.startswith(prefix) and line.endswith(")"), line
    assert sorted(line[len(prefix):-1].split(", ")) == ["rxe0", "rxe1", "siw0"], line
