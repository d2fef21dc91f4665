"""The sources over real transports: kube-apiserver over HTTPS (the session's, a namespace per
test), PodResources over a unix socket, and the device plugin's ledger file."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import kubernetes
import pytest
import yaml
from structlog import testing

from vnpu_core import draclasses
from vnpu_exporter import (
    claims,
    errors,
    kubelet,
    metrics,
    ownership,
    podresources,
    pods,
    sampler,
)
from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
from vnpu_npu import claimledger
from vnpu_npu import ledger as npu_ledger
from vnpu_service import kubeapi

MIB = 1024 * 1024


@pytest.fixture
def api(kube_namespace: Any) -> Iterator[tuple[Any, kubernetes.client.CoreV1Api]]:
    """The test's namespace on kube-apiserver and an admin client for it."""
    client = kubernetes.config.new_client_from_config(config_file=str(kube_namespace.kubeconfig))
    try:
        yield kube_namespace, kubernetes.client.CoreV1Api(client)
    finally:
        client.close()


def _pod(name: str, node: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app"}]},
    }


def test_kube_pods_lists_the_pods_bound_to_the_node(api: Any) -> None:
    space, core = api
    other = space.plane.namespace(f"{space.name}-ml")  # a second namespace, cleared below
    try:
        core.create_namespaced_pod(
            space.name,
            _pod("here", "n1", {"hami.io/Ascend310P-devices-allocated": "U,Ascend310P,3072,0:;"}),
        )
        core.create_namespaced_pod(space.name, _pod("there", "n2"))
        core.create_namespaced_pod(other.name, _pod("also-here", "n1"))
        source = pods.KubePods.connect(space.kubeconfig)
        try:
            found = source.list("n1")
        finally:
            source.close()
    finally:
        other.clear()
    assert sorted((p["metadata"]["namespace"], p["metadata"]["name"]) for p in found) == sorted(
        [(space.name, "here"), (other.name, "also-here")]
    )
    here = next(p for p in found if p["metadata"]["name"] == "here")
    # plain JSON as the API sends it (camelCase), which vnpu_core.ledger reads
    assert here["spec"]["nodeName"] == "n1"
    assert (
        here["metadata"]["annotations"]["hami.io/Ascend310P-devices-allocated"]
        == "U,Ascend310P,3072,0:;"
    )


def test_kube_pods_reports_an_unreachable_api_as_api_error(kube_plane: Any, tmp_path: Path) -> None:
    # The plane's own kubeconfig (CA, client certificate) aimed at the discard port, where
    # nothing listens.
    document = yaml.safe_load(kube_plane.kubeconfig.read_text(encoding="utf-8"))
    for cluster in document["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:9"
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(document), encoding="utf-8")
    source = pods.KubePods.connect(config, timeout=2)
    with pytest.raises(kubeapi.Unavailable) as caught:
        source.list("n1")
    assert caught.value.status == 0
    assert "list pods on node n1" in str(caught.value)
    assert caught.value.retryable


def test_a_bad_kubeconfig_is_a_settings_error(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(errors.SettingsError) as caught:
        pods.KubePods.connect(broken)
    assert caught.value.field == "kubeconfig"
    assert caught.value.value == str(broken)


class _Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    """A kubelet's PodResources answer, or a failure."""

    def __init__(self) -> None:
        self.answer = api_pb2.ListPodResourcesResponse()
        self.fail: grpc.StatusCode | None = None

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        if self.fail is not None:
            context.abort(self.fail, "kubelet says no")
        return self.answer


@pytest.fixture
def fake_kubelet(tmp_path: Path) -> Iterator[tuple[Path, _Kubelet]]:
    socket_path = tmp_path / "pod-resources" / "kubelet.sock"
    socket_path.parent.mkdir()
    servicer = _Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        yield socket_path, servicer
    finally:
        server.stop(None).wait()


def test_pod_resources_keeps_huawei_devices_per_container(fake_kubelet: Any) -> None:
    socket_path, servicer = fake_kubelet
    devices = [
        api_pb2.ContainerDevices(resource_name="huawei.com/Ascend310P", device_ids=["U1-0"]),
        api_pb2.ContainerDevices(resource_name="huawei.com/Ascend310P", device_ids=["U2-3"]),
        api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-1"]),
    ]
    servicer.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="job",
                namespace="ml",
                containers=[
                    api_pb2.ContainerResources(name="main", devices=devices),
                    api_pb2.ContainerResources(name="side"),
                ],
            ),
        ]
    )
    client = kubelet.PodResourcesClient(socket_path, timeout=5)
    try:
        found = client.list()
    finally:
        client.close()
    assert found == (
        podresources.ContainerDevices(
            "ml", "job", "main", "huawei.com/Ascend310P", ("U1-0", "U2-3")
        ),
    )


