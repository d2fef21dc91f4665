"""The kubelet plugin end to end: real unix sockets, the real kube-apiserver, a simulated node.

Each test creates ResourceClaims in its namespace and writes their ``status.allocation`` (devices
of this node's pool) and ``reservedFor`` as the admin, as kube-scheduler would, then calls
NodePrepareResources / NodeUnprepareResources over the plugin's socket with the kubelet-api
stubs, and looks at what the simulated chips, the CDI directory, the claim ledger and (on a
node in soft mode) the hami-vnpu-core directory hold.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from vnpu_core import catalog
from vnpu_dra_driver import cdi, cluster, ledger, plugin, prepare, slices
from vnpu_kubelet_api import constants
from vnpu_kubelet_api.dra.v1 import api_pb2 as dra
from vnpu_kubelet_api.dra.v1 import api_pb2_grpc as dra_grpc
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2 as reg
from vnpu_kubelet_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from vnpu_npu import claimledger
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import control

Json = dict[str, Any]
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"
MODEL = catalog.BUILTIN.by_chip_name("310P3")
assert MODEL is not None


class Node:
    """A simulated 310P3 × 2 node with the driver's kubelet plugin serving under a short dir;
    ``soft``: the node shares its chips as soft slices (hami-vnpu-core under ``root``)."""

    def __init__(self, kube: Any, namespace: str, root: Path, sim: Path, soft: bool) -> None:
        self.kube = kube
        self.namespace = namespace
        self.root = root
        self.kubelet_dir = root / "kubelet"
        self.cdi_dir = root / "cdi"
        self.state_dir = root / "state"
        self.soft = cdi.SoftPaths(root / "hami-core", root / "hami-shared") if soft else None
        self.npu = sim_backend.SimBackend(sim)
        self.api = cluster.KubeSlices.connect(kube.kubeconfig)
        self.server: plugin.Plugin | None = None
        self.preparer: prepare.Preparer | None = None

    def start(self) -> prepare.Reconciled:
        assert MODEL is not None
        book = ledger.Ledger(self.state_dir)
        self.preparer = prepare.Preparer(
            self.kube.node, self.npu, MODEL, self.api, book, self.cdi_dir, soft=self.soft
        )
        outcome = self.preparer.reconcile()
        self.server = plugin.Plugin(self.preparer, self.kubelet_dir).start()
        return outcome

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def close(self) -> None:
        self.stop()
        self.api.close()

    # -- the API, as kube-scheduler and users write it ----------------------------------

    def claim(
        self,
        name: str,
        devices: list[str],
        requests: dict[str, int] | None = None,
        consumed: dict[str, Json] | None = None,
    ) -> str:
        """A claim allocated ``devices`` of this node (request ``npu`` unless ``requests``
        maps request names to counts and devices are ``request:device``); returns its uid.
        A device in ``consumed`` is a share of a soft device: its result carries that
        ``consumedCapacity`` and a ``shareID``."""
        wanted = requests or {"npu": len(devices)}
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": request,
                            "exactly": {"deviceClassName": slices.DRIVER, "count": count},
                        }
                        for request, count in wanted.items()
                    ]
                }
            },
        }
        path = CLAIMS.format(ns=self.namespace)
        made = self.kube.request("POST", path, body)
        results = []
        for entry in devices:
            request, _sep, device = entry.rpartition(":")
            result: Json = {
                "request": request or "npu",
                "driver": slices.DRIVER,
                "pool": self.kube.node,
                "device": device,
            }
            if consumed is not None and device in consumed:
                result["consumedCapacity"] = consumed[device]
                result["shareID"] = str(uuid.uuid4())
            results.append(result)
        made["status"] = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": str(uuid.uuid4())}],
        }
        self.kube.request("PUT", f"{path}/{name}/status", made)
        return str(made["metadata"]["uid"])

    def delete_claim(self, name: str) -> None:
        self.kube.request("DELETE", f"{CLAIMS.format(ns=self.namespace)}/{name}")

    # -- the kubelet's calls -----------------------------------------------------------

    def _stub(self, channel: grpc.Channel) -> dra_grpc.DRAPluginStub:
        return dra_grpc.DRAPluginStub(channel)

    def prepare(self, *claims: tuple[str, str]) -> dra.NodePrepareResourcesResponse:
        with grpc.insecure_channel(f"unix://{plugin.endpoint(self.kubelet_dir)}") as channel:
            return self._stub(channel).NodePrepareResources(
                dra.NodePrepareResourcesRequest(claims=[self._claim(*c) for c in claims]),
                timeout=10,
            )

    def unprepare(self, *claims: tuple[str, str]) -> dra.NodeUnprepareResourcesResponse:
        with grpc.insecure_channel(f"unix://{plugin.endpoint(self.kubelet_dir)}") as channel:
            return self._stub(channel).NodeUnprepareResources(
                dra.NodeUnprepareResourcesRequest(claims=[self._claim(*c) for c in claims]),
                timeout=10,
            )

    def _claim(self, name: str, uid: str) -> dra.Claim:
        return dra.Claim(namespace=self.namespace, name=name, uid=uid)

    # -- what the node holds -------------------------------------------------------------

    def vnpus(self) -> list[tuple[int, int, str]]:
        return [(v.phy_id, v.vnpu_id, v.template) for c in (0, 1) for v in self.npu.vnpus(c)]

    def spec(self, uid: str) -> Json | None:
        found = cdi.path(self.cdi_dir, uid)
        return json.loads(found.read_text()) if found.exists() else None

    def records(self) -> tuple[claimledger.Record, ...]:
        return ledger.read(self.state_dir / claimledger.FILE)

    def soft_dirs(self) -> list[str]:
        """The soft requests' directories under the hami-vnpu-core directory."""
        assert self.soft is not None
        found = self.soft.requests_dir
        return sorted(p.name for p in found.iterdir()) if found.is_dir() else []


