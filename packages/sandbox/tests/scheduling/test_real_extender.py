"""The driver with the real vnpu-scheduler as its extender, configured as the Helm chart does.

vnpu-scheduler runs as its own command against the API emulator; two nodes carry what a
device plugin would have registered (chips, handshake, allocatable), written with vnpu_core's
wire codecs. No device plugin runs, so the scheduler releases each node lock right after the
Binding (``--release-lock-after-bind``). The driver's part: route NPU pods to the extender's
filter, prioritize and bind, and report the extender's reasons in kube-scheduler's words.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.scheduling import config

from .conftest import Cluster, Start, wait_for

protocol = pytest.importorskip("vnpu_core.protocol", reason="needs vnpu-core (the wire codecs)")
coordination = pytest.importorskip("vnpu_core.coordination", reason="needs vnpu-core")
pytest.importorskip("vnpu_scheduler", reason="needs vnpu-scheduler to run as the extender")

Json = dict[str, Any]
WORD = "Ascend310P"
RESOURCE = f"huawei.com/{WORD}"


def npu_node(cluster: Cluster, name: str, chips: int) -> None:
    registered = [
        protocol.RegisteredChip(f"{name}-chip-{i}", i, 7, 21527, 8, WORD, True, None)
        for i in range(chips)
    ]
    stamp = coordination.encode_handshake(
        coordination.Handshake(
            coordination.HandshakeState.REPORTED, datetime.now().replace(microsecond=0)
        )
    )
    cluster.add_node(name, extra={RESOURCE: str(chips * 7)})
    cluster.patch_node(
        name,
        {
            "metadata": {
                "annotations": {
                    protocol.node_register_key(WORD): protocol.encode_node_register(registered),
                    protocol.node_handshake_key(WORD): stamp,
                }
            }
        },
    )


def chart_config(port: int) -> config.Config:
    """The extender entry the chart renders (docs/scheduler.md, "kube-scheduler configuration")."""
    return config.parse(
        {
            "apiVersion": config.API_VERSION,
            "kind": config.KIND,
            "profiles": [{"schedulerName": "vnpu-scheduler"}],
            "extenders": [
                {
                    "urlPrefix": f"http://127.0.0.1:{port}",
                    "filterVerb": "filter",
                    "prioritizeVerb": "prioritize",
                    "bindVerb": "bind",
                    "weight": 10,
                    "nodeCacheCapable": True,
                    "httpTimeout": "30s",
                    "enableHTTPS": False,
                    "ignorable": False,
                    "managedResources": [
                        {"name": RESOURCE, "ignoredByScheduler": False},
                        {"name": f"{RESOURCE}-memory", "ignoredByScheduler": True},
                        {"name": f"{RESOURCE}-core", "ignoredByScheduler": True},
                    ],
                }
            ],
        }
    )


@pytest.fixture
def scheduler_port(cluster: Cluster, tmp_path: Path) -> Iterator[int]:
    npu_node(cluster, "npu-a", 2)
    npu_node(cluster, "npu-b", 4)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    kubeconfig = harness.write_kubeconfig(tmp_path / "kubeconfig", cluster.url)
    log = (tmp_path / "vnpu-scheduler.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vnpu_scheduler",
            "--kubeconfig",
            str(kubeconfig),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--release-lock-after-bind",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def ready() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, "vnpu-scheduler to be ready", timeout=20)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


def test_npu_pods_go_through_vnpu_scheduler(
    cluster: Cluster, scheduler_port: int, start_driver: Start
) -> None:
    start_driver(chart_config(scheduler_port))
    limits = {RESOURCE: "1", f"{RESOURCE}-memory": "3072"}
    cluster.add_pod("small", limits=limits, scheduler="vnpu-scheduler")
    cluster.add_pod("web", requests={"cpu": "100m"}, scheduler="vnpu-scheduler")
    cluster.add_pod("huge", limits={RESOURCE: "5"}, scheduler="vnpu-scheduler")

    node = wait_for(lambda: cluster.node_of("small"), "the NPU pod to be bound", timeout=15)
    assert node in ("npu-a", "npu-b")
    notes = cluster.pod("small")["metadata"]["annotations"]
    assert notes[protocol.VGPU_NODE_KEY] == node  # written by the extender's bind
    assert notes[protocol.allocated_key(WORD)]
    assert wait_for(lambda: cluster.node_of("web"), "the plain pod to be bound")  # bound directly
    assert protocol.VGPU_NODE_KEY not in (cluster.pod("web")["metadata"].get("annotations") or {})

    events = wait_for(
        lambda: cluster.events("huge", "FailedScheduling"), "FailedScheduling", timeout=15
    )
    assert events[0]["message"] == (
        "0/2 nodes are available: 1 Ascend310P: asked 5 chips, node has 2 usable of 2, "
        "1 Ascend310P: asked 5 chips, node has 4 usable of 4. preemption: 0/2 nodes are "
        "available: 2 Preemption is not helpful for scheduling.."
    )
