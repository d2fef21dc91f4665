"""vnpu-scheduler's decision served by vnpu-device-plugin, end to end on one simulated node.

kube-apiserver is the session's (the test has a namespace of its own); a simulated kubelet
and the device plugin run in this process; the scheduler runs as its real command. The test
plays kube-scheduler: it calls the extender's ``filter`` and ``bind`` for each pod. The
scheduler writes its decision and the node lock (owner named) in the Binding; kubelet admits
the pod and the plugin serves it, erases the entries, marks it ``success`` and releases the
lock, so the next bind to the node proceeds.
"""

from __future__ import annotations

import json
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
import yaml

from vnpu_core import protocol
from vnpu_device_plugin import plugin, settings
from vnpu_npu.sim import backend as sim_backend
from vnpu_sandbox.kubelet import apiclient, kubelet, nodestatus
from vnpu_sandbox.platform import components

NODE = "npu-node-1"
CW = "Ascend310P"
RESOURCE = f"huawei.com/{CW}"
NOT_READY = "node.kubernetes.io/not-ready"
MERGE_PATCH = "application/merge-patch+json"


def _wait(check: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Cluster:
    def __init__(self, root: Path, namespace: str, kubeconfig: Path) -> None:
        self.root = root
        self.namespace = namespace
        self.kubeconfig = kubeconfig
        self.client = apiclient.client_from_kubeconfig(str(kubeconfig))
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.http = httpx.Client(timeout=30)
        self.scheduler_url = ""
        self.kubelet: kubelet.Kubelet | None = None

    def pod(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            self.core.read_namespaced_pod(name, self.namespace, _preload_content=False).data
        )
        return found

    def create(self, name: str, containers: list[tuple[str, int, int]]) -> dict[str, Any]:
        """A pod whose containers (name, count, memory MiB; 0 = whole chip) ask for NPUs."""
        specs = []
        for container, count, memory in containers:
            limits = {RESOURCE: str(count)} if count else {}
            if memory:
                limits[f"{RESOURCE}-memory"] = str(memory)
            specs.append({"name": container, "image": "x", "resources": {"limits": limits}})
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            # No webhook runs here: the pod names the scheduler it is for, as the webhook would.
            "spec": {"schedulerName": "vnpu-scheduler", "containers": specs},
        }
        created: dict[str, Any] = json.loads(
            self.core.create_namespaced_pod(self.namespace, body, _preload_content=False).data
        )
        return created

    def schedule(self, name: str) -> None:
        """What kube-scheduler does with an extender: filter, then bind through it."""
        pod = self.pod(name)
        filtered = self.http.post(
            f"{self.scheduler_url}/filter", json={"Pod": pod, "NodeNames": [NODE]}
        ).json()
        assert filtered.get("NodeNames") == [NODE], filtered
        bound = self.http.post(
            f"{self.scheduler_url}/bind",
            json={
                "PodName": name,
                "PodNamespace": self.namespace,
                "PodUID": pod["metadata"]["uid"],
                "Node": NODE,
            },
        ).json()
        assert not bound.get("Error"), bound

    def running(self, name: str) -> bool:
        return self.pod(name)["status"].get("phase") == "Running"

    def schedulable(self) -> bool:
        """Once the node reports Ready, lift the ``not-ready`` NoSchedule taint kube-apiserver
        gave it at creation, as kube-controller-manager's node lifecycle controller would
        (none runs here). True when the node is Ready and no longer has the taint."""
        node: dict[str, Any] = json.loads(self.core.read_node(NODE, _preload_content=False).data)
        conditions = node.get("status", {}).get("conditions") or []
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
            return False
        taints = node["spec"].get("taints") or []
        kept = [t for t in taints if t["key"] != NOT_READY]
        if len(kept) == len(taints):
            return True
        body = {
            "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
            "spec": {"taints": kept or None},
        }
        try:
            self.core.patch_node(NODE, body, _content_type=MERGE_PATCH)
        except kubernetes.client.ApiException as exc:
            if exc.status != 409:  # the node changed meanwhile: look again
                raise
            return False
        return True