def _node(kube: Any, namespace: str, sim: Path, *, soft: bool = False) -> Iterator[Node]:
    root = Path(tempfile.mkdtemp(prefix="vd", dir="/tmp"))  # unix socket paths stay short
    made = Node(kube, namespace, root, sim, soft)
    made.start()
    try:
        yield made
    finally:
        made.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def node(
    kube: Any, kube_namespace: Any, make_sim_node: Callable[..., Path], tmp_path: Path
) -> Iterator[Node]:
    yield from _node(kube, kube_namespace.name, make_sim_node(tmp_path / "sim", "310P3", 2))


@pytest.fixture
def soft_node(
    kube: Any, kube_namespace: Any, make_sim_node: Callable[..., Path], tmp_path: Path
) -> Iterator[Node]:
    """The node in soft mode (``vnpu-dra-driver serve --soft``)."""
    sim = make_sim_node(tmp_path / "sim", "310P3", 2)
    yield from _node(kube, kube_namespace.name, sim, soft=True)


def test_registration_names_the_driver_and_its_endpoint(node: Node) -> None:
    path = plugin.registration(node.kubelet_dir)
    assert path == node.kubelet_dir / "plugins_registry" / "npu.vnpu.io-reg.sock"
    with grpc.insecure_channel(f"unix://{path}") as channel:
        stub = reg_grpc.RegistrationStub(channel)
        info = stub.GetInfo(reg.InfoRequest(), timeout=5)
        stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=5)
    assert info.type == constants.DRA_PLUGIN_TYPE
    assert info.name == "npu.vnpu.io"
    assert info.endpoint == str(node.kubelet_dir / "plugins" / "npu.vnpu.io" / "dra.sock")
    assert list(info.supported_versions) == ["v1.DRAPlugin"]
    assert node.server is not None
    assert [s.plugin_registered for s in node.server.registrar.statuses] == [True]


def test_a_registration_calls_back_and_a_refusal_does_not(tmp_path: Path) -> None:
    """The node agent republishes its slices when the kubelet registers it (a kubelet wipes
    the node's slices when it starts): the registrar says so through ``on_registered``."""
    calls: list[str] = []
    registrar = plugin.RegistrationService(
        "npu.vnpu.io", tmp_path / "dra.sock", lambda: calls.append("x")
    )
    registrar.NotifyRegistrationStatus(
        reg.RegistrationStatus(plugin_registered=False, error="no"),
        None,  # type: ignore[arg-type]
    )
    assert calls == []
    registrar.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), None)  # type: ignore[arg-type]
    assert calls == ["x"]


