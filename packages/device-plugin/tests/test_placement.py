"""Pods a peer's scheduler bound without a device decision, with ``--place-undecided``.

Volcano's vc-scheduler binds NPU pods without any decision until it has read the node's
devices (at every start or restart). Each test binds pods the way it then does: a Binding
with no annotation, the pod's ``schedulerName`` ``volcano``. The simulated kubelet admits them
over the plugin's real socket, on the session's kube-apiserver; the plugin places each pod
that still has no decision after ``--allocate-wait``, writes the decision as a scheduler
would, and serves it down its one path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from vnpu_core import catalog, protocol
from vnpu_device_plugin import placement, podplan

Node = Any
Kit = Any
CW = "Ascend310P"
RESOURCE = "huawei.com/Ascend310P"
MEMORY = "huawei.com/Ascend310P-memory"
WORDS = [m.common_word for m in catalog.BUILTIN]


def _sample(node: Node, name: str, **labels: str) -> float:
    value = node.plugin.stats.registry.get_sample_value(name, labels)
    return float(value or 0.0)


def _placements(node: Node, result: str) -> float:
    return _sample(node, "vnpu_device_plugin_placements_total", result=result)


def _bind_undecided(
    node: Node, name: str, memory: int | None = 6144, annotations: Mapping[str, str] | None = None
) -> None:
    """A pod asking one device (and ``memory`` MiB), bound as Volcano binds it before it has
    read the node's devices: a Binding without annotations."""
    limits = {RESOURCE: "1"}
    if memory is not None:
        limits[MEMORY] = str(memory)
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {})},
        "spec": {
            "schedulerName": "volcano",
            "containers": [{"name": "worker", "image": "busybox", "resources": {"limits": limits}}],
        },
    }
    node.api.core.create_namespaced_pod(node.namespace, body, _preload_content=False)
    node.api.bind(name, {})


def _events(node: Node, name: str, reason: str) -> list[Mapping[str, Any]]:
    return [
        e
        for e in node.api.event_list()
        if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
    ]


def _settled(node: Node, name: str) -> str:
    phase = node.api.phase(name)
    return phase if phase in ("Running", "Failed") else ""


def _vnpu_of(node: Node, name: str, container: str = "worker") -> tuple[int, str]:
    """(chip, template) of the one vNPU the pod's container was given."""
    vnpu_id = int(node.env(name, container)["ASCEND_VISIBLE_DEVICES"])
    ((chip, template),) = [(c, t) for c, v, t in node.vnpus() if v == vnpu_id]
    return chip, template


def _start(node: Node, kit: Kit, **overrides: Any) -> None:
    node.start_plugin(**overrides)
    kit.wait_for(lambda: node.capacity() == (28, 28), what="registration")


def test_a_pod_bound_without_a_decision_is_placed_and_served(node: Node, kit: Kit) -> None:
    _start(node, kit, place_undecided=True)
    started = time.monotonic()
    _bind_undecided(node, "seed-0")
    kit.wait_for(lambda: node.running("seed-0"), what="the undecided pod placed and served")
    served_after = time.monotonic() - started
    notes = node.api.annotations("seed-0")
    ((entry,),) = protocol.decode_devices("k", notes[protocol.allocated_key(CW)])
    ((info,),) = [protocol.decode_runtime("k", notes[protocol.runtime_key(CW)])]
    assert (entry.type, entry.memory_mib, info.uuid, info.template) == (
        CW,
        6144,
        entry.uuid,
        "vir02",
    )
    assert notes[protocol.VGPU_NODE_KEY] == kit.NODE
    assert notes[protocol.BIND_PHASE_KEY] == "success"
    assert notes[protocol.BIND_TIME_KEY].isdigit()
    assert not podplan.has_pending(node.api.pod("seed-0"), CW)  # served: the entry erased
    chip = next(i for i in range(4) if node.api.uuid(i) == entry.uuid)
    assert _vnpu_of(node, "seed-0") == (chip, "vir02")
    assert [r["pod"] for r in node.ledger()] == ["seed-0"]
    (event,) = _events(node, "seed-0", placement.PLACED)
    assert event["type"] == "Normal"
    assert event["source"]["component"] == "vnpu-device-plugin"
    assert event["message"].startswith(
        f"bound by volcano without a device decision; placed on node {kit.NODE} by its device "
        f"plugin: worker: {CW} chip {chip} (vir02)"
    )
    assert _placements(node, "placed") == 1
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="success") == 1
    kit.wait_for(
        lambda: (
            node.api.pod("seed-0")["metadata"]["uid"]
            in node.api.node_annotations().get(f"vnpu.io/granted-{CW}", "")
        ),
        what="the grant published on the node",
    )
    assert served_after < 10, served_after


