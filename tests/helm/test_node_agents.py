"""The device plugin and exporter DaemonSets as rendered (simulated backend), run for real.

Each container's command and args are run as a process; every hostPath volume is a directory
under one temporary "host" root, so the two agents share what they share on a node (the
ledger's state directory), and ConfigMap volumes hold the rendered ConfigMap. Only the metrics
port and host (chosen by the test machine) and the kubeconfig (instead of the service account:
the admin's, on the session's kube-apiserver, in a namespace of the test's own) change. The device plugin publishes the simulated chips on the Node and writes its ledger; the
exporter reads the chips and that ledger and serves them on its rendered port.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest

from vnpu_core import protocol
from vnpu_npu.sim import backend as sim_backend
from vnpu_sandbox.platform import components

NODE = "npu-1"
SIM = "/var/lib/vnpu/sim-node"
VALUES = {
    "devicePlugin": {"backend": "sim", "simDir": SIM},
    "exporter": {"backend": "sim", "simDir": SIM},
}
Json = dict[str, Any]


def _mapping(manifests, spec: Json, container: Json, host: Path, tmp: Path) -> dict[str, Path]:
    """Container mount path -> local directory standing in for the volume."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    mapping: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "hostPath" in volume:
            local = host / volume["hostPath"]["path"].lstrip("/")
        else:
            local = tmp / f"{container['name']}-{mount['name']}"
            data = manifests.get("ConfigMap", volume["configMap"]["name"])["data"]
            local.mkdir(parents=True, exist_ok=True)
            for key, text in data.items():
                (local / key).write_text(text, encoding="utf-8")
        local.mkdir(parents=True, exist_ok=True)
        mapping[mount["mountPath"]] = local
    return mapping


def _command(container: Json, mapping: dict[str, Path], port_flag: str, port: int) -> list[str]:
    program = shutil.which(container["command"][0], path=str(Path(sys.executable).parent))
    assert program is not None, f"{container['command'][0]} is installed"
    args = [program]
    for given in container["args"]:
        flag, _, value = given.replace("$(NODE_NAME)", NODE).partition("=")
        if flag == port_flag:
            value = str(port)
        elif flag in ("--host", "--metrics-host"):
            value = "127.0.0.1"
        else:
            for path in sorted(mapping, key=len, reverse=True):
                if value == path or value.startswith(path + "/"):
                    value = str(mapping[path]) + value[len(path) :]
                    break
        args.append(f"{flag}={value}" if value or "=" in given else flag)
    return args


Start = Callable[[str, str], int]


@pytest.fixture
def node_agents(
    render, tmp_path: Path, kube_namespace: Any
) -> Iterator[tuple[Start, kubernetes.client.CoreV1Api, Path]]:
    manifests = render(VALUES)
    # A short root: a unix socket path may not exceed 107 bytes, and the plugin's socket is
    # <root>/var/lib/kubelet/device-plugins/vnpu-Ascend310P.sock.
    short = tempfile.TemporaryDirectory(prefix="vh", dir="/tmp")
    host = Path(short.name)
    # The simulated node's state, as ``python -m vnpu_npu.sim DIR init --chip
    # 310P3 --chips 2`` makes it.
    sim = host / SIM.lstrip("/")
    sim.mkdir(parents=True)
    (sim / "chips.yaml").write_text("chip: 310P3\nchips: 2\n", encoding="utf-8")
    sim_backend.SimBackend(sim)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("VNPU_")}
    processes: list[tuple[subprocess.Popen[bytes], Any]] = []
    kubeconfig = kube_namespace.kubeconfig
    client = kubernetes.config.new_client_from_config(str(kubeconfig))
    core = kubernetes.client.CoreV1Api(client)
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})

    def start(container_name: str, port_flag: str) -> int:
        spec, container = manifests.container(container_name)
        mapping = _mapping(manifests, spec, container, host, tmp_path)
        (port,) = components.free_ports(1)
        command = [*_command(container, mapping, port_flag, port), f"--kubeconfig={kubeconfig}"]
        log = (tmp_path / f"{container_name}.log").open("w")
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment)
        processes.append((process, log))
        deadline = time.monotonic() + 25
        while True:
            assert process.poll() is None, (tmp_path / f"{container_name}.log").read_text()
            try:
                httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
                return port
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{container_name} did not serve /metrics"
            time.sleep(0.1)

    try:
        yield start, core, host
    finally:
        for process, log in processes:
            process.terminate()
            process.wait(timeout=15)
            log.close()
        client.close()
        short.cleanup()


def test_device_plugin_and_exporter_run_as_rendered(node_agents, default):
    start, core, host = node_agents
    plugin_port = start("device-plugin", "--metrics-port")
    # The plugin publishes the simulated chips on its Node (the API from the kubeconfig).
    deadline = time.monotonic() + 20
    key = protocol.node_register_key("Ascend310P")
    while key not in (core.read_node(NODE).metadata.annotations or {}):
        assert time.monotonic() < deadline, "the device plugin did not publish the chips"
        time.sleep(0.2)
    chips = protocol.decode_node_register(key, core.read_node(NODE).metadata.annotations[key])
    assert len(chips) == 2
    # Its ledger lives in the state directory's host path, which the exporter mounts too.
    assert (host / "var/lib/vnpu/device-plugin/ledger.json").is_file()
    metrics = httpx.get(f"http://127.0.0.1:{plugin_port}/metrics", timeout=10).text
    assert 'vnpu_build_info{component="device-plugin"' in metrics

    exporter_port = start("exporter", "--port")
    deadline = time.monotonic() + 20
    while True:
        text = httpx.get(f"http://127.0.0.1:{exporter_port}/metrics", timeout=10).text
        lines = text.splitlines()
        chips_seen = [line for line in lines if line.startswith("vnpu_chip_info{")]
        # The ownership group has read the plugin's ledger once it has a refresh time.
        ledger_read = [
            line
            for line in lines
            if line.startswith("vnpu_exporter_last_refresh_timestamp_seconds{")
            and 'group="ownership"' in line
            and float(line.rsplit(" ", 1)[1]) > 0
        ]
        if len(chips_seen) == 2 and ledger_read:
            break
        assert time.monotonic() < deadline, "the exporter did not report the chips and the ledger"
        time.sleep(0.2)
    assert all(f'node="{NODE}"' in line for line in chips_seen)
    assert httpx.get(f"http://127.0.0.1:{exporter_port}/healthz", timeout=10).status_code == 200