def test_prepare_creates_the_vnpu_writes_the_cdi_spec_and_unprepare_undoes_it(
    node: Node,
) -> None:
    uid = node.claim("small", ["chip-1-vir02-1"])
    answer = node.prepare(("small", uid)).claims[uid]
    assert answer.error == ""
    ((chip, vnpu_id, template),) = node.vnpus()
    assert (chip, template) == (1, "vir02")
    (device,) = answer.devices
    assert list(device.request_names) == ["npu"]
    assert (device.pool_name, device.device_name) == (node.kube.node, "chip-1-vir02-1")
    assert list(device.cdi_device_ids) == [f"npu.vnpu.io/claim={uid}-chip-1-vir02-1"]
    assert not device.HasField("share_id")
    assert node.spec(uid) == {
        "cdiVersion": "0.6.0",
        "kind": "npu.vnpu.io/claim",
        "annotations": {
            "npu.vnpu.io/claim": f"{node.namespace}/small",
            "npu.vnpu.io/claim-uid": uid,
        },
        "devices": [
            {
                "name": f"{uid}-chip-1-vir02-1",
                "containerEdits": {
                    "env": [f"ASCEND_VISIBLE_DEVICES={vnpu_id}", "ASCEND_RUNTIME_OPTIONS=VIRTUAL"],
                    "deviceNodes": [{"path": f"/dev/vdavinci{vnpu_id}"}],
                },
            }
        ],
        "containerEdits": {
            "deviceNodes": [
                {"path": "/dev/davinci_manager"},
                {"path": "/dev/devmm_svm"},
                {"path": "/dev/hisi_hdc"},
            ]
        },
    }
    (record,) = node.records()
    assert (record.claim_uid, record.namespace, record.claim, record.device) == (
        uid,
        node.namespace,
        "small",
        "chip-1-vir02-1",
    )
    assert (record.chip, record.vnpu_id, record.template, record.state) == (
        1,
        vnpu_id,
        "vir02",
        claimledger.State.OWNED,
    )

    again = node.prepare(("small", uid)).claims[uid]  # the kubelet asks again: same answer
    assert again == answer
    assert node.vnpus() == [(1, vnpu_id, "vir02")]

    assert node.unprepare(("small", uid)).claims[uid].error == ""
    assert node.vnpus() == []
    assert node.spec(uid) is None
    assert node.records() == ()
    assert node.unprepare(("small", uid)).claims[uid].error == ""  # already unprepared


def test_whole_chips_and_vnpus_of_one_claim_by_request(node: Node) -> None:
    uid = node.claim(
        "mixed",
        ["whole:chip-0-whole", "whole:chip-1-whole", "small:chip-1-vir01-0"],
        requests={"whole": 2, "small": 1},
    )
    answer = node.prepare(("mixed", uid)).claims[uid]
    assert answer.error == ""
    assert [(list(d.request_names), d.device_name) for d in answer.devices] == [
        (["whole"], "chip-0-whole"),
        (["whole"], "chip-1-whole"),
        (["small"], "chip-1-vir01-0"),
    ]
    ((_chip, vnpu_id, _template),) = node.vnpus()
    spec = node.spec(uid)
    assert spec is not None
    edits = {d["name"].removeprefix(f"{uid}-"): d["containerEdits"] for d in spec["devices"]}
    # Each whole chip carries its request's full list: the container sees both.
    assert edits["chip-0-whole"] == {
        "env": ["ASCEND_VISIBLE_DEVICES=0,1"],
        "deviceNodes": [{"path": "/dev/davinci0"}],
    }
    assert edits["chip-1-whole"]["env"] == ["ASCEND_VISIBLE_DEVICES=0,1"]
    assert edits["chip-1-vir01-0"]["env"] == [
        f"ASCEND_VISIBLE_DEVICES={vnpu_id}",
        "ASCEND_RUNTIME_OPTIONS=VIRTUAL",
    ]


