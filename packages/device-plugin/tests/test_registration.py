"""Registration, capacity, the published node annotations, kubelet restarts, probes and signals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import grpc
import kubernetes
import pytest

from vnpu_core import coordination, nodes, protocol
from vnpu_device_plugin import plugin, settings
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2
from vnpu_sandbox.kubelet import apiclient

Node = Any
Kit = Any
CW = "Ascend310P"


def test_registers_the_resource_with_chips_times_slots_devices(running: Node, kit: Kit) -> None:
    node = running
    assert node.kubelet.capacity()[kit.RESOURCE] == (28, 28)
    options = node.stub().GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
    assert options.get_preferred_allocation_available
    assert not options.pre_start_required
    stream = node.stub().ListAndWatch(api_pb2.Empty(), timeout=5)
    first = next(stream)
    stream.cancel()
    uuids = [node.api.uuid(i) for i in range(4)]
    assert [d.ID for d in first.devices] == [f"{u}-{i}" for u in uuids for i in range(7)]
    assert {d.health for d in first.devices} == {"Healthy"}


def test_publishes_inventory_handshake_soft_flag_and_server_kind(running: Node, kit: Kit) -> None:
    notes = running.api.node_annotations()
    chips = protocol.decode_node_register(
        protocol.node_register_key(CW), notes[protocol.node_register_key(CW)]
    )
    assert [c.index for c in chips] == [0, 1, 2, 3]
    assert {(c.count, c.devmem, c.devcore, c.type, c.health) for c in chips} == {
        (7, 21527, 8, CW, True)
    }
    assert all(c.network_id is None for c in chips)  # NetworkID is for the 910 series only
    handshake = coordination.decode_handshake(
        protocol.node_handshake_key(CW), notes[protocol.node_handshake_key(CW)]
    )
    assert handshake.state is coordination.HandshakeState.REPORTED
    assert notes[protocol.node_handshake_key(CW)].startswith("Reported_")
    assert "." in notes[protocol.node_handshake_key(CW)]  # the plugin's layout: 2006.01.02
    assert notes[protocol.SOFT_MODE_NODE_KEY] == "false"
    assert notes[nodes.SERVER_KIND_KEY] == "300i-duo"


def test_a_910b_node_publishes_network_ids_and_its_mesh(
    root: Any, kube_namespace: Any, kit: Kit
) -> None:
    kit.write_node(root / "sim", chip="910B3", chips=8)
    options = settings.Settings(
        node_name="b3",
        backend="sim",
        sim_dir=root / "sim",
        device_plugin_dir=root / "dp",
        kubeconfig=kube_namespace.kubeconfig,
        state_dir=root / "state",
        metrics_port=0,
        metrics_host="127.0.0.1",
    )
    client = apiclient.client_from_kubeconfig(str(kube_namespace.kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "b3"}})
    node = plugin.Plugin(options)
    node.start()
    try:
        raw = json.loads(core.read_node("b3", _preload_content=False).data)["metadata"][
            "annotations"
        ]
    finally:
        node.stop()
        apiclient.close_client(client)
    chips = protocol.decode_node_register(
        protocol.node_register_key("Ascend910B3"), raw[protocol.node_register_key("Ascend910B3")]
    )
    assert [c.network_id for c in chips] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {(c.count, c.devmem, c.devcore) for c in chips} == {(4, 65536, 20)}
    assert raw[nodes.SERVER_KIND_KEY] == "910b-8"
    assert node.inventory.socket_name == "vnpu-Ascend910B3.sock"


def test_kubelet_restart_gets_a_new_server_and_registration_within_two_seconds(
    running: Node, kit: Kit
) -> None:
    node = running
    node.api.place("before", [[kit.Grant(1, "vir02", 6144)]])
    kit.wait_for(lambda: node.running("before"), what="a pod before the kubelet restart")
    vnpus = node.vnpus()
    before = node.plugin.link.registrations
    node.kubelet.restart()
    started = time.monotonic()
    # kubelet counts the devices once ListAndWatch answers, inside the Register call; the
    # plugin counts its registration once that call returns.
    kit.wait_for(
        lambda: (
            node.kubelet.capacity().get(kit.RESOURCE) == (28, 28)
            and node.plugin.link.registrations > before
        ),
        timeout=5,
    )
    assert time.monotonic() - started < 2.0
    assert node.plugin.link.registrations == before + 1
    node.api.place("after", [[kit.Grant(0, "vir01", 3072)]])
    kit.wait_for(lambda: node.running("after"), what="a pod after the kubelet restart")
    assert node.running("before")
    assert node.plugin.reconciler.run_once().reclaimed == []
    assert set(vnpus) <= set(node.vnpus())  # the running pod kept its vNPU
    assert (
        node.plugin.stats.registry.get_sample_value(
            "vnpu_device_plugin_registrations_total", {"result": "success"}
        )
        == 2
    )


def test_registers_once_kubelet_comes_up_later(node: Node, kit: Kit) -> None:
    node.kubelet.stop()
    (node.plugin_dir / "kubelet.sock").unlink(missing_ok=True)
    node.start_plugin()
    assert node.plugin.problem().startswith("not registered")
    node.start_kubelet()
    kit.wait_for(lambda: node.kubelet.capacity().get(kit.RESOURCE) == (28, 28), timeout=5)
    kit.wait_for(lambda: node.plugin.problem() == "", what="healthy")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_healthz_and_metrics(running: Node, kit: Kit) -> None:
    node = running
    base = f"http://127.0.0.1:{node.plugin.monitoring.port}"
    assert _get(f"{base}/healthz") == (200, "ok\n")
    node.api.place("m", [[kit.Grant(1, "vir02", 6144)]])
    kit.wait_for(lambda: node.running("m"))
    status, text = _get(f"{base}/metrics")
    assert status == 200
    assert 'vnpu_device_plugin_allocations_total{result="success"} 1.0' in text
    assert "vnpu_device_plugin_vnpus_created_total 1.0" in text
    assert 'vnpu_device_plugin_allocate_duration_seconds_count{result="success"} 1.0' in text
    assert 'vnpu_device_plugin_registrations_total{result="success"} 1.0' in text
    assert 'vnpu_device_plugin_chips{health="healthy"} 4.0' in text
    assert 'vnpu_build_info{component="device-plugin",version="0.1.0"} 1.0' in text
    assert _get(f"{base}/nothing")[0] == 404
    node.kubelet.stop()  # kubelet gone: the plugin is not registered any more
    kit.wait_for(lambda: _get(f"{base}/healthz")[0] == 503, what="healthz 503")
    assert "not registered" in _get(f"{base}/healthz")[1]


def test_sigterm_stops_the_command_cleanly(node: Node, kit: Kit) -> None:
    process = kit.PluginProcess(node).start()
    try:
        kit.wait_for(
            lambda: node.kubelet.capacity().get(kit.RESOURCE) == (28, 28),
            timeout=15,
            what="the command registered",
        )
        socket = node.plugin_dir / "vnpu-Ascend310P.sock"
        assert socket.exists()
        process.process.send_signal(signal.SIGTERM)
        assert process.wait() == 0
    finally:
        process.stop()
    assert not socket.exists()
    assert '"event": "plugin_stopped"' in process.output()
    assert '"signal": "SIGTERM"' in process.output()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--vnpu-mode", "hybrid"], "vnpu_mode"),
        (["--metrics-port", "70000"], "metrics_port"),
        (["--backend", "sim"], "sim_dir: required with backend sim"),
        (["--health-interval", "0"], "health_interval"),
        (["--server-kind", "ring"], "server_kind"),
    ],
)
def test_bad_settings_exit_2_naming_the_field(
    node: Node, kit: Kit, flags: list[str], named: str
) -> None:
    command = [sys.executable, "-m", "vnpu_device_plugin", "--node-name", "n", *flags]
    if "--backend" not in flags:
        command += ["--backend", "sim", "--sim-dir", str(node.sim_dir)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr


def test_a_broken_ledger_stops_the_start_with_its_path(node: Node, kit: Kit) -> None:
    node.state_dir.mkdir(parents=True)
    (node.state_dir / "ledger.json").write_text("{not json", encoding="utf-8")
    process = kit.PluginProcess(node).start()
    assert process.wait() == 1
    assert f"ownership ledger {node.state_dir / 'ledger.json'}: not JSON" in process.output()


def test_list_and_watch_streams_end_when_the_plugin_stops(running: Node) -> None:
    stream = running.stub().ListAndWatch(api_pb2.Empty(), timeout=10)
    next(stream)
    started = time.monotonic()
    running.stop_plugin()
    assert list(stream) == []  # the stream ends (kubelet then marks the devices unhealthy)
    assert stream.code() is grpc.StatusCode.OK
    assert time.monotonic() - started < 5
