"""Allocate end to end: kube-apiserver, the simulated kubelet and the plugin over real sockets.

A scheduler is played by the tests: each pod is created, then bound with the scheduler's
annotations inside the Binding, after taking the node lock as HAMi and vnpu do (owner
named), as Volcano does (bare time), or not at all. The kubelet admits the pod, calls
GetPreferredAllocation and Allocate per container, and records what it got.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import grpc
import pytest

from vnpu_core import protocol
from vnpu_device_plugin import plugin, settings
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from vnpu_npu.sim import backend as sim_backend

Node = Any
Kit = Any
CW = "Ascend310P"
LOCK = protocol.NODE_LOCK_KEY


def _served(node: Node, kit: Kit, pod: str) -> dict[str, str]:
    kit.wait_for(lambda: node.running(pod), what=f"pod {pod} running")
    return node.api.annotations(pod)


def _vnpu(node: Node, vnpu_id: int) -> tuple[int, int, str]:
    return next(v for v in node.vnpus() if v[1] == vnpu_id)


def _kubelet_chips(node: Node, kit: Kit, pod: str, container: str) -> set[str]:
    record = node.kubelet.allocation(node.namespace, pod).container(container)
    return {i.rsplit("-", 1)[0] for i in record.device_ids(kit.RESOURCE)}


def test_hami_style_pod_gets_a_vnpu_created_recorded_and_its_annotations_written(
    running: Node, kit: Kit
) -> None:
    node = running
    node.api.place("train", [[kit.Grant(2, "vir02", 6144)]], lock="owner")
    notes = _served(node, kit, "train")

    env = node.env("train", "c0")
    assert env["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"
    vnpu_id = int(env["ASCEND_VISIBLE_DEVICES"])
    assert _vnpu(node, vnpu_id) == (2, vnpu_id, "vir02")
    assert 132 <= vnpu_id <= 139  # chip 2's ids (phy*16+100 .. +7 on 310P)
    (record,) = node.ledger()
    assert (record["chip"], record["vnpu_id"], record["template"], record["state"]) == (
        2,
        vnpu_id,
        "vir02",
        "owned",
    )
    assert (record["pod"], record["container"]) == ("train", "c0")
    assert record["pod_uid"] == node.api.pod("train")["metadata"]["uid"]

    assert notes[protocol.to_allocate_key(CW)] == ";;"
    assert notes[protocol.BIND_PHASE_KEY] == "success"
    assert (
        notes[protocol.allocated_key(CW)]
        == node.api.decision([[kit.Grant(2, "vir02", 6144)]])[protocol.allocated_key(CW)]
    )
    assert LOCK not in node.api.node_annotations()
    # GetPreferredAllocation steered kubelet to an id on the chip the scheduler chose.
    assert _kubelet_chips(node, kit, "train", "c0") == {node.api.uuid(2)}


def test_volcano_style_bare_lock_and_layout_of_requesting_containers_only(
    running: Node, kit: Kit
) -> None:
    node = running
    # Volcano lists only the containers that ask for the device and writes temp without memory.
    uuid = node.api.uuid(1)
    notes = {
        protocol.to_allocate_key(CW): f"{uuid},{CW},12288,0:;",
        protocol.allocated_key(CW): f"{uuid},{CW},12288,0:;",
        protocol.runtime_key(CW): f'[{{"UUID":"{uuid}","temp":"vir04"}}]',
        protocol.VGPU_NODE_KEY: kit.NODE,
        protocol.BIND_TIME_KEY: "1786000000",
        protocol.BIND_PHASE_KEY: "allocating",
        protocol.PREDICATE_TIME_KEY: "1786000000",
    }
    node.api.create_pod("infer", [("sidecar", 0), ("model", 1)])
    node.api.lock(None)
    node.api.bind("infer", notes)
    notes_after = _served(node, kit, "infer")

    env = node.env("infer", "model")
    vnpu_id = int(env["ASCEND_VISIBLE_DEVICES"])
    assert _vnpu(node, vnpu_id)[0::2] == (1, "vir04")
    assert node.ledger()[0]["container"] == "model"
    assert notes_after[protocol.BIND_PHASE_KEY] == "success"
    assert LOCK not in node.api.node_annotations()  # the owner-less lock is released too


def test_no_lock_at_all_is_served_by_count_and_chips(running: Node, kit: Kit) -> None:
    node = running
    node.api.place("solo", [[kit.Grant(3, "vir01", 3072)]], lock="none")
    _served(node, kit, "solo")
    assert _vnpu(node, int(node.env("solo", "c0")["ASCEND_VISIBLE_DEVICES"]))[0::2] == (3, "vir01")


def _while_kubelet_admits(node: Node, first: Any, then: Any) -> None:
    """``first`` binds a pod; once kubelet's call for it reaches the plugin, the call is held
    there while ``then`` binds more pods, so every one of them is waiting on the node at once
    (as in a real node, kubelet admits the first pod, and queues the others, in that order)."""
    allocations = node.plugin.allocations
    real = allocations.lock
    arrived, go = threading.Event(), threading.Event()

    class Gate:
        def __enter__(self) -> None:
            arrived.set()
            go.wait(10)
            real.acquire()

        def __exit__(self, *_: object) -> None:
            real.release()

    allocations.lock = Gate()
    try:
        first()
        assert arrived.wait(10), "kubelet never called the plugin"
        then()
    finally:
        go.set()


def test_two_pods_pending_on_one_node_each_get_their_own_template_and_chip(
    running: Node, kit: Kit
) -> None:
    node = running

    _while_kubelet_admits(
        node,
        lambda: node.api.place("first", [[kit.Grant(1, "vir04", 12288)]], lock="none"),
        lambda: node.api.place("second", [[kit.Grant(2, "vir01", 3072)]], lock="none"),
    )
    _served(node, kit, "first")
    _served(node, kit, "second")

    first = _vnpu(node, int(node.env("first", "c0")["ASCEND_VISIBLE_DEVICES"]))
    second = _vnpu(node, int(node.env("second", "c0")["ASCEND_VISIBLE_DEVICES"]))
    assert (first[0], first[2]) == (1, "vir04")
    assert (second[0], second[2]) == (2, "vir01")
    assert _kubelet_chips(node, kit, "first", "c0") == {node.api.uuid(1)}
    assert _kubelet_chips(node, kit, "second", "c0") == {node.api.uuid(2)}
    owners = {(r["pod"], r["chip"], r["template"]) for r in node.ledger()}
    assert owners == {("first", 1, "vir04"), ("second", 2, "vir01")}


def test_two_waiting_pods_with_the_same_count_are_served_in_binding_order_on_their_chips(
    running: Node, kit: Kit
) -> None:
    node = running

    _while_kubelet_admits(
        node,
        lambda: node.api.place("z-older", [[kit.Grant(0, "vir02", 6144)]], lock="bare"),
        lambda: node.api.place("a-younger", [[kit.Grant(3, "vir04", 12288)]], lock="none"),
    )
    _served(node, kit, "z-older")
    _served(node, kit, "a-younger")
    older = _vnpu(node, int(node.env("z-older", "c0")["ASCEND_VISIBLE_DEVICES"]))
    younger = _vnpu(node, int(node.env("a-younger", "c0")["ASCEND_VISIBLE_DEVICES"]))
    assert (older[0], older[2]) == (0, "vir02")
    assert (younger[0], younger[2]) == (3, "vir04")


def test_a_waiting_pod_is_not_handed_the_lock_owners_decision(running: Node, kit: Kit) -> None:
    """HAMi #3096: the lock names a pod that is not the one kubelet is admitting."""
    node = running

    _while_kubelet_admits(
        node,
        lambda: node.api.place("admitted", [[kit.Grant(0, "vir01", 3072)]], lock="none"),
        lambda: node.api.place(
            "owner", [[kit.Grant(2, None, 21527), kit.Grant(3, None, 21527)]], lock="owner"
        ),
    )
    _served(node, kit, "admitted")
    assert _vnpu(node, int(node.env("admitted", "c0")["ASCEND_VISIBLE_DEVICES"]))[0::2] == (
        0,
        "vir01",
    )
    _served(node, kit, "owner")
    assert node.env("owner", "c0") == {"ASCEND_VISIBLE_DEVICES": "2,3"}
    assert LOCK not in node.api.node_annotations()