@pytest.mark.parametrize(
    ("device", "reason"),
    [
        ("gpu-0", "not a device name of this driver"),
        ("chip-7-whole", "this node has no chip 7"),
        ("chip-0-vir05-1c-16g-0", "has no template 'vir05-1c-16g'"),
        ("chip-0-vir02-9", "chip 0 has 3 placements of vir02, not 9"),
    ],
)
def test_a_device_this_node_cannot_give_fails_the_claim_and_creates_nothing(
    node: Node, device: str, reason: str
) -> None:
    uid = node.claim("bad", ["chip-0-vir01-0", device])
    answer = node.prepare(("bad", uid)).claims[uid]
    assert f"claim {node.namespace}/bad device {device}: " in answer.error
    assert reason in answer.error
    assert list(answer.devices) == []
    assert node.vnpus() == []
    assert node.spec(uid) is None
    assert node.records() == ()


def test_a_claim_whose_uid_the_api_does_not_have_is_refused(node: Node) -> None:
    node.claim("renamed", ["chip-0-whole"])
    other = str(uuid.uuid4())
    answer = node.prepare(("renamed", other), ("missing", "u-1"))
    assert "the kubelet asked for " + other in answer.claims[other].error
    assert "no such ResourceClaim" in answer.claims["u-1"].error
    assert node.spec(other) is None


def test_unpreparing_an_unknown_claim_succeeds(node: Node) -> None:
    answer = node.unprepare(("never-seen", "0000-1111"))
    assert answer.claims["0000-1111"].error == ""


def test_a_vnpu_another_claim_also_owns_is_not_destroyed(node: Node) -> None:
    uid_a = node.claim("a", ["chip-0-vir02-0"])
    assert node.prepare(("a", uid_a)).claims[uid_a].error == ""
    ((_chip, vnpu_id, _template),) = node.vnpus()
    # A record of live claim b naming a's vNPU (as a broken ledger could): a's Unprepare keeps it.
    uid_b = node.claim("b", ["chip-0-vir02-0"])
    node.stop()
    (record,) = node.records()
    book = ledger.Ledger(node.state_dir)
    book.add(claimledger.Record(**{**_fields(record), "claim_uid": uid_b, "claim": "b"}))
    assert node.start().unprepared == ()
    assert node.unprepare(("a", uid_a)).claims[uid_a].error == ""
    assert node.vnpus() == [(0, vnpu_id, "vir02")]
    assert [r.claim for r in node.records()] == ["b"]


def test_a_restart_destroys_the_vnpus_of_claims_deleted_meanwhile_and_drops_uncreated_intents(
    node: Node,
) -> None:
    kept = node.claim("kept", ["chip-0-vir04-0"])
    gone = node.claim("gone", ["chip-1-vir02-0", "chip-1-vir01-2"])
    whole = node.claim("whole", ["chip-0-whole"])
    for name, uid in (("kept", kept), ("gone", gone), ("whole", whole)):
        assert node.prepare((name, uid)).claims[uid].error == ""
    assert len(node.vnpus()) == 3
    node.stop()
    node.delete_claim("gone")
    node.delete_claim("whole")
    # A crash between the ledger write and the create: an intent whose vNPU never existed.
    book = ledger.Ledger(node.state_dir)
    book.add(
        claimledger.Record(
            claim_uid=kept,
            namespace=node.namespace,
            claim="kept",
            request="npu",
            device="chip-0-vir01-5",
            chip=0,
            chip_uuid="x",
            vnpu_id=150,
            template="vir01",
            state=claimledger.State.INTENT,
            created_at=time.time(),
        )
    )
    outcome = node.start()
    assert sorted(outcome.unprepared) == [f"{node.namespace}/gone", f"{node.namespace}/whole"]
    assert outcome.intents_dropped == ((0, 150),)
    assert [(c, t) for c, _i, t in node.vnpus()] == [(0, "vir04")]
    assert node.spec(gone) is None
    assert node.spec(whole) is None
    assert node.spec(kept) is not None
    assert [(r.claim, r.device, r.state) for r in node.records()] == [
        ("kept", "chip-0-vir04-0", claimledger.State.OWNED)
    ]
    # The kept claim is still prepared: asking again creates nothing new.
    assert node.prepare(("kept", kept)).claims[kept].error == ""
    assert len(node.vnpus()) == 1


