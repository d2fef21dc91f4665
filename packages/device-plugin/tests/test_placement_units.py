"""Table-driven tests of what the plugin decides for a pod bound without a decision
(``placement``'s pure parts), the error it refuses with, and the setting that turns it on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pytest

from vnpu_core import allocator, binding, catalog, granted, nodes, protocol, topology
from vnpu_device_plugin import devices, errors, metrics, placement, settings
from vnpu_npu import backend

Json = dict[str, Any]
CW = "Ascend310P"
RESOURCE = "huawei.com/Ascend310P"
MEMORY = "huawei.com/Ascend310P-memory"
CORE = "huawei.com/Ascend310P-core"
NODE = "n1"
NOW = datetime(2026, 5, 1, 12, 0, 0)
MODEL = catalog.BUILTIN.by_common_word(CW)
assert MODEL is not None


def _chip(phy: int) -> backend.ChipInfo:
    return backend.ChipInfo(
        card_id=phy // 2,
        device_id=phy % 2,
        logic_id=phy,
        phy_id=phy,
        uuid=f"{phy:08X}-00000000-00000000-00000000-0000000{phy}",
        chip_name="310P3",
        chip_type="Ascend",
        chip_version="V1",
        model="310P3",
        aicore=8,
        memory_mib=24576,
        memory_kind=backend.MemoryKind.DDR,
        bdf=f"0000:0{phy}:00.0",
    )


def _inventory(soft: bool = False) -> devices.Inventory:
    chips = tuple(_chip(i) for i in range(4))
    return devices.build(
        NODE, chips, catalog.BUILTIN, soft=soft, server=topology.ServerKind.DUO_300I
    )


INVENTORY = _inventory()
UUIDS = [c.uuid for c in INVENTORY.chips]


def _pod(
    name: str = "p",
    asks: Sequence[tuple[int, int | str | None]] = ((1, 6144),),
    *,
    annotations: Mapping[str, str] | None = None,
    phase: str = "Pending",
    extra: Mapping[str, str] | None = None,
) -> Json:
    """A pod bound to ``NODE`` whose containers ask (count, memory) of the resource."""
    containers = []
    for number, (count, memory) in enumerate(asks):
        limits: dict[str, str] = {RESOURCE: str(count)}
        if memory is not None:
            limits[MEMORY] = str(memory)
        limits.update(extra or {})
        containers.append({"name": f"c{number}", "resources": {"limits": limits}})
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "7",
            "annotations": dict(annotations or {}),
        },
        "spec": {"nodeName": NODE, "schedulerName": "volcano", "containers": containers},
        "status": {"phase": phase},
    }


def _memory(template: str | None) -> int:
    found = MODEL.template(template) if template else None
    return found.memory_mib if found is not None else MODEL.memory_allocatable_mib


def _holder(name: str, grants: Sequence[tuple[int, str | None]], phase: str = "Running") -> Json:
    """A pod bound here holding ``grants`` (chip, template or None for the whole chip)."""
    given = tuple(
        allocator.Grant(chip, UUIDS[chip], CW, template, _memory(template))
        for chip, template in grants
    )
    assignment = allocator.Assignment(NODE, (allocator.ContainerAssignment("c0", False, given),), 0)
    return _pod(
        name,
        ((len(grants), None),),
        annotations=binding.bind_annotations(assignment, 1),
        phase=phase,
    )


def _report(grants: Mapping[str, Mapping[int, Sequence[str]]]) -> str:
    """The grant report: pod UID -> chip -> holdings as published (``whole``, ``vnpu:vir02``)."""
    chips: dict[str, dict[str, list[granted.Holding]]] = {}
    for uid, by_chip in grants.items():
        for chip, held in by_chip.items():
            chips.setdefault(UUIDS[chip], {})[uid] = [granted.parse_holding("k", h) for h in held]
    return granted.encode(chips)


ALL_HEALTHY = dict.fromkeys(range(4), True)


def _decide(
    pod: Json,
    pods: Sequence[Json] = (),
    *,
    report: str = "",
    healthy: Mapping[int, bool] = ALL_HEALTHY,
    counts: Sequence[int] = (1,),
    inventory: devices.Inventory = INVENTORY,
) -> allocator.Assignment | placement.Refusal:
    node = placement.node_object(inventory, healthy, report or granted.encode({}), NOW)
    return placement.decide(pod, [*pods, pod], node, catalog.BUILTIN, CW, counts, NOW)


def _placed(outcome: allocator.Assignment | placement.Refusal) -> list[tuple[str, int, str]]:
    assert isinstance(outcome, allocator.Assignment), outcome
    return [
        (c.container, g.chip, g.template or ("soft" if g.soft else "whole"))
        for c in outcome.containers
        for g in c.grants
    ]


WHOLE_0_TO_2 = [_holder(f"h{i}", [(i, None)]) for i in range(3)]


@pytest.mark.parametrize(
    ("pod", "pods", "report", "expected"),
    [
        pytest.param(
            _pod(), [], "", [("c0", 0, "vir02")], id="a vNPU of the template its memory rounds to"
        ),
        pytest.param(
            _pod(asks=((1, None),)), [], "", [("c0", 0, "whole")], id="no memory: a whole chip"
        ),
        pytest.param(
            _pod(), WHOLE_0_TO_2, "", [("c0", 3, "vir02")], id="around the chips pods hold"
        ),
        pytest.param(
            _pod(),
            [_holder(f"done{i}", [(i, None)], phase="Succeeded") for i in range(4)],
            "",
            [("c0", 0, "vir02")],
            id="a finished pod's decision holds nothing",
        ),
        pytest.param(
            _pod(),
            [],
            _report({"gone-a": {0: ["whole"]}, "gone-b": {1: ["whole"]}, "gone-c": {2: ["whole"]}}),
            [("c0", 3, "vir02")],
            id="grants no pod shows are counted",
        ),
        pytest.param(
            _pod(),
            [_holder("h", [(1, "vir04")])],
            "",
            [("c0", 1, "vir02")],
            id="best fit: beside the vNPU already there",
        ),
        pytest.param(
            _pod(asks=((2, None),)),
            [_holder("h", [(0, None)])],
            "",
            [("c0", 2, "whole"), ("c0", 3, "whole")],
            id="two chips kept to one card of the 300I Duo",
        ),
        pytest.param(
            _pod(asks=((1, 3072), (1, 6144))),
            [],
            "",
            [("c0", 0, "vir01"), ("c1", 0, "vir02")],
            id="every container asking the resource",
        ),
        pytest.param(
            _pod(annotations={protocol.use_uuid_key(CW): UUIDS[2]}),
            [],
            "",
            [("c0", 2, "vir02")],
            id="the pod's own UUID list",
        ),
    ],
)
def test_decide_places_the_pod_beside_what_the_node_holds(
    pod: Json, pods: list[Json], report: str, expected: list[tuple[str, int, str]]
) -> None:
    first = [e for e in expected if e[0] == expected[0][0]]  # kubelet asks for c0's devices
    assert _placed(_decide(pod, pods, report=report, counts=(len(first),))) == expected


def test_a_soft_mode_node_gives_a_pod_asking_soft_mode_a_soft_slice() -> None:
    pod = _pod(
        asks=((1, 4096),),
        annotations={protocol.VNPU_MODE_KEY: protocol.SOFT_MODE_VALUE},
        extra={CORE: "30"},
    )
    outcome = _decide(pod, inventory=_inventory(soft=True))
    assert isinstance(outcome, allocator.Assignment)
    ((grant,),) = [c.grants for c in outcome.containers]
    assert (grant.soft, grant.memory_mib, grant.cores, grant.template) == (True, 4096, 30, None)
    notes = binding.bind_annotations(outcome, 1)
    assert notes[protocol.allocated_key(CW)] == f"{UUIDS[0]},{CW},4096,30:;"


FULL_CHIP_1 = [_holder("h1", [(1, "vir04")]), _holder("h2", [(1, "vir04_3c")])]
ONLY_CHIP_1 = {protocol.use_uuid_key(CW): UUIDS[1]}


@pytest.mark.parametrize(
    ("pod", "pods", "healthy", "counts", "outcome", "reason", "words"),
    [
        pytest.param(
            _pod(annotations=ONLY_CHIP_1),
            FULL_CHIP_1,
            ALL_HEALTHY,
            (1,),
            "does_not_fit",
            "memory",
            "no chip with 6144 MiB free for vir02 (asked 6144 MiB, best chip 1 has 0 of 24576 MiB)",
            id="the chip's memory is taken",
        ),
        pytest.param(
            _pod(asks=((1, None),), annotations=ONLY_CHIP_1),
            [_holder("h1", [(1, "vir01")])],
            ALL_HEALTHY,
            (1,),
            "does_not_fit",
            "no-free-chip",
            "no 1 free whole chip (asked 1, 0 of 1 chips are free)",
            id="a whole chip asked of a shared chip",
        ),
        pytest.param(
            _pod(),
            [],
            dict.fromkeys(range(4), False),
            (1,),
            "does_not_fit",
            "node-unavailable",
            "kubelet reports no allocatable huawei.com/Ascend310P",
            id="every chip unhealthy",
        ),
        pytest.param(
            _pod(asks=((1, "4Gi"),)),
            [],
            ALL_HEALTHY,
            (1,),
            "bad_request",
            MEMORY,
            "write MiB as a plain integer",
            id="a binary memory unit",
        ),
        pytest.param(
            _pod(asks=((1, 30000),)),
            [],
            ALL_HEALTHY,
            (1,),
            "bad_request",
            MEMORY,
            "is larger than one Ascend310P chip (24576 MiB)",
            id="memory above the chip",
        ),
        pytest.param(
            _pod(extra={"huawei.com/Ascend910B3": "1"}),
            [],
            ALL_HEALTHY,
            (1,),
            "bad_request",
            RESOURCE,
            "it asks for Ascend910B3 as well as Ascend310P",
            id="another chip model too",
        ),
        pytest.param(
            _pod(),
            [],
            ALL_HEALTHY,
            (2,),
            "bad_request",
            RESOURCE,
            "its containers get 1 device(s) and kubelet asks for 2",
            id="kubelet asks for another count",
        ),
    ],
)
def test_decide_refuses_naming_the_budget_or_the_field(
    pod: Json,
    pods: list[Json],
    healthy: dict[int, bool],
    counts: tuple[int, ...],
    outcome: str,
    reason: str,
    words: str,
) -> None:
    refusal = _decide(pod, pods, healthy=healthy, counts=counts)
    assert isinstance(refusal, placement.Refusal), refusal
    assert (refusal.outcome, refusal.reason) == (outcome, reason)
    assert words in refusal.problem


def test_a_hard_vnpu_on_a_soft_mode_node_never_fits() -> None:
    refusal = _decide(_pod(), inventory=_inventory(soft=True))
    assert isinstance(refusal, placement.Refusal)
    assert (refusal.outcome, refusal.reason, refusal.unresolvable) == (
        "does_not_fit",
        "mode-mismatch",
        True,
    )


@pytest.mark.parametrize(
    ("annotations", "key"),
    [
        ({}, ""),
        ({protocol.VNPU_MODE_KEY: protocol.SOFT_MODE_VALUE}, ""),
        ({protocol.use_uuid_key(CW): "x", protocol.TEMPLATE_KEY: "vir02"}, ""),
        ({"volcano.sh/job-name": "seed"}, ""),
        ({protocol.to_allocate_key(CW): ""}, protocol.to_allocate_key(CW)),
        ({protocol.allocated_key("Ascend910B3"): "x"}, protocol.allocated_key("Ascend910B3")),
        ({protocol.allocated_key("NoSuchChip"): "x"}, protocol.allocated_key("NoSuchChip")),
        ({protocol.runtime_key(CW): "[]"}, protocol.runtime_key(CW)),
        ({protocol.VGPU_NODE_KEY: "other"}, protocol.VGPU_NODE_KEY),
        ({protocol.BIND_PHASE_KEY: "failed"}, protocol.BIND_PHASE_KEY),
    ],
)
def test_a_pod_with_any_part_of_a_decision_is_never_placed(
    annotations: dict[str, str], key: str
) -> None:
    words = [m.common_word for m in catalog.BUILTIN]
    assert placement.decision_key(_pod(annotations=annotations), words) == key


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({}, ""),
        ({"metadata": {"deletionTimestamp": "2026-05-01T12:00:00Z"}}, "it is being deleted"),
        ({"status": {"phase": "Failed"}}, "it is Failed"),
        ({"spec": {"nodeName": "n2"}}, "it is bound to n2, not to n1"),
    ],
)
def test_a_pod_leaving_is_not_placed(change: dict[str, dict[str, str]], why: str) -> None:
    pod = _pod()
    for part, values in change.items():
        pod[part].update(values)
    assert placement.leaving(pod, NODE) == why


def test_the_node_view_is_the_one_a_scheduler_reads_from_the_plugins_annotations() -> None:
    healthy = {0: True, 1: False, 2: True, 3: True}
    report = _report({"uid-x": {2: ["vnpu:vir02"]}})
    obj = placement.node_object(INVENTORY, healthy, report, NOW)
    read = nodes.read_node(obj, catalog.BUILTIN, NOW, placement.HANDSHAKE_TIMEOUT)
    assert read.node is not None, read.unavailable
    assert [(c.uuid, c.healthy, c.slots) for c in read.node.chips] == [
        (u, healthy[i], 7) for i, u in enumerate(UUIDS)
    ]
    assert (
        read.node.topology.describe()
        == topology.build(topology.ServerKind.DUO_300I, [0, 1, 2, 3]).describe()
    )
    assert obj["status"]["allocatable"] == {RESOURCE: "21"}
    assert obj["metadata"]["annotations"][granted.annotation_key(CW)] == report


@pytest.mark.parametrize(
    ("outcome", "unresolvable", "code"),
    [
        ("does_not_fit", False, "RESOURCE_EXHAUSTED"),
        ("does_not_fit", True, "FAILED_PRECONDITION"),
        ("bad_request", False, "INVALID_ARGUMENT"),
        ("pod_gone", False, "FAILED_PRECONDITION"),
    ],
)
def test_not_placed_carries_its_outcome_reason_and_code(
    outcome: str, unresolvable: bool, code: str
) -> None:
    error = errors.NotPlaced(NODE, "ns/p", outcome, "aicore", "no room", unresolvable=unresolvable)
    assert (error.code, error.outcome, error.reason, error.result) == (
        code,
        outcome,
        "aicore",
        "not_placed",
    )
    assert error.result in metrics.ALLOCATION_RESULTS
    assert outcome in errors.NOT_PLACED_OUTCOMES
    assert outcome in metrics.PLACEMENT_RESULTS
    assert str(error) == (
        "pod ns/p was bound to node n1 without a device decision and the device plugin "
        "cannot place it there: no room"
    )


@pytest.mark.parametrize(
    ("argv", "environment", "expected"),
    [
        ([], {}, False),
        (["--place-undecided"], {}, True),
        (["--no-place-undecided"], {"VNPU_DP_PLACE_UNDECIDED": "true"}, False),
        ([], {"VNPU_DP_PLACE_UNDECIDED": "true"}, True),
    ],
)
def test_placing_undecided_pods_is_off_unless_asked(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], environment: dict[str, str], expected: bool
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    options = settings.from_args(["--node-name", "x", *argv])
    assert options.place_undecided is expected