def test_multi_container_pod_in_hami_layout_keeps_the_lock_until_the_last_container(
    running: Node, kit: Kit
) -> None:
    node = running
    # HAMi's layout: init containers first, then every container, empty entries kept.
    grants = [
        [kit.Grant(0, "vir01", 3072)],  # init "prepare"
        [],  # "log" asks for no NPU
        [kit.Grant(1, "vir02", 6144)],  # "worker"
        [kit.Grant(2, None, 21527), kit.Grant(3, None, 21527)],  # "trainer": two whole chips
    ]
    node.api.place(
        "mixed",
        grants,
        init=[("prepare", 1)],
        containers=[("log", 0), ("worker", 1), ("trainer", 2)],
    )
    notes = _served(node, kit, "mixed")

    prepare = _vnpu(node, int(node.env("mixed", "prepare")["ASCEND_VISIBLE_DEVICES"]))
    worker = _vnpu(node, int(node.env("mixed", "worker")["ASCEND_VISIBLE_DEVICES"]))
    assert (prepare[0], prepare[2]) == (0, "vir01")
    assert (worker[0], worker[2]) == (1, "vir02")
    trainer = node.env("mixed", "trainer")
    assert trainer == {"ASCEND_VISIBLE_DEVICES": "2,3"}
    assert _kubelet_chips(node, kit, "mixed", "trainer") == {node.api.uuid(2), node.api.uuid(3)}
    records = {(r["container"], r["init"]) for r in node.ledger()}
    assert records == {("prepare", True), ("worker", False)}
    assert notes[protocol.BIND_PHASE_KEY] == "success"
    assert notes[protocol.to_allocate_key(CW)].strip(";") == ""
    assert LOCK not in node.api.node_annotations()