def test_a_recorded_vnpu_that_is_gone_is_created_again_under_its_id(node: Node) -> None:
    uid = node.claim("reboot", ["chip-1-vir04-0"])
    first = node.prepare(("reboot", uid)).claims[uid]
    ((chip, vnpu_id, _template),) = node.vnpus()
    node.npu.destroy_vnpu(chip, vnpu_id)  # as a node reboot would
    assert node.prepare(("reboot", uid)).claims[uid] == first
    assert node.vnpus() == [(1, vnpu_id, "vir04")]


def _fields(record: claimledger.Record) -> Json:
    return {name: getattr(record, name) for name in claimledger.FIELD_TYPES}


# -- soft slices ---------------------------------------------------------------------------

SLICE = {"memory": "2048Mi", "corePercent": "30"}


def _bind(host: Path | str, container: str, mode: str) -> Json:
    return {
        "hostPath": str(host),
        "containerPath": container,
        "type": "bind",
        "options": ["rbind", "rprivate", mode],
    }


def test_a_soft_slice_gets_what_classic_mode_gives_and_unprepare_releases_its_record(
    soft_node: Node,
) -> None:
    """The same environment and mounts as the device plugin's soft-slice Allocate answer
    (hami-vnpu-core's contract), with the request's own directory in the container's place."""
    node = soft_node
    assert node.soft is not None
    uid = node.claim("slice", ["chip-1-soft"], consumed={"chip-1-soft": SLICE})
    answer = node.prepare(("slice", uid)).claims[uid]
    assert answer.error == ""
    (device,) = answer.devices
    assert (device.device_name, list(device.cdi_device_ids)) == (
        "chip-1-soft",
        [f"npu.vnpu.io/claim={uid}-chip-1-soft"],
    )
    claim = node.kube.request("GET", f"{CLAIMS.format(ns=node.namespace)}/slice")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert device.share_id == result["shareID"]
    core, shared = node.soft.core_dir, node.soft.shared_dir
    assert node.spec(uid) == {
        "cdiVersion": "0.6.0",
        "kind": "npu.vnpu.io/claim",
        "annotations": {
            "npu.vnpu.io/claim": f"{node.namespace}/slice",
            "npu.vnpu.io/claim-uid": uid,
        },
        "devices": [
            {
                "name": f"{uid}-chip-1-soft",
                "containerEdits": {
                    "env": [
                        "ASCEND_VISIBLE_DEVICES=1",
                        "NPU_MEM_QUOTA=2048",
                        "NPU_PRIORITY=30",
                        "NPU_GLOBAL_SHM_PATH=/hami-shared-region/1_global_registry",
                        "NPU_LOCAL_SHM_PATH=/hami-vnpu-shmem/vnpu_local_shmem",
                    ],
                    "deviceNodes": [{"path": "/dev/davinci1"}],
                    "mounts": [
                        _bind("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi", "ro"),
                        _bind("/etc/ascend_install.info", "/etc/ascend_install.info", "ro"),
                        _bind(
                            "/usr/local/Ascend/driver/lib64/driver",
                            "/usr/local/Ascend/driver/lib64/driver",
                            "ro",
                        ),
                        _bind(
                            "/usr/local/Ascend/driver/version.info",
                            "/usr/local/Ascend/driver/version.info",
                            "ro",
                        ),
                        _bind(core, "/hami-vnpu-core", "ro"),
                        _bind(core / "ld.so.preload", "/etc/ld.so.preload", "ro"),
                        _bind(shared, "/hami-shared-region", "rw"),
                        _bind(core / "containers" / f"{uid}_npu", "/hami-vnpu-shmem", "rw"),
                    ],
                },
            }
        ],
        "containerEdits": {
            "deviceNodes": [
                {"path": "/dev/davinci_manager"},
                {"path": "/dev/devmm_svm"},
                {"path": "/dev/hisi_hdc"},
            ]
        },
    }
    assert node.soft_dirs() == [f"{uid}_npu"]
    (record,) = node.records()
    assert record == claimledger.soft_slice(
        claim_uid=uid,
        namespace=node.namespace,
        claim="slice",
        request="npu",
        device="chip-1-soft",
        chip=1,
        chip_uuid=node.npu.chips()[1].uuid,
        memory_mib=2048,
        core_percent=30,
        created_at=record.created_at,
    )
    assert node.vnpus() == []  # nothing made on the chip

    assert node.prepare(("slice", uid)).claims[uid] == answer  # again: the same, nothing new
    assert node.records() == (record,)

    assert node.unprepare(("slice", uid)).claims[uid].error == ""
    assert node.records() == ()
    assert node.spec(uid) is None
    assert node.soft_dirs() == []
    assert node.vnpus() == []
    assert node.unprepare(("slice", uid)).claims[uid].error == ""  # already unprepared