def test_a_job_of_four_pods_bound_without_decisions_all_run_without_over_commit(
    node: Node, kit: Kit
) -> None:
    """The seed Job that failed 4/4 under a restarting vc-scheduler: every worker runs."""
    _start(node, kit, place_undecided=True)
    names = [f"seed-{i}" for i in range(4)]
    for name in names:
        _bind_undecided(node, name, memory=12288)
    phases = [kit.wait_for(lambda n=n: _settled(node, n), timeout=60, what=n) for n in names]
    assert phases == ["Running"] * 4
    held = sorted(_vnpu_of(node, n) for n in names)
    assert sorted(t for _, t in held) == ["vir04", "vir04", "vir04_3c", "vir04_3c"]
    per_chip: dict[int, int] = {}
    for chip, _template in held:
        per_chip[chip] = per_chip.get(chip, 0) + 1
    assert sorted(per_chip.values()) == [2, 2]  # two 12288 MiB vNPUs fill a 24576 MiB chip
    assert _placements(node, "placed") == 4


def test_two_pods_on_a_chip_with_room_for_one_one_placed_the_other_refused_naming_the_budget(
    node: Node, kit: Kit
) -> None:
    _start(node, kit, place_undecided=True)
    node.api.place("holder", [[kit.Grant(1, "vir04", 12288)]])  # a scheduled pod: half of chip 1
    kit.wait_for(lambda: node.running("holder"), what="the scheduled pod served")
    only_chip_1 = {protocol.use_uuid_key(CW): node.api.uuid(1)}
    for name in ("a", "b"):
        _bind_undecided(node, name, memory=12288, annotations=only_chip_1)
    phases = {n: kit.wait_for(lambda n=n: _settled(node, n), what=n) for n in ("a", "b")}
    assert sorted(phases.values()) == ["Failed", "Running"]
    placed = next(n for n, p in phases.items() if p == "Running")
    refused = next(n for n, p in phases.items() if p == "Failed")
    assert _vnpu_of(node, placed) == (1, "vir04_3c")  # beside the scheduled pod's vir04
    assert sorted(t for c, _v, t in node.vnpus() if c == 1) == ["vir04", "vir04_3c"]
    budget = (
        f"{CW}: no chip with 12288 MiB free for vir04 (asked 12288 MiB, best chip 1 has 0 of "
        "24576 MiB)"
    )
    message = str(node.api.pod(refused)["status"].get("message", ""))
    assert "RESOURCE_EXHAUSTED" in message or "ResourceExhausted" in message
    assert (
        f"pod {node.namespace}/{refused} was bound to node {kit.NODE} without a device decision "
        f"and the device plugin cannot place it there: {budget}" in message
    ), message
    (warning,) = _events(node, refused, placement.NOT_PLACED)
    assert warning["type"] == "Warning"
    assert budget in warning["message"]
    assert placement.decision_key(node.api.pod(refused), WORDS) == ""  # nothing written
    assert (_placements(node, "placed"), _placements(node, "does_not_fit")) == (1, 1)
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="not_placed") == 1