@pytest.fixture
def cluster(kube_namespace: Any) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="vint-", dir="/tmp"))
    sim_dir = root / "sim"
    sim_dir.mkdir()
    (sim_dir / "chips.yaml").write_text(
        yaml.safe_dump({"chip": "310P3", "chips": 4, "server": "300i-duo", "seed": "integration"}),
        encoding="utf-8",
    )
    world = Cluster(root, kube_namespace.name, kube_namespace.kubeconfig)
    node = kubelet.Kubelet(
        kubelet.KubeletConfig(
            node=nodestatus.NodeIdentity(NODE),
            device_plugin_dir=root / "dp",
            pod_resources_socket=root / "pr" / "kubelet.sock",
            heartbeat_seconds=0,
        ),
        apiclient.client_from_kubeconfig(str(world.kubeconfig)),
    )
    node.start()
    world.kubelet = node
    device_plugin = plugin.Plugin(
        settings.Settings(
            node_name=NODE,
            backend=settings.BackendKind.SIM,
            sim_dir=sim_dir,
            device_plugin_dir=root / "dp",
            pod_resources_socket=root / "pr" / "kubelet.sock",
            kubeconfig=world.kubeconfig,
            state_dir=root / "state",
            metrics_host="127.0.0.1",
            metrics_port=0,
        )
    )
    device_plugin.start()
    (port,) = components.free_ports(1)
    log = (root / "scheduler.log").open("w")
    scheduler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vnpu_scheduler",
            "--kubeconfig",
            str(world.kubeconfig),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--lock-wait",
            "10",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    world.scheduler_url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return world.http.get(f"{world.scheduler_url}/readyz").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        _wait(ready, "the scheduler ready")
        _wait(lambda: node.capacity().get(RESOURCE) == (28, 28), "the plugin registered")
        _wait(world.schedulable, f"{NODE} Ready and schedulable")
        yield world
    finally:
        scheduler.terminate()
        scheduler.wait(timeout=10)
        log.close()
        device_plugin.stop()
        node.stop()
        world.http.close()
        apiclient.close_client(world.client)
    shutil.rmtree(root, ignore_errors=True)


def test_scheduled_pods_are_served_on_the_chips_and_templates_the_scheduler_chose(
    cluster: Cluster,
) -> None:
    sim = sim_backend.SimBackend(cluster.root / "sim")
    phy = {c.uuid: c.phy_id for c in sim.chips()}
    for name, containers in [
        ("small", [("c0", 1, 3000)]),
        ("medium", [("c0", 1, 6000)]),
        ("pair", [("a", 1, 12000), ("b", 1, 2000)]),
        ("whole", [("c0", 2, 0)]),
    ]:
        cluster.create(name, containers)
        cluster.schedule(name)  # waits for the node lock, which the plugin releases
        _wait(lambda n=name: cluster.running(n), f"{name} running")
        notes = cluster.pod(name)["metadata"]["annotations"]
        assert notes[protocol.BIND_PHASE_KEY] == "success"
        assert notes[protocol.to_allocate_key(CW)].strip(";") == ""
        decided = protocol.decode_devices("k", notes[protocol.allocated_key(CW)])
        runtime = iter(protocol.decode_runtime("k", notes[protocol.runtime_key(CW)]))
        vnpus = {
            v.vnpu_id: (v.phy_id, v.template) for c in sim.chips() for v in sim.vnpus(c.phy_id)
        }
        allocation = cluster.kubelet.allocation(cluster.namespace, name)
        assert allocation is not None
        for (container, _count, _memory), entry in zip(containers, decided, strict=True):
            env = allocation.container(container).env
            infos = [next(runtime) for _ in entry]
            if infos[0].template is None:
                assert env == {"ASCEND_VISIBLE_DEVICES": ",".join(str(phy[d.uuid]) for d in entry)}
                continue
            assert env["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"
            got = vnpus[int(env["ASCEND_VISIBLE_DEVICES"])]
            assert got == (phy[entry[0].uuid], infos[0].template)
        node_notes = json.loads(cluster.core.read_node(NODE, _preload_content=False).data)[
            "metadata"
        ].get("annotations", {})
        assert protocol.NODE_LOCK_KEY not in node_notes
    templates = sorted(v.template for c in sim.chips() for v in sim.vnpus(c.phy_id))
    assert templates == ["vir01", "vir01", "vir02", "vir04"]