def test_pod_resources_failures_name_the_socket_and_code(fake_kubelet: Any, tmp_path: Path) -> None:
    socket_path, servicer = fake_kubelet
    servicer.fail = grpc.StatusCode.UNAVAILABLE
    client = kubelet.PodResourcesClient(socket_path, timeout=5)
    with pytest.raises(errors.PodResourcesError) as caught:
        client.list()
    client.close()
    assert caught.value.code == "UNAVAILABLE"
    assert str(socket_path) in str(caught.value)
    missing = kubelet.PodResourcesClient(tmp_path / "nowhere.sock", timeout=1)
    with pytest.raises(errors.PodResourcesError) as caught:
        missing.list()
    missing.close()
    assert caught.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


def _record(**overrides: Any) -> dict[str, Any]:
    record = {
        "pod_uid": "u1", "namespace": "ml", "pod": "job", "container": "main", "init": False,
        "chip": 0, "chip_uuid": "U0", "vnpu_id": 100, "template": "vir02", "state": "owned", "created_at": 1.5,
    }  # fmt: skip
    record.update(overrides)
    return record


def test_ledger_file_reads_the_device_plugins_records(tmp_path: Path) -> None:
    document = {
        "format": ownership.FORMAT,
        "records": [_record(), _record(vnpu_id=101, state="intent"), _record(chip="zero"), "junk"],
    }
    (tmp_path / ownership.FILE).write_text(json.dumps(document))
    ledger = ownership.LedgerFile(tmp_path).read()
    assert ledger.records == (
        ownership.Record("ml", "job", "main", 0, 100, "vir02"),
        ownership.Record("ml", "job", "main", 0, 101, "vir02"),
    )
    assert ledger.skipped == 2


@pytest.mark.parametrize(
    "unusable",
    [
        _record(namespace=""),  # no container can be tied to an empty name
        _record(template=""),
        _record(state="gone"),  # the plugin would refuse these: the same checks
        _record(created_at=None),
        _record(init="no"),
        _record(vnpu_id=True),
    ],
)
def test_a_record_the_plugin_would_refuse_is_skipped_and_counted(
    tmp_path: Path, unusable: dict[str, Any]
) -> None:
    document = {"format": ownership.FORMAT, "records": [unusable, _record()]}
    (tmp_path / ownership.FILE).write_text(json.dumps(document))
    ledger = ownership.LedgerFile(tmp_path).read()
    assert ledger == ownership.Ledger((ownership.Record("ml", "job", "main", 0, 100, "vir02"),), 1)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON"),
        (json.dumps({"format": "other/v9", "records": []}), "format is 'other/v9'"),
        (json.dumps({"format": ownership.FORMAT, "records": {}}), "records is not a list"),
        (json.dumps([1, 2]), "format is 'list'"),
    ],
)
def test_an_unusable_ledger_is_a_ledger_error(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / ownership.FILE).write_text(text)
    with pytest.raises(errors.LedgerError) as caught:
        ownership.LedgerFile(tmp_path).read()
    assert problem in str(caught.value)
    assert caught.value.path == str(tmp_path / ownership.FILE)


def test_a_ledger_not_written_yet_is_an_empty_one(tmp_path: Path) -> None:
    # A fresh node: the plugin has not written its ledger, or not even its directory, yet.
    assert ownership.LedgerFile(tmp_path).read() == ownership.Ledger(())
    assert ownership.LedgerFile(tmp_path / "absent").read() == ownership.Ledger(())


