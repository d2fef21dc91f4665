"""Small table-driven tests of the plugin's parts that need no sockets: device ids, the node
annotations, the pod plan, the environment contract, the ledger file, the settings and the
PodResources check that tells a pod from one created again with its name."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from vnpu_core import catalog, granted, protocol, topology
from vnpu_device_plugin import (
    cluster,
    crashpoints,
    devices,
    environment,
    errors,
    finder,
    grants,
    holdings,
    ledger,
    metrics,
    names,
    podplan,
    podresources,
    publisher,
    registration,
    settings,
)
from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc
from vnpu_npu import backend

CW = "Ascend310P"
UID = "3f2b8c1e-5d4a-4e6f-9a7b-0c1d2e3f4a5b"


def _chip(phy: int, model: str = "310P3", aicore: int = 8) -> backend.ChipInfo:
    return backend.ChipInfo(
        card_id=phy // 2,
        device_id=phy % 2,
        logic_id=phy,
        phy_id=phy,
        uuid=f"{phy:08X}-00000000-00000000-00000000-0000000{phy}",
        chip_name=model,
        chip_type="Ascend",
        chip_version="V1",
        model=model,
        aicore=aicore,
        memory_mib=24576,
        memory_kind=backend.MemoryKind.DDR,
        bdf=f"0000:0{phy}:00.0",
    )


def _inventory(chips: int = 4, soft: bool = False, model: str = "310P3") -> devices.Inventory:
    aicore = 8 if model == "310P3" else 20
    found = tuple(_chip(i, model, aicore) for i in range(chips))
    return devices.build("n1", found, catalog.BUILTIN, soft=soft)


# -- device ids and inventory --------------------------------------------------------------


def test_device_ids_are_uuid_dash_slot_and_map_back_to_their_chip() -> None:
    inventory = _inventory()
    assert inventory.slots == 7
    ids = inventory.device_ids(inventory.chips[2])
    assert ids[0] == f"{inventory.chips[2].uuid}-0"
    assert len(ids) == 7
    assert all(inventory.chip_of(i) == inventory.chips[2] for i in ids)
    assert all(len(i) <= 63 for i in ids)


@pytest.mark.parametrize(
    "bad",
    ["", "x", "FFFFFFFF-00000000-00000000-00000000-00000000-0", "{u}-7", "{u}-+1", "{u}-1 ", "{u}"],
)
def test_unknown_device_ids_raise_unknown_device(bad: str) -> None:
    inventory = _inventory()
    device = bad.format(u=inventory.chips[0].uuid)
    with pytest.raises(errors.UnknownDevice) as caught:
        inventory.chip_of(device)
    assert caught.value.device_id == device
    assert caught.value.code == "INVALID_ARGUMENT"


def test_device_list_marks_every_id_of_an_unhealthy_chip() -> None:
    inventory = _inventory(2)
    listed = devices.device_list(inventory, {0: True, 1: False})
    health = {d.ID: d.health for d in listed.devices}
    assert {h for i, h in health.items() if i.startswith(inventory.chips[0].uuid)} == {"Healthy"}
    assert {h for i, h in health.items() if i.startswith(inventory.chips[1].uuid)} == {"Unhealthy"}
    assert len(listed.devices) == 14


def test_inventory_refuses_unknown_and_mixed_models() -> None:
    with pytest.raises(errors.SettingsError, match="matches no chip model"):
        devices.build("n", (_chip(0, "999X"),), catalog.BUILTIN, soft=False)
    with pytest.raises(errors.SettingsError, match="several models"):
        devices.build("n", (_chip(0), _chip(1, "910B3", 20)), catalog.BUILTIN, soft=False)
    with pytest.raises(errors.SettingsError, match="no chip"):
        devices.build("n", (), catalog.BUILTIN, soft=False)


def test_server_kind_defaults_to_the_models_usual_server() -> None:
    assert _inventory(8, model="910B3").server is topology.ServerKind.MESH_910B_8
    assert _inventory(4).server is topology.ServerKind.DUO_300I
    assert _inventory(3).server is topology.ServerKind.PCIE


# -- node annotations ------------------------------------------------------------------------


def test_node_register_is_hamis_json_byte_for_byte() -> None:
    inventory = _inventory(8, model="910B3")
    values = publisher.node_annotations(
        inventory, {i: i != 5 for i in range(8)}, datetime(2026, 8, 18, 9, 55, 36)
    )
    register = values["hami.io/node-register-Ascend910B3"]
    elements = json.loads(register)
    assert register.startswith(
        '[{"id":"00000000-00000000-00000000-00000000-00000000","count":4,"devmem":65536,'
        '"devcore":20,"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":0}},'
    )
    assert (
        '"index":5,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","custominfo":{"NetworkID":1}}'
        in register
    )
    assert [e.get("custominfo", {}).get("NetworkID") for e in elements] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert values["hami.io/node-handshake-Ascend910B3"] == "Reported_2026.08.18 09:55:36"
    assert values["hami-vnpu-core"] == "false"
    assert values["vnpu.io/server"] == "910b-8"


def test_soft_mode_registers_100_cores_and_310p_has_no_network_id() -> None:
    values = publisher.node_annotations(_inventory(soft=True), {0: True}, datetime(2026, 1, 1))
    chips = protocol.decode_node_register("k", values[protocol.node_register_key(CW)])
    assert {c.devcore for c in chips} == {100}
    assert {c.network_id for c in chips} == {None}
    assert [c.health for c in chips] == [True, False, False, False]  # unknown health: unhealthy
    assert values["hami-vnpu-core"] == "true"


# -- pod plan ------------------------------------------------------------------------------


def _pod(
    notes: dict[str, str],
    init: Sequence[tuple[str, int]] = (),
    containers: Sequence[tuple[str, int]] = (("c0", 1),),
) -> dict[str, Any]:
    def spec(name: str, count: int) -> dict[str, Any]:
        limits = {"huawei.com/Ascend310P": str(count)} if count else {}
        return {"name": name, "resources": {"limits": limits}}

    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": UID,
            "resourceVersion": "9",
            "annotations": notes,
        },
        "spec": {
            "initContainers": [spec(n, c) for n, c in init],
            "containers": [spec(n, c) for n, c in containers],
        },
    }


def _notes(value: str, runtime: str | None = None, allocated: str | None = None) -> dict[str, str]:
    notes = {protocol.to_allocate_key(CW): value, protocol.allocated_key(CW): allocated or value}
    if runtime is not None:
        notes[protocol.runtime_key(CW)] = runtime
    return notes


def test_plan_names_containers_in_hamis_layout_after_erasure() -> None:
    inventory = _inventory()
    u = [c.uuid for c in inventory.chips]
    allocated = f"{u[0]},{CW},3072,0:;;{u[1]},{CW},21527,0:{u[2]},{CW},21527,0:;"
    erased = f";;{u[1]},{CW},21527,0:{u[2]},{CW},21527,0:;;"  # the init entry was served
    runtime = json.dumps([{"UUID": u[0], "temp": "vir01"}, {"UUID": u[1]}, {"UUID": u[2]}])
    pod = _pod(
        _notes(erased, runtime, allocated),
        init=[("init", 1)],
        containers=[("log", 0), ("train", 2)],
    )
    plan = podplan.read(pod, inventory)
    (train,) = plan.pending
    assert (train.index, train.container, train.init) == (2, "train", False)
    assert [d.template for d in train.devices] == [None, None]
    assert train.chip_uuids == tuple(sorted([u[1], u[2]]))
    assert plan.started
    assert (plan.uid, plan.resource_version) == (UID, "9")


def test_plan_names_containers_in_volcanos_layout_and_reads_temp_by_position() -> None:
    inventory = _inventory()
    u = inventory.chips[0].uuid
    value = f"{u},{CW},6144,0:;{u},{CW},12288,0:;"
    runtime = json.dumps([{"UUID": u, "temp": "vir02"}, {"UUID": u, "temp": "vir04"}])
    pod = _pod(_notes(value, runtime), containers=[("side", 0), ("a", 1), ("b", 1)])
    plan = podplan.read(pod, inventory)
    assert [(c.container, c.devices[0].template) for c in plan.pending] == [
        ("a", "vir02"),
        ("b", "vir04"),
    ]
    assert not plan.started


@pytest.mark.parametrize(
    ("memory", "template"),
    [
        (1000, "vir01"),
        (3072, "vir01"),
        (3073, "vir02"),
        (12288, "vir04"),
        (13000, None),
        (21527, None),
        (0, None),
    ],
)
def test_a_missing_temp_is_rounded_like_hamis_trim_memory(
    memory: int, template: str | None
) -> None:
    inventory = _inventory()
    u = inventory.chips[0].uuid
    plan = podplan.read(_pod(_notes(f"{u},{CW},{memory},0:;")), inventory)
    assert plan.pending[0].devices[0].template == template


@pytest.mark.parametrize(
    ("notes", "key", "problem"),
    [
        (_notes("nope"), protocol.to_allocate_key(CW), "not closed"),
        (
            _notes("{u},Ascend910B3,1,0:;"),
            protocol.to_allocate_key(CW),
            "device type is not Ascend310P",
        ),
        (
            _notes("ABC,Ascend310P,1,0:;"),
            protocol.to_allocate_key(CW),
            "not a Ascend310P chip of node n1",
        ),
        (_notes("{u},Ascend310P,1,0:;", "[1]"), protocol.runtime_key(CW), "must be a JSON object"),
        (
            _notes("{u},Ascend310P,1,0:;", '[{"UUID":"{u}","temp":"vir9"}]'),
            protocol.runtime_key(CW),
            "not a 310P3 template",
        ),
        (
            _notes(
                "{u},Ascend310P,21527,0:{u},Ascend310P,3072,0:;",
                '[{"UUID":"{u}"},{"UUID":"{u}","temp":"vir01"}]',
            ),
            protocol.runtime_key(CW),
            "mixes whole chips and vNPUs",
        ),
        (
            {**_notes("{u},Ascend310P,1,0:;"), protocol.VNPU_MODE_KEY: "hami-core"},
            protocol.VNPU_MODE_KEY,
            "does not run hami-vnpu-core",
        ),
    ],
)
def test_plan_errors_name_the_annotation_key(notes: dict[str, str], key: str, problem: str) -> None:
    inventory = _inventory()
    u = inventory.chips[0].uuid
    notes = {k: v.replace("{u}", u) for k, v in notes.items()}
    with pytest.raises(errors.BadAnnotation) as caught:
        podplan.read(_pod(notes), inventory)
    assert caught.value.key == key
    assert problem in str(caught.value)
    assert caught.value.pod == "ns/p"


def test_other_models_pending_keep_the_pod_from_success() -> None:
    pod = {
        "metadata": {
            "annotations": {
                "hami.io/Ascend910B3-devices-to-allocate": "u,Ascend910B3,1,0:;",
                protocol.to_allocate_key(CW): ";;",
            }
        }
    }
    assert podplan.others_pending(pod, CW)
    assert not podplan.others_pending(pod, "Ascend910B3")
    assert not podplan.has_pending(pod, CW)


def test_admission_order_puts_partly_served_then_bound_first() -> None:
    def pod(name: str, bound: str, version: str, created: str) -> dict[str, Any]:
        return {
            "metadata": {
                "name": name,
                "namespace": "d",
                "resourceVersion": version,
                "creationTimestamp": created,
                "annotations": {protocol.BIND_TIME_KEY: bound},
            }
        }

    pods = {
        "late-bound-old": pod("late-bound-old", "200", "50", "2026-01-01T00:00:00Z"),
        "early-bound": pod("early-bound", "100", "40", "2026-01-01T00:00:05Z"),
        "same-second": pod("same-second", "100", "41", "2026-01-01T00:00:01Z"),
    }
    ordered = sorted(pods, key=lambda n: finder.admission_order(pods[n], started=False))
    assert ordered == ["early-bound", "same-second", "late-bound-old"]
    assert finder.admission_order(pods["late-bound-old"], started=True) < finder.admission_order(
        pods["early-bound"], started=False
    )


# -- pod plan: a decision never gives less memory than asked -------------------------------

RUNTIME = protocol.runtime_key(CW)
TO_ALLOCATE = protocol.to_allocate_key(CW)


def _asking(
    entry: str,
    runtime: list[dict[str, Any]] | None,
    memory: str | None,
    *,
    part: str = "limits",
    soft: bool = False,
    chip: backend.ChipInfo | None = None,
) -> dict[str, Any]:
    """A one-container pod ``c0`` asking for one device and ``memory`` (None: no -memory),
    with a decision of one entry (``{u}`` is the chip's UUID) and its runtime info."""
    u = (chip or _chip(0)).uuid
    notes = _notes(
        entry.replace("{u}", u),
        None if runtime is None else json.dumps([{**r, "UUID": u} for r in runtime]),
    )
    if soft:
        notes[protocol.VNPU_MODE_KEY] = protocol.SOFT_MODE_VALUE
    pod = _pod(notes)
    if memory is not None:
        resources = pod["spec"]["containers"][0]["resources"]
        resources.setdefault(part, {})[f"huawei.com/{CW}-memory"] = memory
    return pod


# (decision entry, runtime info, the container's -memory, the annotation named, the message)
REFUSED_HARD = [
    pytest.param(
        "{u},Ascend310P,0,0:;",
        [{"temp": "vir01"}],
        "30000",
        RUNTIME,
        "template vir01 (3072 MiB) is smaller than the 30000 MiB asked; "
        "an Ascend310P chip has 24576 MiB",
        id="volcano-oversize-vir01",
    ),
    pytest.param(
        "{u},Ascend310P,0,0:;",
        [{"temp": ""}],
        "30000",
        TO_ALLOCATE,
        "a whole chip is smaller than the 30000 MiB asked; an Ascend310P chip has 24576 MiB",
        id="volcano-oversize-empty-temp",
    ),
    pytest.param(
        "{u},Ascend310P,0,0:;",
        None,
        "30k",
        TO_ALLOCATE,
        "a whole chip is smaller than the 30000 MiB asked; an Ascend310P chip has 24576 MiB",
        id="memory-0-no-runtime-info-oversize",
    ),
    pytest.param(
        "{u},Ascend310P,0,0:;",
        [{"temp": "vir01"}],
        "4Gi",
        RUNTIME,
        "template vir01 (3072 MiB) is smaller than the 4294967296 MiB asked; "
        "an Ascend310P chip has 24576 MiB",
        id="binary-unit-read-as-the-peers-read-it",
    ),
    pytest.param(
        "{u},Ascend310P,6144,0:;",
        [{"temp": "vir01"}],
        None,
        RUNTIME,
        "template vir01 (3072 MiB) is smaller than the 6144 MiB its decision accounts; "
        "an Ascend310P chip has 24576 MiB",
        id="template-below-decision-memory",
    ),
    pytest.param(
        "{u},Ascend310P,3072,0:;",
        [{"temp": "vir01"}],
        "4000",
        RUNTIME,
        "template vir01 (3072 MiB) is smaller than the 4000 MiB asked; "
        "an Ascend310P chip has 24576 MiB",
        id="template-below-the-pods-limit",
    ),
    pytest.param(
        "{u},Ascend310P,3072,0:;",
        None,
        "7000",
        TO_ALLOCATE,
        "template vir01 (3072 MiB) is smaller than the 7000 MiB asked; "
        "an Ascend310P chip has 24576 MiB",
        id="rounded-template-below-the-pods-limit",
    ),
    pytest.param(
        "{u},Ascend310P,21527,0:;",
        [{}],
        "30000",
        TO_ALLOCATE,
        "a whole chip is smaller than the 30000 MiB asked; an Ascend310P chip has 24576 MiB",
        id="whole-chip-for-more-than-the-chip",
    ),
    pytest.param(
        "{u},Ascend310P,30000,0:;",
        [{}],
        None,
        TO_ALLOCATE,
        "a whole chip is smaller than the 30000 MiB its decision accounts; "
        "an Ascend310P chip has 24576 MiB",
        id="whole-chip-decision-above-the-chip",
    ),
]


@pytest.mark.parametrize(("entry", "runtime", "memory", "key", "message"), REFUSED_HARD)
def test_a_decision_smaller_than_the_ask_is_refused_naming_what_and_why(
    entry: str, runtime: list[dict[str, Any]] | None, memory: str | None, key: str, message: str
) -> None:
    with pytest.raises(errors.DecisionTooSmall) as caught:
        podplan.read(_asking(entry, runtime, memory), _inventory())
    refused = caught.value
    assert str(refused) == f"pod ns/p container c0: {message}"
    assert (refused.pod, refused.container, refused.key) == ("ns/p", "c0", key)
    assert refused.chip_mib == 24576
    assert refused.code == "INVALID_ARGUMENT"
    assert refused.result == "decision_too_small"
    assert refused.result in metrics.ALLOCATION_RESULTS
    assert isinstance(refused, errors.BadAnnotation)  # the finder fails the pod as for any
    assert refused.asked_mib is not None
    assert refused.asked_mib > refused.given_mib


def test_the_pods_request_counts_when_it_gives_no_limit() -> None:
    pod = _asking("{u},Ascend310P,3072,0:;", [{"temp": "vir01"}], "4000", part="requests")
    with pytest.raises(errors.DecisionTooSmall, match="smaller than the 4000 MiB asked"):
        podplan.read(pod, _inventory())


@pytest.mark.parametrize(
    ("entry", "runtime", "memory", "template"),
    [
        pytest.param("{u},Ascend310P,3072,0:;", [{"temp": "vir01"}], "3072", "vir01", id="equal"),
        pytest.param("{u},Ascend310P,6144,0:;", [{"temp": "vir02"}], "3000", "vir02", id="bigger"),
        pytest.param("{u},Ascend310P,3072,0:;", None, "3k", "vir01", id="rounded-3k"),
        pytest.param("{u},Ascend310P,12288,0:;", [{"temp": "vir04_3c"}], "12288", "vir04_3c"),
        pytest.param("{u},Ascend310P,21527,0:;", [{}], "21527", None, id="whole-allocatable"),
        # HAMi's and vnpu's rounding give an ask above the allocatable memory, up to the
        # capacity, a whole chip: all a chip gives.
        pytest.param("{u},Ascend310P,21527,0:;", [{}], "24576", None, id="whole-capacity"),
        # Memory 0 and no template: HAMi's "whole card"; the pod's own ask fits in a chip.
        pytest.param("{u},Ascend310P,0,0:;", None, None, None, id="memory-0-whole-card"),
        pytest.param("{u},Ascend310P,0,0:;", [{}], "4000", None, id="memory-0-whole-for-4000"),
        # Volcano's smallest-template rounding of 0 for a pod that asks no memory gives at
        # least what it asks.
        pytest.param("{u},Ascend310P,0,0:;", [{"temp": "vir01"}], None, "vir01", id="0-vir01"),
        pytest.param("{u},Ascend310P,0,0:;", [{"temp": "vir01"}], "0", "vir01", id="asks-0"),
    ],
)
def test_a_decision_with_at_least_the_ask_is_served(
    entry: str, runtime: list[dict[str, Any]] | None, memory: str | None, template: str | None
) -> None:
    plan = podplan.read(_asking(entry, runtime, memory), _inventory())
    assert [d.template for d in plan.pending[0].devices] == [template]


@pytest.mark.parametrize(
    ("entry", "runtime", "memory", "message"),
    [
        pytest.param(
            "{u},Ascend310P,0,30:;",
            [{"core": 30}],
            None,
            "a soft slice of 0 MiB has no memory quota (a soft pod that names no memory gets "
            "the chip's 21527 MiB); an Ascend310P chip has 24576 MiB",
            id="memory-0-is-no-quota",
        ),
        pytest.param(
            "{u},Ascend310P,0,30:;",
            [{"memory": 0, "core": 30}],
            "4096",
            "a soft slice of 0 MiB has no memory quota",
            id="memory-0-for-an-ask",
        ),
        pytest.param(
            "{u},Ascend310P,4096,30:;",
            [{"memory": 4096, "core": 30}],
            "8192",
            "a soft slice of 4096 MiB is smaller than the 8192 MiB asked; "
            "an Ascend310P chip has 24576 MiB",
            id="below-the-pods-limit",
        ),
        pytest.param(
            "{u},Ascend310P,4096,30:;",
            [{"memory": 2048, "core": 30}],
            None,
            "a soft slice of 2048 MiB is smaller than the 4096 MiB its decision accounts",
            id="runtime-quota-below-the-entry",
        ),
        pytest.param(
            "{u},Ascend310P,30000,30:;",
            [{"memory": 30000, "core": 30}],
            "30000",
            "the 30000 MiB asked is more than an Ascend310P chip has (24576 MiB)",
            id="more-than-the-chip",
        ),
    ],
)
def test_a_soft_slice_smaller_than_asked_or_of_0_mib_is_refused(
    entry: str, runtime: list[dict[str, Any]], memory: str | None, message: str
) -> None:
    pod = _asking(entry, runtime, memory, soft=True)
    with pytest.raises(errors.DecisionTooSmall) as caught:
        podplan.read(pod, _inventory(soft=True))
    assert message in str(caught.value)
    assert caught.value.template is None


@pytest.mark.parametrize(
    ("entry", "runtime", "memory", "quota"),
    [
        ("{u},Ascend310P,4096,30:;", [{"memory": 4096, "core": 30}], "4096", 4096),
        ("{u},Ascend310P,4096,30:;", [{"core": 30}], None, 4096),  # the entry's memory
        # An ask above what a chip gives a slice gets all of it, as vnpu's scheduler rounds.
        ("{u},Ascend310P,21527,30:;", [{"memory": 21527, "core": 30}], "22000", 21527),
    ],
)
def test_a_soft_slice_of_at_least_the_ask_is_served(
    entry: str, runtime: list[dict[str, Any]], memory: str | None, quota: int
) -> None:
    plan = podplan.read(_asking(entry, runtime, memory, soft=True), _inventory(soft=True))
    assert [d.memory_mib for d in plan.pending[0].devices] == [quota]


def test_the_memory_factor_scales_the_ask_as_the_peers_scale_it() -> None:
    builtin = catalog.BUILTIN.by_common_word(CW)
    assert builtin is not None
    model = dataclasses.replace(builtin, memory_factor=2)
    inventory = devices.build("n1", (_chip(0),), catalog.BUILTIN.replace([model]), soft=False)
    pod = _asking("{u},Ascend310P,3072,0:;", [{"temp": "vir01"}], "2000")
    with pytest.raises(errors.DecisionTooSmall) as caught:
        podplan.read(pod, inventory)
    assert "smaller than the 4000 MiB asked (huawei.com/Ascend310P-memory: 2000 × memory " in str(
        caught.value
    )
    assert podplan.read(_asking("{u},Ascend310P,3072,0:;", [{"temp": "vir01"}], "1500"), inventory)


def test_an_unreadable_memory_ask_is_refused_naming_the_resource() -> None:
    pod = _asking("{u},Ascend310P,3072,0:;", [{"temp": "vir01"}], "lots")
    with pytest.raises(errors.DecisionTooSmall) as caught:
        podplan.read(pod, _inventory())
    assert "huawei.com/Ascend310P-memory 'lots' is not a quantity" in str(caught.value)
    assert caught.value.asked_mib is None


def test_an_unnamed_container_is_checked_against_its_decision_only() -> None:
    # Two containers ask and the decision has one entry: neither layout, so no names.
    pod = _asking("{u},Ascend310P,6144,0:;", [{"temp": "vir01"}], "30000")
    pod["spec"]["containers"].append(dict(pod["spec"]["containers"][0], name="c1"))
    with pytest.raises(errors.DecisionTooSmall) as caught:
        podplan.read(pod, _inventory())
    assert str(caught.value).startswith("pod ns/p container #0: template vir01 (3072 MiB) is ")
    assert "the 6144 MiB its decision accounts" in str(caught.value)


# -- environment contract ------------------------------------------------------------------


def _plan(
    templates: list[str | None], soft: bool = False
) -> tuple[podplan.PodPlan, podplan.ContainerPlan]:
    inventory = _inventory()
    found = tuple(
        podplan.Device(inventory.chips[i + 1], t, 4096 if soft else 0, 40 if soft else 0)
        for i, t in enumerate(templates)
    )
    container = podplan.ContainerPlan(0, "main", False, found)
    return podplan.PodPlan("ns", "p", "uid-7", "1", soft, "", (container,)), container


PATHS = environment.SoftPaths(Path("/core"), Path("/shared"))


@pytest.mark.parametrize(
    ("mode", "templates", "ids", "envs"),
    [
        ("managed", [None, None], [], {"ASCEND_VISIBLE_DEVICES": "1,2"}),
        ("runtime", [None], [], {"ASCEND_VISIBLE_DEVICES": "1"}),
        (
            "managed",
            ["vir02"],
            [117],
            {"ASCEND_VISIBLE_DEVICES": "117", "ASCEND_RUNTIME_OPTIONS": "VIRTUAL"},
        ),
        ("runtime", ["vir02"], [], {"ASCEND_VISIBLE_DEVICES": "1", "ASCEND_VNPU_SPECS": "vir02"}),
    ],
)
def test_environment_per_mode(
    mode: str, templates: list[str | None], ids: list[int], envs: dict[str, str]
) -> None:
    plan, container = _plan(templates)
    response = environment.response(settings.VnpuMode(mode), plan, container, ids, PATHS)
    assert dict(response.envs) == envs
    assert list(response.mounts) == []


def test_soft_environment_and_mounts() -> None:
    plan, container = _plan([None, None], soft=True)
    response = environment.response(settings.VnpuMode.MANAGED, plan, container, [], PATHS)
    assert dict(response.envs) == {
        "ASCEND_VISIBLE_DEVICES": "1,2",
        "NPU_MEM_QUOTA": "4096",
        "NPU_PRIORITY": "40",
        "NPU_GLOBAL_SHM_PATH": "/hami-shared-region/1_global_registry",
        "NPU_LOCAL_SHM_PATH": "/hami-vnpu-shmem/vnpu_local_shmem",
    }
    mounts = [(m.container_path, m.host_path, m.read_only) for m in response.mounts]
    assert ("/hami-vnpu-shmem", "/core/containers/uid-7_main", False) in mounts
    assert ("/etc/ld.so.preload", "/core/ld.so.preload", True) in mounts
    assert ("/hami-shared-region", "/shared", False) in mounts
    assert (
        "/usr/local/Ascend/driver/lib64/driver",
        "/usr/local/Ascend/driver/lib64/driver",
        True,
    ) in mounts
    assert isinstance(response, api_pb2.ContainerAllocateResponse)


# -- ledger --------------------------------------------------------------------------------


def _record(vnpu_id: int = 100, container: str = "c") -> ledger.Record:
    return ledger.Record(
        "uid", "ns", "p", container, False, 0, "U", vnpu_id, "vir01", ledger.State.INTENT, 1.5
    )


def test_ledger_round_trips_and_survives_a_reopen(tmp_path: Path) -> None:
    book = ledger.Ledger(tmp_path)
    first, second = _record(100), _record(101, "d")
    book.add(first, second)
    owned = dataclasses.replace(first, state=ledger.State.OWNED)
    book.replace(first, owned)
    book.remove(second)
    again = ledger.Ledger(tmp_path)
    assert again.records() == (owned,)
    assert again.owners(0, 100) == (owned,)
    assert again.of_container("uid", "c") == (owned,)
    assert not (tmp_path / "ledger.json.tmp").exists()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{", "not JSON"),
        ('{"format": "other", "records": []}', "not a ledger"),
        (f'{{"format": "{ledger.FORMAT}", "records": {{}}}}', "records is not a list"),
        (
            f'{{"format": "{ledger.FORMAT}", "records": [{{"pod_uid": "u"}}]}}',
            "records[0].namespace is missing",
        ),
        (f'{{"format": "{ledger.FORMAT}", "records": [5]}}', "records[0] is not an object"),
    ],
)
def test_a_broken_ledger_is_refused_with_its_path(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "ledger.json").write_text(text, encoding="utf-8")
    with pytest.raises(errors.LedgerError) as caught:
        ledger.Ledger(tmp_path)
    assert caught.value.path == str(tmp_path / "ledger.json")
    assert problem in str(caught.value)