def test_one_soft_device_twice_in_a_claim_is_refused(soft_node: Node) -> None:
    """Two shares of one chip in one claim (two requests): one CDI device, one record and one
    ``ASCEND_VISIBLE_DEVICES`` entry cannot tell them apart."""
    node = soft_node
    uid = node.claim(
        "twice",
        ["npu:chip-1-soft", "other:chip-1-soft"],
        requests={"npu": 1, "other": 1},
        consumed={"chip-1-soft": SLICE},
    )
    answer = node.prepare(("twice", uid)).claims[uid]
    assert answer.error == (
        f"claim {node.namespace}/twice device chip-1-soft: allocated twice (requests 'npu' and"
        " 'other'): a claim takes one slice of a chip"
    )
    assert node.records() == ()
    assert node.soft_dirs() == []


def test_soft_slices_of_one_request_share_its_list_and_its_first_quota(soft_node: Node) -> None:
    """Two chips in one request (HAMi's first-device quota and registry), and a share that
    names no capacity: the soft device's requestPolicy defaults, all the memory and no core."""
    node = soft_node
    uid = node.claim(
        "pair",
        ["chip-0-soft", "chip-1-soft"],
        consumed={"chip-0-soft": {"memory": "4Gi", "corePercent": "50"}, "chip-1-soft": {}},
    )
    assert node.prepare(("pair", uid)).claims[uid].error == ""
    spec = node.spec(uid)
    assert spec is not None
    for entry in spec["devices"]:
        assert entry["containerEdits"]["env"] == [
            "ASCEND_VISIBLE_DEVICES=0,1",
            "NPU_MEM_QUOTA=4096",
            "NPU_PRIORITY=50",
            "NPU_GLOBAL_SHM_PATH=/hami-shared-region/0_global_registry",
            "NPU_LOCAL_SHM_PATH=/hami-vnpu-shmem/vnpu_local_shmem",
        ]
    assert [(r.device, r.memory_mib, r.core_percent) for r in node.records()] == [
        ("chip-0-soft", 4096, 50),
        ("chip-1-soft", 21527, 0),
    ]


@pytest.mark.parametrize(
    ("consumed", "problem"),
    [
        ({"memory": "21528Mi"}, "consumedCapacity memory 21528Mi: not within 1Mi..21527Mi"),
        ({"memory": "0"}, "consumedCapacity memory 0: not within 1Mi..21527Mi"),
        ({"memory": "1536Ki"}, "consumedCapacity memory 1536Ki: not a whole number of MiB"),
        ({"corePercent": "101"}, "consumedCapacity corePercent 101: not a whole percentage"),
        ({"corePercent": "2500m"}, "consumedCapacity corePercent 2500m: not a whole percentage"),
    ],
)
def test_a_soft_slice_its_chip_cannot_give_fails_the_claim_and_makes_nothing(
    soft_node: Node, consumed: Json, problem: str
) -> None:
    node = soft_node
    uid = node.claim(
        "bad",
        ["chip-0-soft", "chip-1-soft"],
        consumed={"chip-0-soft": SLICE, "chip-1-soft": {**SLICE, **consumed}},
    )
    answer = node.prepare(("bad", uid)).claims[uid]
    assert answer.error.startswith(f"claim {node.namespace}/bad device chip-1-soft: {problem}")
    assert list(answer.devices) == []
    assert node.records() == ()
    assert node.spec(uid) is None
    assert node.soft_dirs() == []