def test_whole_chips_create_no_vnpu(running: Node, kit: Kit) -> None:
    node = running
    node.api.place("whole", [[kit.Grant(0, None, 21527), kit.Grant(1, None, 21527)]])
    _served(node, kit, "whole")
    assert node.env("whole", "c0") == {"ASCEND_VISIBLE_DEVICES": "0,1"}
    assert node.vnpus() == []
    assert node.ledger() == []


def test_every_310p_template_is_created_with_the_named_template(running: Node, kit: Kit) -> None:
    node = running
    for number, (template, memory) in enumerate(
        [
            ("vir01", 3072),
            ("vir02", 6144),
            ("vir02_1c", 6144),
            ("vir04", 12288),
            ("vir04_3c", 12288),
        ]
    ):
        name = f"t{number}"
        node.api.place(name, [[kit.Grant(number % 4, template, memory)]])
        _served(node, kit, name)
        vnpu = _vnpu(node, int(node.env(name, "c0")["ASCEND_VISIBLE_DEVICES"]))
        assert (vnpu[0], vnpu[2]) == (number % 4, template)


def test_template_without_temp_is_rounded_like_hami(running: Node, kit: Kit) -> None:
    node = running
    uuid = node.api.uuid(0)
    notes = node.api.decision([[kit.Grant(0, None, 5000)]])
    notes[protocol.runtime_key(CW)] = f'[{{"UUID":"{uuid}"}}]'
    node.api.create_pod("rounded", [("c0", 1)])
    node.api.lock((node.namespace, "rounded"))
    node.api.bind("rounded", notes)
    _served(node, kit, "rounded")
    vnpu = _vnpu(node, int(node.env("rounded", "c0")["ASCEND_VISIBLE_DEVICES"]))
    assert vnpu[2] == "vir02"  # 5000 MiB rounds up to vir02 (6144)