def test_a_record_with_a_wrongly_typed_field_is_refused(tmp_path: Path) -> None:
    raw = {**dataclasses.asdict(_record()), "state": "owned", "chip": True}
    (tmp_path / "ledger.json").write_text(
        json.dumps({"format": ledger.FORMAT, "records": [raw]}), encoding="utf-8"
    )
    with pytest.raises(errors.LedgerError, match="chip"):
        ledger.Ledger(tmp_path)


# -- settings ------------------------------------------------------------------------------


def test_flags_override_environment_and_node_name_falls_back_to_node_name_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NODE_NAME", "from-downward-api")
    monkeypatch.setenv("VNPU_DP_VNPU_MODE", "runtime")
    monkeypatch.setenv("VNPU_DP_ALLOCATE_WAIT", "3")
    options = settings.from_args(
        ["--backend", "sim", "--sim-dir", str(tmp_path), "--allocate-wait", "2"]
    )
    assert options.node_name == "from-downward-api"
    assert options.vnpu_mode is settings.VnpuMode.RUNTIME
    assert options.allocate_wait == 2.0
    assert options.hami_vnpu_core is None
    assert settings.from_args(["--node-name", "x", "--no-hami-vnpu-core"]).hami_vnpu_core is False


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--node-name", "n", "--vnpu-mode", "both"], "vnpu_mode"),
        (["--node-name", "n", "--unowned-grace", "-1"], "unowned_grace"),
        (["--node-name", "n", "--kubeconfig", "/does/not/exist"], "kubeconfig"),
        (["--node-name", "", "--backend", "dcmi"], "node_name"),
    ],
)
def test_bad_settings_name_the_field(
    argv: list[str], field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    with pytest.raises(errors.SettingsError) as caught:
        settings.from_args(argv)
    assert caught.value.field == field


def test_an_unusable_kubeconfig_is_a_settings_error_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(errors.SettingsError) as caught:
        cluster.KubeCluster.connect(broken)
    assert (caught.value.field, caught.value.value) == ("kubeconfig", str(broken))
    assert "current-context" in caught.value.problem


def test_crash_points_are_checked() -> None:
    with pytest.raises(ValueError, match="not one of"):
        crashpoints.CrashPoints("sometime")
    crashpoints.CrashPoints("").reach(crashpoints.AFTER_CREATE)  # nothing configured: no exit


def test_a_plugin_directory_too_long_for_a_unix_socket_is_a_settings_error(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120)
    link = registration.KubeletLink(
        deep,
        "vnpu-Ascend310P.sock",
        "huawei.com/Ascend310P",
        api_pb2_grpc.DevicePluginServicer(),
        metrics.Metrics(),
    )
    with pytest.raises(errors.SettingsError) as caught:
        link.start()
    assert caught.value.field == "device_plugin_dir"
    assert caught.value.value == str(deep)
    assert "at most 107" in str(caught.value)
    assert not deep.exists()  # refused before anything was created


# -- PodResources: which pod of a name kubelet lists ---------------------------------------


def _owner(uid: str, name: str = "web") -> ledger.Record:
    return ledger.Record(
        uid, "default", name, "c0", False, 0, "U0", 100, "vir01", ledger.State.OWNED, 0.0
    )


@pytest.mark.parametrize(
    ("given", "listed", "held"),
    [
        ({}, None, True),  # PodResources did not answer: cannot tell
        ({"a": ["U0-0"]}, {}, False),  # not listed: its containers are gone
        ({"a": ["U0-0"]}, {"web": ["U0-0"]}, True),  # listed with what it got
        ({}, {"web": ["U0-3"]}, True),  # given before a restart: the name decides
        ({"a": ["U0-0"]}, {"web": ["U0-1"]}, False),  # the name's devices are another pod's
        ({"a": ["U0-0"], "b": ["U0-0"]}, {"web": ["U0-0"]}, False),  # its id went to a later pod
        ({"a": ["U0-0", "U0-1"], "b": ["U0-0"]}, {"web": ["U0-0", "U0-1"]}, True),  # both run
    ],
)
def test_kubelet_holds_an_owner_only_while_it_lists_the_devices_that_owner_got(
    given: dict[str, list[str]], listed: dict[str, list[str]] | None, held: bool
) -> None:
    handouts = podresources.Handouts()
    for uid, ids in given.items():  # in Allocate order
        handouts.record(uid, ids)
    listing = (
        None
        if listed is None
        else podresources.Listing({("default", n): frozenset(i) for n, i in listed.items()})
    )
    assert handouts.held(_owner("a"), listing) is held


def test_handouts_forget_pods_without_records() -> None:
    handouts = podresources.Handouts()
    handouts.record("a", ["U0-0"])
    handouts.record("b", ["U0-1"])
    handouts.keep_only(["b"])
    listing = podresources.Listing({("default", "web"): frozenset({"U0-5"})})
    assert handouts.held(_owner("a"), listing)  # forgotten: listed by name is enough
    assert not handouts.held(_owner("b"), listing)
    assert handouts.given("b") == {"U0-1"}


def test_the_pod_watch_can_be_switched_off() -> None:
    assert settings.from_args(["--node-name", "x"]).pod_watch is True
    assert settings.from_args(["--node-name", "x", "--no-pod-watch"]).pod_watch is False


# -- names, the grant book and what is published of it --------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("spec.containers[0].name", "../../../escaped", "not a DNS-1123 label"),
        ("spec.containers[0].name", "Upper", "not a DNS-1123 label"),
        ("spec.containers[0].name", "a" * 64, "not a DNS-1123 label"),
        ("spec.containers[0].name", "", "not a DNS-1123 label"),
        ("spec.containers[0].name", 7, "not a DNS-1123 label"),
        ("metadata.namespace", "ns/x", "not a DNS-1123 label"),
        ("metadata.name", "a..b", "not a DNS-1123 subdomain"),
        ("metadata.name", "..", "not a DNS-1123 subdomain"),
        ("metadata.name", "web/0", "not a DNS-1123 subdomain"),
        ("metadata.uid", "u-1", "not a UUID"),
        ("metadata.uid", f"{UID}/..", "not a UUID"),
        ("metadata.uid", None, "not a UUID"),
    ],
)
def test_names_the_plugin_will_not_use_are_refused_naming_the_field(
    field: str, value: object, problem: str
) -> None:
    pod = _pod(_notes(""))
    if field.startswith("spec."):
        pod["spec"]["containers"][0]["name"] = value
    else:
        pod["metadata"][field.split(".")[1]] = value
    with pytest.raises(errors.InvalidName) as caught:
        podplan.read(pod, _inventory())
    assert caught.value.field == field
    assert caught.value.value == value
    assert caught.value.code == "INVALID_ARGUMENT"
    assert problem in str(caught.value)