def test_a_ledger_that_exists_but_cannot_be_read_is_a_ledger_error(tmp_path: Path) -> None:
    (tmp_path / ownership.FILE).mkdir()
    with pytest.raises(errors.LedgerError, match="cannot read") as caught:
        ownership.LedgerFile(tmp_path).read()
    assert caught.value.path == str(tmp_path / ownership.FILE)
    (tmp_path / ownership.FILE).rmdir()
    (tmp_path / ownership.FILE).write_bytes(b"\xff{}")
    with pytest.raises(errors.LedgerError, match="not UTF-8 text"):
        ownership.LedgerFile(tmp_path).read()


def test_a_missing_ledger_is_no_warning_and_a_broken_one_still_is(
    kit: Any, node310: Any, tmp_path: Path
) -> None:
    exp = kit.Exporter(node310, ledger=ownership.LedgerFile(tmp_path))
    with testing.capture_logs() as logged:
        exp.refresh()
    assert [e for e in logged if e["log_level"] in ("warning", "error")] == []
    assert exp.sampler.snapshot().ownership == ()
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 0

    (tmp_path / ownership.FILE).write_text("garbage")
    with testing.capture_logs() as logged:
        exp.refresh()
    (warned,) = [e for e in logged if e["event"] == "read_failed"]
    assert warned["log_level"] == "warning"
    assert warned["group"] == "ownership"
    assert warned["reason"] == "ledger_error"
    assert str(tmp_path / ownership.FILE) in warned["error"]
    assert exp.sampler.snapshot().ownership is None
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 1


def test_every_refresh_reads_the_ledger_as_it_is_now(
    kit: Any, node310: Any, tmp_path: Path
) -> None:
    """No copy of the plugin's ledger outlives a refresh: each change is seen at the next one,
    even one that leaves the file's size and modification time as they were."""
    path = tmp_path / npu_ledger.FILE
    first = npu_ledger.Record(
        "u1", "ml", "job", "main", False, 0, "U0", 100, "vir02", npu_ledger.State.OWNED, 1.5
    )
    npu_ledger.write(path, [first], durable=False)  # as the device plugin writes it
    exp = kit.Exporter(node310, ledger=ownership.LedgerFile(tmp_path)).refresh()
    assert exp.sampler.snapshot().ownership == (
        ownership.Record("ml", "job", "main", 0, 100, "vir02"),
    )
    before = path.stat()
    npu_ledger.write(path, [dataclasses.replace(first, vnpu_id=101)], durable=False)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    exp.refresh()
    assert exp.sampler.snapshot().ownership == (
        ownership.Record("ml", "job", "main", 0, 101, "vir02"),
    )
    npu_ledger.write(path, [], durable=False)
    exp.refresh()
    assert exp.sampler.snapshot().ownership == ()


def test_sampler_counts_ledger_problems(kit: Any, node310: Any, tmp_path: Path) -> None:
    (tmp_path / ownership.FILE).write_text(
        json.dumps({"format": ownership.FORMAT, "records": [_record(), {"bad": 1}]})
    )
    exp = kit.Exporter(node310, ledger=ownership.LedgerFile(tmp_path)).refresh()
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 1
    (tmp_path / ownership.FILE).write_text("garbage")
    exp.refresh()
    assert exp.sampler.snapshot().ownership is None
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 2


def test_threads_refresh_in_the_background(kit: Any, node310: Any) -> None:
    exp = kit.Exporter(node310)
    exp.sampler.intervals = dict.fromkeys(exp.sampler.intervals, 0.05)
    done = threading.Event()
    exp.sampler.start()
    try:
        for _ in range(100):
            if (
                exp.value("vnpu_exporter_refresh_duration_seconds_count", group="health") or 0
            ) >= 3:
                done.set()
                break
            threading.Event().wait(0.02)
    finally:
        exp.sampler.stop()
    assert done.is_set()
    assert exp.sampler.stuck() == []


class _NoKubeletYet:
    """The kubelet's PodResources socket before the kubelet has made it."""

    def list(self) -> tuple[Any, ...]:
        raise errors.PodResourcesError(
            "/var/lib/kubelet/pod-resources/kubelet.sock",
            "UNAVAILABLE",
            "No such file or directory",
        )

    def close(self) -> None:
        pass


