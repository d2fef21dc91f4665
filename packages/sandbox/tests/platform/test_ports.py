"""A sandbox's ports: all different, none in use, none where outgoing connections take theirs."""

from __future__ import annotations

import socket
from pathlib import Path

from vnpu_sandbox.platform import clusterfile, components, controlplane


def _ephemeral_low() -> int:
    text = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text(encoding="ascii")
    return int(text.split()[0])


def test_one_picker_never_returns_a_port_twice_nor_one_from_the_ephemeral_range() -> None:
    pick = components.PortPicker()
    try:
        ports = [pick() for _ in range(300)]
    finally:
        pick.close()
    assert len(set(ports)) == 300
    assert all(components.PortPicker.FIRST <= p < _ephemeral_low() for p in ports)


def test_two_pickers_at_once_share_no_port() -> None:
    first, second = components.PortPicker(), components.PortPicker()
    try:
        taken = {first() for _ in range(100)}
        assert not taken & {second() for _ in range(100)}
    finally:
        first.close()
        second.close()


def test_a_port_someone_listens_on_is_skipped() -> None:
    pick = components.PortPicker()
    with socket.socket() as listener:
        listener.bind((components.LOOPBACK, pick._next))
        listener.listen()
        busy = listener.getsockname()[1]
        try:
            assert pick() != busy
        finally:
            pick.close()


def test_a_wanted_port_is_taken_as_given() -> None:
    pick = components.PortPicker()
    try:
        assert pick(8443) == 8443
    finally:
        pick.close()


def test_a_sandbox_and_its_control_plane_get_different_ports(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("nodes:\n  - {name: a, chip: 310P3, chips: 2, server: 300i-duo}\n")
    nodes = clusterfile.read(cluster)
    pick = components.PortPicker()
    try:
        ports = components.choose_ports(nodes, pick)
        plane = controlplane.Ports.choose(pick, ports.api)
    finally:
        pick.close()
    every = [*ports.as_dict().values(), *plane.as_dict().values(), plane.etcd_peer]
    assert plane.api == ports.api
    assert len(set(every)) == len(every) - 1  # the API port is listed by both