@pytest.mark.parametrize("value", ["web", "web-0", "0", "a" * 63])
def test_kubernetes_names_pass(value: str) -> None:
    assert names.label("p", "f", value) == value
    assert names.subdomain("p", "f", value) == value
    assert names.subdomain("p", "f", f"{value}.b-c.{value}") == f"{value}.b-c.{value}"
    with pytest.raises(errors.InvalidName):
        names.label("p", "f", f"{value}.b")  # a dot: a pod name, not a container name


def _grant(uid: str, chip: int, kind: grants.Kind, **extra: Any) -> grants.Grant:
    values: dict[str, Any] = {
        "pod_uid": uid,
        "namespace": "ns",
        "pod": f"p-{uid[:4]}",
        "container": "c0",
        "init": False,
        "chip": chip,
        "chip_uuid": f"U{chip}",
        "kind": kind,
        "template": "",
        "vnpu_id": grants.NO_VNPU,
        "memory_mib": 0,
        "cores": 0,
        "device_ids": (f"U{chip}-0",),
        "granted_at": 1.0,
    }
    values.update(extra)
    return grants.Grant(**values)


def test_the_grant_book_round_trips_and_replaces_a_containers_grants(tmp_path: Path) -> None:
    book = grants.Book(tmp_path)
    changes: list[int] = []
    book.on_change = lambda: changes.append(1)
    first = _grant("a" * 8, 0, grants.Kind.WHOLE)
    vnpu = _grant("b" * 8, 1, grants.Kind.VNPU, template="vir02", vnpu_id=116)
    book.put(first.pod_uid, ["c0"], [first])
    book.put(vnpu.pod_uid, ["c0"], [vnpu])
    again = dataclasses.replace(first, chip=2, chip_uuid="U2")
    book.put(first.pod_uid, ["c0"], [again])  # the same container served again
    assert set(grants.Book(tmp_path).records()) == {again, vnpu}
    assert vnpu.vnpu == (1, 116)
    assert again.vnpu is None
    book.remove(again)
    assert grants.Book(tmp_path).records() == (vnpu,)
    assert len(changes) == 4
    assert not (tmp_path / "grants.json.tmp").exists()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xff{}", "not UTF-8 text (byte 0 is 0xff); move it aside to start with an empty"),
        (b"[" * 100_000, "not JSON"),
        (b'{"format": "vnpu-device-plugin-grants/v1", "records": [{"kind": 1}]}', "records[0]"),
        (b'{"format": "vnpu-device-plugin-ledger/v1", "records": []}', "not a grant book"),
    ],
)
def test_a_broken_grant_book_is_refused_with_its_path(
    tmp_path: Path, data: bytes, problem: str
) -> None:
    (tmp_path / "grants.json").write_bytes(data)
    with pytest.raises(errors.LedgerError) as caught:
        grants.Book(tmp_path)
    assert caught.value.path == str(tmp_path / "grants.json")
    assert problem in str(caught.value)