class _Entries:
    """Stands in for the plugin's allocation lock and counts the times it is taken."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self._guard = threading.Lock()
        self.count = 0

    def __enter__(self) -> None:
        with self._guard:
            self.count += 1
        self._lock.acquire()

    def __exit__(self, *_: object) -> None:
        self._lock.release()


def test_a_decision_that_shows_during_the_wait_is_the_one_served(node: Node, kit: Kit) -> None:
    _start(node, kit, place_undecided=True, allocate_wait=3.0)
    entries = _Entries(node.plugin.allocations.lock)
    node.plugin.allocations.lock = entries
    _bind_undecided(node, "late")
    # GetPreferredAllocation, then the Allocate's first look: it is waiting for a decision.
    kit.wait_for(lambda: entries.count >= 2, what="kubelet's Allocate for the pod")
    decision = node.api.decision([[kit.Grant(3, "vir02", 6144)]])  # as Volcano before v1.16
    body = {"metadata": {"annotations": decision}}
    node.api.core.patch_namespaced_pod(
        "late", node.namespace, body, _content_type="application/merge-patch+json"
    )
    kit.wait_for(lambda: node.running("late"), what="served with the decision that showed")
    assert _vnpu_of(node, "late") == (3, "vir02")  # the placement would have taken chip 0
    assert (
        node.api.annotations("late")[protocol.allocated_key(CW)]
        == decision[protocol.allocated_key(CW)]
    )
    assert sum(_placements(node, r) for r in ("placed", "decided_meanwhile", "has_decision")) == 0
    assert _events(node, "late", placement.PLACED) == []


def test_a_placement_counts_a_decision_not_served_yet_and_never_takes_its_room(
    node: Node, kit: Kit
) -> None:
    """The identification race with placement on: an undecided pod's Allocate waits while a
    scheduled pod is bound with a decision for half of chip 0 (not served yet: kubelet admits
    one pod at a time). The placement counts that decision; both pods run, each on its own."""
    _start(node, kit, place_undecided=True)
    entries = _Entries(node.plugin.allocations.lock)
    node.plugin.allocations.lock = entries
    _bind_undecided(node, "undecided", memory=12288)
    kit.wait_for(lambda: entries.count >= 2, what="kubelet's Allocate for the undecided pod")
    node.api.place("scheduled", [[kit.Grant(0, "vir04", 12288)]])
    for name in ("undecided", "scheduled"):
        kit.wait_for(lambda n=name: _settled(node, n) == "Running", what=name)
    assert node.api.annotations("scheduled")[protocol.allocated_key(CW)].startswith(
        node.api.uuid(0)
    )  # served with its own decision
    assert _vnpu_of(node, "scheduled", "c0") == (0, "vir04")
    assert _vnpu_of(node, "undecided") == (0, "vir04_3c")  # beside it, within every budget
    owners = sorted((r["pod"], r["chip"], r["template"]) for r in node.ledger())
    assert owners == [("scheduled", 0, "vir04"), ("undecided", 0, "vir04_3c")]
    assert _sample(node, "vnpu_device_plugin_grant_conflicts_total", reason="over_budget") == 0


def test_without_the_setting_a_pod_without_a_decision_is_still_refused(
    running: Node, kit: Kit
) -> None:
    node = running
    _bind_undecided(node, "undecided")
    kit.wait_for(lambda: node.api.phase("undecided") == "Failed", what="refused")
    message = str(node.api.pod("undecided")["status"].get("message", ""))
    assert f"pod {node.namespace}/undecided, which has no decision for this node" in message
    assert placement.decision_key(node.api.pod("undecided"), WORDS) == ""
    assert node.vnpus() == []
    assert sum(_placements(node, r) for r in ("placed", "does_not_fit", "has_decision")) == 0


def test_a_pod_with_a_decision_for_another_node_is_left_alone(node: Node, kit: Kit) -> None:
    _start(node, kit, place_undecided=True)
    node.api.create_pod("elsewhere", [("c0", 1)])
    notes = node.api.decision([[kit.Grant(0, "vir02", 6144)]], node="npu-node-2")
    node.api.bind("elsewhere", notes)
    kit.wait_for(lambda: node.api.phase("elsewhere") == "Failed", what="refused")
    assert node.api.annotations("elsewhere") == {**node.api.annotations("elsewhere"), **notes}
    assert _placements(node, "has_decision") == 1
    assert _placements(node, "placed") == 0
    assert node.vnpus() == []


def test_a_conflict_on_the_placement_patch_reads_the_pod_again_and_places_it(
    node: Node, kit: Kit
) -> None:
    proxy = node.through_proxy()
    _start(node, kit, place_undecided=True)
    proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/contested$", 409, times=1)
    _bind_undecided(node, "contested")
    kit.wait_for(lambda: node.running("contested"), what="placed on the second try")
    assert _vnpu_of(node, "contested")[1] == "vir02"
    assert _placements(node, "placed") == 1
    statuses = [s for m, p, s in proxy.requests if m == "PATCH" and p.endswith("/contested")]
    assert statuses[0] == 409
    assert _sample(node, "vnpu_device_plugin_api_retries_total") >= 1


def test_a_lost_answer_to_the_placement_patch_finds_the_decision_and_serves_it(
    node: Node, kit: Kit
) -> None:
    proxy = node.through_proxy()
    _start(node, kit, place_undecided=True)
    # The PATCH lands, its answer is a 409: listed again, the pod carries a decision.
    proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/lost$", 409, after=True)
    _bind_undecided(node, "lost")
    kit.wait_for(lambda: node.running("lost"), what="served once")
    assert len(node.vnpus()) == 1
    assert (_placements(node, "decided_meanwhile"), _placements(node, "placed")) == (1, 0)


def test_a_pod_deleted_while_it_is_placed_is_refused_and_nothing_is_created(
    node: Node, kit: Kit
) -> None:
    proxy = node.through_proxy()
    _start(node, kit, place_undecided=True)
    proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/vanishing$", 404, times=1)
    _bind_undecided(node, "vanishing")
    kit.wait_for(lambda: node.api.phase("vanishing") == "Failed", what="refused")
    message = str(node.api.pod("vanishing")["status"].get("message", ""))
    assert "it was deleted while it was placed" in message
    assert _placements(node, "pod_gone") == 1
    assert _events(node, "vanishing", placement.NOT_PLACED) == []
    assert node.vnpus() == []


def test_an_api_down_while_placing_refuses_the_pod_and_the_node_goes_on_serving(
    node: Node, kit: Kit
) -> None:
    proxy = node.through_proxy()
    _start(node, kit, place_undecided=True)
    fault = proxy.inject("PATCH", rf"/namespaces/{node.namespace}/pods/down$", 500, times=1000)
    _bind_undecided(node, "down")
    kit.wait_for(lambda: node.api.phase("down") == "Failed", what="refused")
    assert "UNAVAILABLE" in str(node.api.pod("down")["status"].get("message", "")).upper()
    assert placement.decision_key(node.api.pod("down"), WORDS) == ""
    assert _placements(node, "api_error") == 1
    assert _sample(node, "vnpu_device_plugin_allocations_total", result="api_error") == 1
    assert node.vnpus() == []
    fault.times = 0
    _bind_undecided(node, "up")
    kit.wait_for(lambda: node.running("up"), what="the next pod placed and served")