def test_runtime_mode_hands_hami_contract_and_creates_nothing(node: Node, kit: Kit) -> None:
    node.start_plugin(vnpu_mode="runtime")
    kit.wait_for(lambda: node.capacity() == (28, 28), what="registration")
    node.api.place("rt", [[kit.Grant(3, "vir04", 12288)]])
    _served(node, kit, "rt")
    assert node.env("rt", "c0") == {"ASCEND_VISIBLE_DEVICES": "3", "ASCEND_VNPU_SPECS": "vir04"}
    assert node.vnpus() == []
    assert node.ledger() == []


def test_init_and_app_container_with_the_same_template_share_one_vnpu(
    running: Node, kit: Kit
) -> None:
    node = running
    grants = [[kit.Grant(1, "vir02", 6144)], [kit.Grant(1, "vir02", 6144)]]
    node.api.place("share", grants, init=[("init", 1)], containers=[("app", 1)])
    _served(node, kit, "share")
    init_id = node.env("share", "init")["ASCEND_VISIBLE_DEVICES"]
    app_id = node.env("share", "app")["ASCEND_VISIBLE_DEVICES"]
    assert init_id == app_id
    assert len(node.vnpus()) == 1
    assert {(r["container"], r["vnpu_id"]) for r in node.ledger()} == {
        ("init", int(init_id)),
        ("app", int(app_id)),
    }


def test_init_and_app_container_with_different_templates_get_two_vnpus(
    running: Node, kit: Kit
) -> None:
    node = running
    grants = [[kit.Grant(1, "vir01", 3072)], [kit.Grant(1, "vir04", 12288)]]
    node.api.place("two", grants, init=[("init", 1)], containers=[("app", 1)])
    _served(node, kit, "two")
    templates = sorted(v[2] for v in node.vnpus())
    assert templates == ["vir01", "vir04"]


def test_soft_mode_pod_gets_hami_vnpu_core_environment_and_mounts(node: Node, kit: Kit) -> None:
    node.start_plugin(hami_vnpu_core=True)
    kit.wait_for(node.serving, what="registration and the inventory published")
    published = node.api.node_annotations()
    assert published[protocol.SOFT_MODE_NODE_KEY] == "true"
    assert '"devcore":100' in published[protocol.node_register_key(CW)]

    node.api.place("soft", [[kit.Grant(2, None, 4096, 30)]], soft=True)
    _served(node, kit, "soft")
    uid = node.api.pod("soft")["metadata"]["uid"]
    env = node.env("soft", "c0")
    assert env == {
        "ASCEND_VISIBLE_DEVICES": "2",
        "NPU_MEM_QUOTA": "4096",
        "NPU_PRIORITY": "30",
        "NPU_GLOBAL_SHM_PATH": "/hami-shared-region/2_global_registry",
        "NPU_LOCAL_SHM_PATH": "/hami-vnpu-shmem/vnpu_local_shmem",
    }
    (resource,) = node.kubelet.allocation(node.namespace, "soft").container("c0").resources
    mounts = {m.container_path: (m.host_path, m.read_only) for m in resource.mounts}
    core = node.root / "hami-core"
    assert mounts["/hami-vnpu-core"] == (str(core), True)
    assert mounts["/etc/ld.so.preload"] == (str(core / "ld.so.preload"), True)
    assert mounts["/hami-shared-region"] == (str(node.root / "hami-shared"), False)
    assert mounts["/hami-vnpu-shmem"] == (str(core / "containers" / f"{uid}_c0"), False)
    assert mounts["/usr/local/bin/npu-smi"] == ("/usr/local/bin/npu-smi", True)
    assert (core / "containers" / f"{uid}_c0").is_dir()
    assert node.vnpus() == []