def test_a_source_not_there_yet_at_start_is_told_at_info_and_counted(
    kit: Any, node310: Any
) -> None:
    """A fresh node: the exporter starts before the kubelet's socket exists. The first minute
    that is no warning; it is still counted, and after the minute it is a warning."""
    exp = kit.Exporter(node310, devices=_NoKubeletYet())
    with testing.capture_logs() as logged:
        exp.refresh()
    assert [e for e in logged if e["log_level"] in ("warning", "error")] == []
    (said,) = [e for e in logged if e["event"] == "read_not_ready"]
    assert said["group"] == "pod_resources"
    assert exp.errors(metrics.Group.POD_RESOURCES, metrics.ErrorReason.RPC) == 1

    exp.clock.now += sampler.STARTUP_GRACE
    with testing.capture_logs() as logged:
        exp.refresh()
    (warned,) = [e for e in logged if e["event"] == "read_failed"]
    assert warned["log_level"] == "warning"
    assert exp.errors(metrics.Group.POD_RESOURCES, metrics.ErrorReason.RPC) == 2


def test_a_source_that_answered_once_is_warned_about_at_once(kit: Any, node310: Any) -> None:
    exp = kit.Exporter(node310)
    exp.refresh()
    exp.sampler.pod_resources = _NoKubeletYet()
    with testing.capture_logs() as logged:
        exp.refresh()
    (warned,) = [e for e in logged if e["event"] == "read_failed"]
    assert warned["group"] == "pod_resources"


# -- DRA mode: PodResources' dynamic_resources and the DRA driver's claim ledger --------------


def _claim_resource(device: str, uid: str, driver: str = draclasses.DRIVER) -> Any:
    """One allocated device as the kubelet lists it, with the CDI id the driver gave it."""
    return api_pb2.ClaimResource(
        cdi_devices=[api_pb2.CDIDevice(name=f"{draclasses.CDI_KIND}={uid}-{device}")],
        driver_name=driver,
        pool_name="npu-node-1",
        device_name=device,
    )


def _claimed(name: str, claim: str, uid: str, *devices: str, containers: Any = ("main",)) -> Any:
    """A pod in namespace ml whose ``containers`` all hold ``devices`` through one claim."""
    dynamic = api_pb2.DynamicResource(
        claim_name=claim,
        claim_namespace="ml",
        claim_resources=[_claim_resource(d, uid) for d in devices],
    )
    return api_pb2.PodResources(
        name=name,
        namespace="ml",
        containers=[
            api_pb2.ContainerResources(name=c, dynamic_resources=[dynamic]) for c in containers
        ],
    )


def _claim_record(**overrides: Any) -> dict[str, Any]:
    """A vNPU's record as the DRA driver writes it (``vnpu_npu.claimledger``)."""
    record = {
        "claim_uid": "uid-a", "namespace": "ml", "claim": "infer-a-npu", "request": "npu",
        "device": "chip-0-vir02-0", "chip": 0, "chip_uuid": "U0", "vnpu_id": 100,
        "template": "vir02", "state": "owned", "created_at": 1.5,
    }  # fmt: skip
    record.update(overrides)
    return record


def _write_claims(directory: Path, *records: Any) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    document = {"format": claims.FORMAT, "records": list(records)}
    (directory / claims.FILE).write_text(json.dumps(document))
    return directory


def test_pod_resources_keeps_npu_vnpu_io_claim_devices_after_the_classic_ones(
    fake_kubelet: Any,
) -> None:
    socket_path, servicer = fake_kubelet
    classic = api_pb2.ContainerDevices(resource_name="huawei.com/Ascend310P", device_ids=["U1-0"])
    gpu = api_pb2.DynamicResource(
        claim_name="gpu",
        claim_namespace="ml",
        claim_resources=[_claim_resource("gpu-0", "uid-g", driver="gpu.example.com")],
    )
    mixed = api_pb2.PodResources(
        name="mixed",
        namespace="ml",
        containers=[
            api_pb2.ContainerResources(name="main", devices=[classic], dynamic_resources=[gpu])
        ],
    )
    servicer.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            mixed,
            _claimed("pair", "pair-npu", "uid-p", "chip-2-vir04-0", containers=("a", "b")),
        ]
    )
    client = kubelet.PodResourcesClient(socket_path, timeout=5)
    try:
        found = client.list()
    finally:
        client.close()
    assert found == (
        podresources.ContainerDevices("ml", "mixed", "main", "huawei.com/Ascend310P", ("U1-0",)),
        *(
            podresources.ClaimDevice(
                "ml",
                "pair",
                container,
                "ml",
                "pair-npu",
                "npu-node-1",
                "chip-2-vir04-0",
                ("npu.vnpu.io/claim=uid-p-chip-2-vir04-0",),
            )
            for container in ("a", "b")
        ),
    )
    claim = found[1]
    assert isinstance(claim, podresources.ClaimDevice)
    assert claim.claim_uid == "uid-p"