def test_a_soft_device_of_a_chip_not_in_soft_mode_is_refused(node: Node) -> None:
    uid = node.claim(
        "soft",
        ["small:chip-0-vir01-0", "slice:chip-1-soft"],
        requests={"small": 1, "slice": 1},
        consumed={"chip-1-soft": SLICE},
    )
    answer = node.prepare(("soft", uid)).claims[uid]
    assert answer.error == (  # the API keeps 2048Mi as 2Gi
        f"claim {node.namespace}/soft device chip-1-soft: a soft slice (memory 2Gi,"
        " corePercent 30) of chip 1, which is not in soft mode: this node shares its chips"
        " whole and as vNPUs"
    )
    assert node.vnpus() == []
    assert node.records() == ()
    assert node.spec(uid) is None


@pytest.mark.parametrize(
    ("device", "what"), [("chip-0-whole", "a whole chip"), ("chip-0-vir02-0", "a vir02 vNPU")]
)
def test_a_whole_chip_or_vnpu_of_a_soft_node_is_refused(
    soft_node: Node, device: str, what: str
) -> None:
    node = soft_node
    uid = node.claim("hard", [device])
    answer = node.prepare(("hard", uid)).claims[uid]
    assert answer.error == (
        f"claim {node.namespace}/hard device {device}: {what} of chip 0, which is in soft mode:"
        " this node shares its chips as soft slices only"
    )
    assert node.vnpus() == []
    assert node.records() == ()


def test_a_restart_releases_the_soft_slices_of_claims_deleted_meanwhile(soft_node: Node) -> None:
    node = soft_node
    kept = node.claim("kept", ["chip-0-soft"], consumed={"chip-0-soft": SLICE})
    gone = node.claim("gone", ["chip-0-soft"], consumed={"chip-0-soft": SLICE})
    for name, uid in (("kept", kept), ("gone", gone)):
        assert node.prepare((name, uid)).claims[uid].error == ""
    assert node.soft_dirs() == sorted([f"{kept}_npu", f"{gone}_npu"])
    node.stop()
    node.delete_claim("gone")
    outcome = node.start()
    assert outcome.unprepared == (f"{node.namespace}/gone",)
    assert [r.claim_uid for r in node.records()] == [kept]
    assert node.soft_dirs() == [f"{kept}_npu"]
    assert node.spec(gone) is None
    assert node.spec(kept) is not None
    before = node.records()
    assert node.prepare(("kept", kept)).claims[kept].error == ""  # still prepared: reused
    assert node.records() == before


def test_a_claim_for_a_chip_that_has_gone_fails_naming_it_and_makes_nothing(node: Node) -> None:
    """The chip was there when the slices were published; it left before the pod started."""
    control.inject_fault(node.npu.sim_dir, 1, gone=True)
    uid = node.claim("late", ["chip-1-vir01-0"])
    answer = node.prepare(("late", uid)).claims[uid]
    assert answer.error.startswith(
        f"claim {node.namespace}/late device chip-1-vir01-0: cannot read the vNPUs of chip 1: "
    )
    assert "-8012" in answer.error
    assert list(answer.devices) == []
    assert list(node.npu.vnpus(0)) == []  # chip 1 answers nothing now
    assert node.records() == ()
    assert node.spec(uid) is None


def test_a_cdi_directory_that_cannot_be_written_fails_the_claim_and_a_retry_heals_it(
    node: Node,
) -> None:
    """The vNPU made before the spec could not be written is kept for the kubelet's retry
    (owned by the claim in the ledger, so nothing leaks), and used again once it can."""
    shutil.rmtree(node.cdi_dir, ignore_errors=True)
    node.cdi_dir.write_text("not a directory\n", encoding="utf-8")
    uid = node.claim("spec", ["chip-0-vir02-0"])
    answer = node.prepare(("spec", uid)).claims[uid]
    assert answer.error.startswith(f"claim {node.namespace}/spec: cannot write its CDI spec: ")
    (made,) = node.vnpus()
    assert [(r.claim_uid, r.vnpu_id) for r in node.records()] == [(uid, made[1])]
    node.cdi_dir.unlink()
    node.cdi_dir.mkdir()
    again = node.prepare(("spec", uid)).claims[uid]
    assert again.error == ""
    assert node.vnpus() == [made]
    assert node.spec(uid) is not None
    assert node.unprepare(("spec", uid)).claims[uid].error == ""
    assert node.vnpus() == []
    assert node.records() == ()
