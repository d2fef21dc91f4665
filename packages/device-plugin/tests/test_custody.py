"""Kubelet outranks the state files: no vNPU is destroyed while PodResources lists a running
container it may be given to, whatever the ledger and the grant book say, nor while
PodResources does not answer.

The attack that once worked: a pod holding two vNPUs on two chips; the ledger record and the
grant of one of them edited to name a pod that does not exist. The grant book still named the
pod for its other vNPU, so the check by pod name let the edited one go, and the plugin
destroyed a vNPU a running container held. Here that is replayed against the real
kube-apiserver and the simulated kubelet's PodResources; ``custody`` is also checked table by
table against a PodResources listing and a grant book of the test's own.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from structlog import testing

from vnpu_device_plugin import custody, grants, ledger, metrics, podresources
from vnpu_npu.sim import backend as sim_backend

Node = Any
Kit = Any


def _sample(stats: metrics.Metrics, name: str, **labels: str) -> float:
    return float(stats.registry.get_sample_value(name, labels) or 0.0)


def _edit_chip(node: Node, chip: int, **fields: str) -> None:
    """Rewrite the ledger's records and the grant book's grants on ``chip`` with ``fields``."""
    for file in ("ledger.json", "grants.json"):
        path = node.state_dir / file
        document = json.loads(path.read_text(encoding="utf-8"))
        for record in document["records"]:
            if record["chip"] == chip:
                record.update(fields)
        path.write_text(json.dumps(document), encoding="utf-8")


def test_state_files_giving_a_running_containers_vnpu_to_a_ghost_do_not_destroy_it(
    node: Node, kit: Kit
) -> None:
    node.start_plugin(pod_watch=False)
    kit.wait_for(lambda: node.capacity() == (28, 28), what="registration")
    two = [[kit.Grant(1, "vir02", 6144), kit.Grant(2, "vir01", 3072)]]
    node.api.place("live", two, containers=[("c0", 2)])
    kit.wait_for(lambda: node.running("live"), what="live running")
    node.stop_plugin()
    before = node.vnpus()
    (edited,) = [v for v in before if v[0] == 1]
    ids = node.kubelet.allocation(node.namespace, "live").container("c0").device_ids(kit.RESOURCE)
    on_chip_1 = sorted(i for i in ids if i.startswith(node.api.uuid(1)))
    ghost = str(uuid.uuid4())
    _edit_chip(node, 1, pod_uid=ghost, pod="ghost")  # both files: chip 1's vNPU is the ghost's

    with testing.capture_logs() as logged:
        node.start_plugin(pod_watch=False)  # its start-up pass is the first look
        for _ in range(3):
            report = node.plugin.reconciler.run_once()
            assert report.reclaimed == []
            assert report.withheld == [(1, edited[1], "unrecorded_holder")]
    assert node.vnpus() == before
    assert node.running("live")
    stats = node.plugin.stats
    disagreements = "vnpu_device_plugin_state_disagreements_total"
    assert _sample(stats, disagreements, reason="unrecorded_holder") == 1  # counted once
    lines = [e for e in logged if e["event"] == "state_disagreement"]
    assert len(lines) == 1, lines  # logged once
    (line,) = lines
    assert (line["pod"], line["container"], line["devices"]) == (
        f"{node.namespace}/live",
        "c0",
        on_chip_1,
    )
    assert (line["chip"], line["vnpu"], line["reason"]) == (1, edited[1], "unrecorded_holder")
    assert f"owned by {node.namespace}/ghost c0 (uid {ghost})" in line["ledger_says"]
    # The ghost's grant was dropped as a done pod's: nothing in the book accounts for live on chip 1.
    assert line["grant_book_says"].startswith(f"{node.namespace}/live c0 on chip 1: nothing")

    # Once kubelet lets go of the container, the vNPU goes: kubelet said so, not a file.
    node.kubelet.complete_pod(node.namespace, "live")
    kit.wait_for(lambda: node.api.phase("live") == "Succeeded", what="live finished")
    reclaimed = {(chip, vnpu) for chip, vnpu, _ in node.plugin.reconciler.run_once().reclaimed}
    assert reclaimed == {(chip, vnpu) for chip, vnpu, _ in before}
    assert node.vnpus() == []


def test_without_pod_resources_no_vnpu_is_destroyed_and_the_plugin_says_so(
    node: Node, kit: Kit
) -> None:
    node.start_plugin(pod_watch=False)
    kit.wait_for(lambda: node.capacity() == (28, 28), what="registration")
    node.api.place("done", [[kit.Grant(3, "vir04", 12288)]])
    kit.wait_for(lambda: node.running("done"), what="done running")
    node.kubelet.complete_pod(node.namespace, "done")
    kit.wait_for(lambda: node.api.phase("done") == "Succeeded", what="done finished")
    node.stop_plugin()
    (vnpu,) = node.vnpus()
    nowhere = node.root / "no-kubelet" / "kubelet.sock"
    with testing.capture_logs() as logged:
        node.start_plugin(pod_watch=False, pod_resources_socket=nowhere)
        report = node.plugin.reconciler.run_once()
    assert report.reclaimed == []
    assert report.withheld == [(3, vnpu[1], custody.UNAVAILABLE)]
    assert node.vnpus() == [vnpu]
    withheld = "vnpu_device_plugin_reclaims_withheld_total"
    assert _sample(node.plugin.stats, withheld, reason="pod_resources_unavailable") == 1
    (line,) = [e for e in logged if e["event"] == "vnpu_destroy_deferred"]
    assert (line["chip"], line["vnpu"], line["reason"]) == (3, vnpu[1], "pod_resources_unavailable")
    node.stop_plugin()
    node.start_plugin(pod_watch=False)  # kubelet answers: the finished pod's vNPU goes
    assert node.vnpus() == []


# -- custody, table by table ---------------------------------------------------------------

CHIP = 1
OTHER = 2  # a vNPU of chip 1 that another container holds


def _book(state: Path, uuid_: str, kind: str, vnpu_id: int, ids: tuple[str, ...]) -> grants.Book:
    book = grants.Book(state)
    grant = grants.Grant(
        pod_uid="u-web",
        namespace="default",
        pod="web",
        container="c0",
        init=False,
        chip=CHIP,
        chip_uuid=uuid_,
        kind=grants.Kind(kind),
        template="vir01" if kind == "vnpu" else "",
        vnpu_id=vnpu_id,
        memory_mib=3072,
        cores=0,
        device_ids=ids,
        granted_at=time.time(),
    )
    book.put("u-web", ["c0"], [grant])
    return book


@pytest.mark.parametrize(
    ("listed", "kind", "granted_vnpu", "expected"),
    [
        (None, None, 0, custody.UNAVAILABLE),  # PodResources does not answer
        ([], None, 0, None),  # nothing runs on the chip
        (["-0"], None, 0, "unrecorded_holder"),  # runs there, no grant says with what
        (["-0"], "vnpu", OTHER, None),  # its grant names another vNPU, which exists
        (["-0"], "vnpu", 99, "unrecorded_holder"),  # ...which does not exist
        (["-0"], "vnpu", -1, "unrecorded_holder"),  # a runtime vNPU: which one is not known
        (["-0"], "whole", -1, None),  # the chip whole: no vNPU of the chip is its
        (["-0"], "soft", -1, None),  # a soft slice
        (["-5"], "vnpu", OTHER, "unrecorded_holder"),  # the grant has other device ids
        (["-0"], "vnpu", "self", "granted_to_running_container"),  # the grant names this one
    ],
)
def test_custody_keeps_a_vnpu_a_listed_container_may_hold(
    tmp_path: Path,
    kit: Kit,
    listed: list[str] | None,
    kind: str | None,
    granted_vnpu: int | str,
    expected: str | None,
) -> None:
    npu = sim_backend.SimBackend(kit.write_node(tmp_path / "sim"))
    target = npu.create_vnpu(CHIP, "vir02")
    other = npu.create_vnpu(CHIP, "vir01")
    uuid_ = npu.chips()[CHIP].uuid
    state = tmp_path / "state"
    ids = tuple(f"{uuid_}{suffix}" for suffix in (listed or []))
    vnpu_id = {"self": target, OTHER: other}.get(granted_vnpu, granted_vnpu)
    book = _book(state, uuid_, kind, int(vnpu_id), (f"{uuid_}-0",)) if kind else grants.Book(state)
    listing = (
        None
        if listed is None
        else podresources.Listing(
            {("default", "web"): frozenset(ids)},
            {("default", "web"): ({"c0": frozenset(ids)},)},
        )
    )
    stats = metrics.Metrics()
    keeper = custody.Custody(npu, ledger.Ledger(state), book, stats, kubelet=lambda: listing)
    for _ in range(2):
        hold = keeper.check(CHIP, target, "reclaimed")
        assert (hold.reason if hold else None) == expected
    if expected in metrics.DISAGREEMENT_REASONS:
        assert _sample(stats, "vnpu_device_plugin_state_disagreements_total", reason=expected) == 1
        assert hold is not None
        assert (hold.pod, hold.container, hold.devices) == ("default/web", "c0", ids)