def test_claim_ledger_file_reads_the_dra_drivers_records(tmp_path: Path) -> None:
    soft = _claim_record(
        claim_uid="uid-s", claim="slice-npu", device="chip-1-soft", chip=1, vnpu_id=-1,
        template="", kind="soft", memory_mib=2048, core_percent=30,
    )  # fmt: skip
    _write_claims(
        tmp_path,
        _claim_record(),
        _claim_record(device="chip-0-vir02-1", vnpu_id=101, state="intent"),
        soft,
        _claim_record(chip="zero"),  # broken: skipped and counted
        _claim_record(state="gone"),
        _claim_record(claim=""),  # names no claim device
        {**soft, "core_percent": 101},  # a share the driver never gives
        "junk",
    )
    found = claims.ClaimLedgerFile(tmp_path).read()
    vnpu = claimledger.Record(
        "uid-a", "ml", "infer-a-npu", "npu", "chip-0-vir02-0", 0, "U0", 100, "vir02",
        claimledger.State.OWNED, 1.5,
    )  # fmt: skip
    assert found.records == (
        vnpu,
        dataclasses.replace(
            vnpu, device="chip-0-vir02-1", vnpu_id=101, state=claimledger.State.INTENT
        ),
        claimledger.soft_slice(
            claim_uid="uid-s", namespace="ml", claim="slice-npu", request="npu",
            device="chip-1-soft", chip=1, chip_uuid="U0", memory_mib=2048, core_percent=30,
            created_at=1.5,
        ),
    )  # fmt: skip
    assert found.skipped == 5
    assert claims.ClaimLedgerFile(tmp_path / "fresh-node").read() == claims.Ledger(())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "not JSON"),
        (json.dumps({"format": ownership.FORMAT, "records": []}), "format is 'vnpu-device-plugin"),
        (json.dumps({"format": claims.FORMAT, "records": {}}), "records is not a list"),
    ],
)
def test_an_unusable_claim_ledger_is_a_ledger_error(
    tmp_path: Path, text: str, problem: str
) -> None:
    (tmp_path / claims.FILE).write_text(text)
    with pytest.raises(errors.LedgerError) as caught:
        claims.ClaimLedgerFile(tmp_path).read()
    assert problem in str(caught.value)
    assert str(tmp_path / claims.FILE) in str(caught.value)