def test_hard_mode_pod_on_a_soft_node_still_gets_its_vnpu(node: Node, kit: Kit) -> None:
    node.start_plugin(hami_vnpu_core=True)
    kit.wait_for(lambda: node.capacity() == (28, 28), what="registration")
    node.api.place("hard", [[kit.Grant(0, "vir02", 6144)]])
    _served(node, kit, "hard")
    assert node.env("hard", "c0")["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"


def test_two_vnpus_of_one_template_on_one_chip_in_one_container_are_two_vnpus(
    running: Node, kit: Kit
) -> None:
    node = running
    grants = [[kit.Grant(1, "vir01", 3072), kit.Grant(1, "vir01", 3072)]]
    node.api.place("pair", grants, containers=[("c0", 2)])
    _served(node, kit, "pair")
    ids = node.env("pair", "c0")["ASCEND_VISIBLE_DEVICES"].split(",")
    assert len(set(ids)) == 2
    assert sorted(v[1] for v in node.vnpus()) == sorted(int(i) for i in ids)


def test_910b3_templates_are_created_until_a_budget_runs_short(
    root: Any, kube_namespace: Any, kit: Kit
) -> None:
    """vir05_1c_16g + vir10_3c_32g fit a 910B3 chip (48 of 64 GiB); one more vir10 does not."""
    word = "Ascend910B3"
    kit.write_node(root / "sim", chip="910B3", chips=8)
    api = kit.Cluster(kube_namespace.kubeconfig, kube_namespace.name, root / "sim")
    api.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {"name": kit.NODE}})
    options = settings.Settings(
        node_name=kit.NODE,
        backend="sim",
        sim_dir=root / "sim",
        device_plugin_dir=root / "dp",
        kubeconfig=kube_namespace.kubeconfig,
        state_dir=root / "state",
        metrics_host="127.0.0.1",
        metrics_port=0,
        allocate_wait=0.5,
    )
    b3 = plugin.Plugin(options)
    b3.start()
    channel = grpc.insecure_channel(f"unix://{root / 'dp' / 'vnpu-Ascend910B3.sock'}")
    stub = api_pb2_grpc.DevicePluginStub(channel)
    uuid = api.uuid(5)
    try:
        answers = []
        for name, template, memory in [
            ("small", "vir05_1c_16g", 16384),
            ("large", "vir10_3c_32g", 32768),
            ("too-many", "vir10_3c_32g", 32768),
        ]:
            api.create_pod(name, [("c0", 1)], resource=f"huawei.com/{word}")
            api.lock((kube_namespace.name, name))
            api.bind(name, api.decision([[kit.Grant(5, template, memory)]], word=word))
            request = api_pb2.AllocateRequest(
                container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[f"{uuid}-0"])]
            )
            try:
                answers.append(stub.Allocate(request, timeout=10).container_responses[0].envs)
            except grpc.RpcError as exc:
                answers.append(exc)
    finally:
        channel.close()
        b3.stop()
        api.close()
    sim = sim_backend.SimBackend(root / "sim")
    assert sorted(v.template for v in sim.vnpus(5)) == ["vir05_1c_16g", "vir10_3c_32g"]
    assert answers[0]["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"
    assert answers[1]["ASCEND_RUNTIME_OPTIONS"] == "VIRTUAL"
    refused = answers[2]
    assert isinstance(refused, grpc.RpcError)
    assert refused.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "vir10_3c_32g needs 32768 memory, chip has 16384 of 65536 free" in str(refused.details())


def test_the_dcmi_backend_on_the_stand_in_library_serves_a_vnpu(
    node: Node, kit: Kit, tmp_path: Any
) -> None:
    """The real command with ``--backend dcmi``: libdcmi.so here is the tests' stand-in, which
    reads the same simulated node directory (docs/npu-access.md)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed, so the stand-in libdcmi.so cannot be built")
    library = tmp_path / "libdcmi.so"
    source = Path(__file__).parents[2] / "npu" / "tests" / "stand_in_dcmi.c"
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)], check=True)
    process = kit.PluginProcess(node, backend=["--backend", "dcmi", "--dcmi-library", str(library)])
    process.start(env={"VNPU_SIM_DIR": str(node.sim_dir)})
    try:
        kit.wait_for(lambda: node.kubelet.capacity().get(kit.RESOURCE) == (28, 28), timeout=15)
        node.api.place("real-path", [[kit.Grant(2, "vir04", 12288)]])
        kit.wait_for(lambda: node.running("real-path"), what="served through DCMI")
    finally:
        process.stop()
    vnpu_id = int(node.env("real-path", "c0")["ASCEND_VISIBLE_DEVICES"])
    assert _vnpu(node, vnpu_id) == (2, vnpu_id, "vir04")