def test_a_ledger_that_is_not_utf8_is_refused_with_its_path(tmp_path: Path) -> None:
    (tmp_path / "ledger.json").write_bytes(b'{"format": "\xc3\x28"}')
    with pytest.raises(errors.LedgerError) as caught:
        ledger.Ledger(tmp_path)
    assert str(caught.value) == (
        f"ownership ledger {tmp_path / 'ledger.json'}: not UTF-8 text (byte 12 is 0xc3); "
        "move it aside to start with an empty ledger"
    )


def test_the_granted_annotation_is_compact_sorted_and_marks_init_containers() -> None:
    model = catalog.BUILTIN.by_common_word(CW)
    assert model is not None
    a, b = "a" * 8, "b" * 8
    held = [
        holdings.from_grant(model, _grant(b, 1, grants.Kind.VNPU, template="vir04")),
        holdings.from_grant(model, _grant(a, 0, grants.Kind.WHOLE)),
        holdings.from_grant(model, _grant(b, 1, grants.Kind.VNPU, template="vir02", init=True)),
        holdings.from_grant(model, _grant(a, 2, grants.Kind.SOFT, memory_mib=3072, cores=30)),
    ]
    assert holdings.encode(held) == (
        '{"chips":{"U0":{"aaaaaaaa":["whole"]},"U1":{"bbbbbbbb":["init:vnpu:vir02","vnpu:vir04"]},'
        '"U2":{"aaaaaaaa":["soft:3072:30"]}},"v":1}'
    )
    assert holdings.encode([]) == '{"chips":{},"v":1}'
    assert granted.annotation_key(CW) == "vnpu.io/granted-Ascend310P"


def test_a_pods_init_containers_count_alone_beside_its_app_containers() -> None:
    model = catalog.BUILTIN.by_common_word(CW)
    assert model is not None
    app = holdings.from_grant(model, _grant("a" * 8, 1, grants.Kind.VNPU, template="vir02"))
    init = holdings.from_grant(
        model, _grant("a" * 8, 1, grants.Kind.VNPU, template="vir04", init=True)
    )
    usage = holdings.pod_usage([app, init])
    assert (usage.vnpus, usage.memory_mib, usage.aicore) == (1, 12288, 4)  # the larger, not both
    both = holdings.pod_usage([app, dataclasses.replace(init, init=False)])
    assert (both.vnpus, both.memory_mib) == (2, 18432)