def test_dra_allocations_name_the_pod_container_template_and_vnpu(
    kit: Any, node310: Any, fake_kubelet: Any, tmp_path: Path
) -> None:
    """Two vir02 on chip 0 (matching alone could not tell them apart), a whole chip 1 and a
    vir04 on chip 2 that one claim shares between two containers: the claim ledger names each
    vNPU, PodResources each pod and container."""
    socket_path, servicer = fake_kubelet
    c = node310.chips()
    first, second = node310.create_vnpu(0, "vir02"), node310.create_vnpu(0, "vir02")
    shared = node310.create_vnpu(2, "vir04")
    servicer.answer = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            _claimed("infer-a", "infer-a-npu", "uid-a", "chip-0-vir02-0"),
            _claimed("infer-b", "infer-b-npu", "uid-b", "chip-0-vir02-1"),
            _claimed("train", "train-npu", "uid-t", "chip-1-whole"),
            _claimed("pair", "pair-npu", "uid-p", "chip-2-vir04-0", containers=("a", "b")),
        ]
    )
    state_dir = _write_claims(
        tmp_path / "dra-driver",
        _claim_record(vnpu_id=second),  # infer-a got the second vNPU made on the chip
        _claim_record(claim_uid="uid-old", vnpu_id=first),  # a claim of the same name, gone
        _claim_record(
            claim_uid="uid-b", claim="infer-b-npu", device="chip-0-vir02-1", vnpu_id=first
        ),
        _claim_record(
            claim_uid="uid-p",
            claim="pair-npu",
            device="chip-2-vir04-0",
            chip=2,
            vnpu_id=shared,
            template="vir04",
        ),
    )
    client = kubelet.PodResourcesClient(socket_path, timeout=5)
    try:
        exp = kit.Exporter(
            node310,
            kit.StaticPods([]),
            client,
            claim_ledger=claims.ClaimLedgerFile(state_dir),
        ).refresh()
    finally:
        client.close()
    held = {
        (s["pod"], s["container"]): (
            s["chip"],
            s["kind"],
            s["template"],
            s["vnpu"],
            s["attribution"],
        )
        for s, _ in exp.samples("vnpu_allocation_info")
    }
    assert held == {
        ("infer-a", "main"): ("0", "vnpu", "vir02", str(second), "ledger"),
        ("infer-b", "main"): ("0", "vnpu", "vir02", str(first), "ledger"),
        ("train", "main"): ("1", "whole", "", "", "none"),
        ("pair", "a"): ("2", "vnpu", "vir04", str(shared), "ledger"),
        ("pair", "b"): ("2", "vnpu", "vir04", str(shared), "ledger"),
    }
    assert {s["namespace"] for s, _ in exp.samples("vnpu_allocation_info")} == {"ml"}
    chip0, chip1, chip2 = (kit.chip_labels(chip) for chip in c[:3])
    assert exp.value("vnpu_chip_allocated_memory_bytes", **chip0) == 2 * 6144 * MIB
    assert exp.value("vnpu_chip_allocated_aicores", **chip0) == 4
    assert exp.value("vnpu_chip_unowned_vnpus", **chip0, template="vir02") == 0
    assert exp.value("vnpu_chip_allocated_memory_bytes", **chip1) == c[1].memory_mib * MIB
    assert exp.value("vnpu_chip_allocated_ratio", **chip1) == 1
    assert exp.value("vnpu_chip_allocations", **chip1, kind="whole") == 1
    # the shared claim is held once on its chip
    assert exp.value("vnpu_chip_allocated_memory_bytes", **chip2) == 12288 * MIB
    assert exp.value("vnpu_chip_allocations", **chip2, kind="vnpu") == 1
    assert exp.value("vnpu_chip_unowned_vnpus", **chip2, template="vir04") == 0
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 0


def test_without_the_claim_ledger_dra_vnpus_are_matched_on_the_chip(
    kit: Any, node310: Any, tmp_path: Path
) -> None:
    """No claims.json yet (the driver not started): neither an error nor a guess."""
    node310.create_vnpu(0, "vir02")
    node310.create_vnpu(0, "vir02")
    alone = node310.create_vnpu(1, "vir04")

    def device(pod: str, name: str) -> podresources.ClaimDevice:
        return podresources.ClaimDevice("ml", pod, "main", "ml", f"{pod}-npu", "npu-node-1", name)

    devices = kit.StaticDevices(
        [
            device("a", "chip-0-vir02-0"),
            device("b", "chip-0-vir02-1"),
            device("c", "chip-1-vir04-0"),
        ]
    )
    exp = kit.Exporter(
        node310,
        kit.StaticPods([]),
        devices,
        claim_ledger=claims.ClaimLedgerFile(tmp_path / "not-yet"),
    ).refresh()
    held = {s["pod"]: (s["vnpu"], s["attribution"]) for s, _ in exp.samples("vnpu_allocation_info")}
    assert held == {"a": ("", "ambiguous"), "b": ("", "ambiguous"), "c": (str(alone), "unique")}
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 0
    assert exp.sampler.snapshot().claims == ()
    assert exp.sampler.snapshot().ownership is None  # no device plugin ledger configured


def test_sampler_counts_claim_ledger_problems(kit: Any, node310: Any, tmp_path: Path) -> None:
    _write_claims(tmp_path, _claim_record(), _claim_record(vnpu_id="x"))
    exp = kit.Exporter(node310, claim_ledger=claims.ClaimLedgerFile(tmp_path)).refresh()
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 1
    assert len(exp.sampler.snapshot().claims or ()) == 1
    (tmp_path / claims.FILE).write_text("{not json")
    exp.refresh()
    assert exp.errors(metrics.Group.OWNERSHIP, metrics.ErrorReason.LEDGER) == 2
    assert exp.sampler.snapshot().claims is None
