"""Prompt reclaim: a deleted or finished pod's vNPUs are freed at once, never a live one's.

The periodic pass is set to an hour, so whatever is reclaimed here was reclaimed by the pod
watch or by an Allocate that needed the room. Everything runs over real transports:
kube-apiserver over HTTPS, the simulated kubelet, the plugin's gRPC socket; where a test needs
kubelet to keep listing a pod the API has lost, a PodResources server on the kubelet's
socket answers what the test says. A pod is deleted as ``kubectl delete`` deletes it: it
leaves the API once the kubelet has confirmed, except where no kubelet runs (``--force``).
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from vnpu_core import protocol
from vnpu_device_plugin import (
    cluster,
    crashpoints,
    ledger,
    lifecycle,
    metrics,
    podresources,
    podwatch,
    reclaim,
)
from vnpu_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import control
from vnpu_sandbox.platform import apiplane

Node = Any
Kit = Any
HOUR = 3600.0
VIR = {"vir01": 3072, "vir02": 6144, "vir04": 12288}
WHOLE = 21527


def _sample(node: Node, name: str, **labels: str) -> float:
    value = node.plugin.stats.registry.get_sample_value(name, labels)
    return float(value or 0.0)


def _by_trigger(node: Node, trigger: str) -> float:
    return _sample(node, "vnpu_device_plugin_vnpus_reclaimed_by_trigger_total", trigger=trigger)


def _grant(kit: Kit, chip: int, template: str | None) -> Any:
    return kit.Grant(chip, template, VIR[template] if template else WHOLE)


def _device_ids(node: Node, kit: Kit, pod: str) -> list[str]:
    allocation = node.kubelet.allocation(node.namespace, pod)
    return list(allocation.container("c0").device_ids(kit.RESOURCE))


class PodResourcesStandIn:
    """A PodResources server on the kubelet's socket that lists ``pods`` (namespace, name, ids)."""

    def __init__(self, socket: Path, resource: str) -> None:
        self.socket = socket
        self.resource = resource
        self.pods: list[tuple[str, str, list[str]]] = []
        self.calls = 0
        stand_in = self

        class Lister(api_pb2_grpc.PodResourcesListerServicer):
            def List(
                self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
            ) -> api_pb2.ListPodResourcesResponse:
                stand_in.calls += 1
                return api_pb2.ListPodResourcesResponse(
                    pod_resources=[
                        api_pb2.PodResources(
                            name=name,
                            namespace=namespace,
                            containers=[
                                api_pb2.ContainerResources(
                                    name="c0",
                                    devices=[
                                        api_pb2.ContainerDevices(
                                            resource_name=stand_in.resource, device_ids=ids
                                        )
                                    ],
                                )
                            ],
                        )
                        for namespace, name, ids in list(stand_in.pods)
                    ]
                )

        socket.parent.mkdir(parents=True, exist_ok=True)
        socket.unlink(missing_ok=True)
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(Lister(), self._server)
        self._server.add_insecure_port(f"unix://{socket}")
        self._server.start()

    def stop(self) -> None:
        self._server.stop(grace=None).wait()
        self.socket.unlink(missing_ok=True)


@pytest.fixture
def prompt(node: Node, kit: Kit) -> Node:
    """The node with its plugin serving, the periodic pass an hour away, the pod watch open."""
    node.start_plugin(reconcile_interval=HOUR)
    kit.wait_for(lambda: node.capacity() == (28, 28), what="capacity 28 (4 chips x 7)")
    kit.wait_for(node.plugin.pod_watch.watching.is_set, what="the pod watch open")
    return node


def test_a_deleted_pods_vnpus_leave_the_chip_and_the_ledger_through_the_watch(
    prompt: Node, kit: Kit
) -> None:
    node = prompt
    node.api.place("gone", [[_grant(kit, 2, "vir02"), _grant(kit, 2, "vir01")]])
    kit.wait_for(lambda: node.running("gone"), what="gone running")
    assert len(node.vnpus()) == 2
    assert len(node.ledger()) == 2
    node.api.delete_pod("gone")
    # The periodic pass is an hour away: only the watch can have reclaimed them.
    kit.wait_for(lambda: node.vnpus() == [] and node.ledger() == [], what="reclaim")
    assert _by_trigger(node, "watch") == 2
    assert _sample(node, "vnpu_device_plugin_vnpus_reclaimed_total", reason="owner_gone") == 2


def test_a_finished_pods_vnpu_is_reclaimed_by_the_watch(prompt: Node, kit: Kit) -> None:
    node = prompt
    node.api.place("job", [[_grant(kit, 1, "vir04")]])
    kit.wait_for(lambda: node.running("job"), what="job running")
    node.kubelet.complete_pod(node.namespace, "job")
    kit.wait_for(lambda: node.vnpus() == [] and node.ledger() == [], what="reclaimed")
    assert _sample(node, "vnpu_device_plugin_vnpus_reclaimed_total", reason="owner_finished") == 1
    assert _by_trigger(node, "watch") == 1


def test_a_pod_kubelet_still_lists_keeps_its_vnpu_until_kubelet_lets_go(
    prompt: Node, kit: Kit
) -> None:
    node = prompt
    node.api.place("forced", [[_grant(kit, 0, "vir01")]])
    kit.wait_for(lambda: node.running("forced"), what="forced running")
    ids = _device_ids(node, kit, "forced")
    node.kubelet.stop()  # from here on the stand-in answers PodResources
    node.kubelet = None
    stand_in = PodResourcesStandIn(node.pod_resources, kit.RESOURCE)
    try:
        stand_in.pods = [(node.namespace, "forced", ids)]  # its container still runs
        node.api.delete_pod("forced", force=True)  # gone from the API at once
        kit.wait_for(lambda: stand_in.calls >= 3, what="the watch asking kubelet, more than once")
        assert [v[0] for v in node.vnpus()] == [0]
        assert [r["pod"] for r in node.ledger()] == ["forced"]
        stand_in.pods = []  # kubelet has stopped the containers
        kit.wait_for(
            lambda: node.vnpus() == [] and node.ledger() == [], timeout=8.0, what="reclaimed"
        )
        assert _by_trigger(node, "watch") == 1
    finally:
        stand_in.stop()


def test_without_pod_resources_a_gone_pods_vnpu_is_kept_and_tried_again(
    prompt: Node, kit: Kit
) -> None:
    node = prompt
    node.api.place("doubt", [[_grant(kit, 3, "vir02")]])
    kit.wait_for(lambda: node.running("doubt"), what="doubt running")
    node.kubelet.stop()  # kubelet gone: PodResources does not answer
    node.kubelet = None
    node.api.delete_pod("doubt", force=True)  # no kubelet to confirm: gone at once
    time.sleep(1.0)
    assert [v[0] for v in node.vnpus()] == [3]  # nothing proves its containers stopped
    stand_in = PodResourcesStandIn(node.pod_resources, kit.RESOURCE)  # kubelet answers again
    try:
        kit.wait_for(
            lambda: node.vnpus() == [] and node.ledger() == [], timeout=8.0, what="reclaimed"
        )
    finally:
        stand_in.stop()


def test_a_pod_created_again_with_the_same_name_is_another_owner(node: Node, kit: Kit) -> None:
    node.start_plugin(reconcile_interval=HOUR, pod_watch=False)  # only the pass decides here
    kit.wait_for(lambda: node.capacity() == (28, 28))
    node.api.place("web", [[_grant(kit, 0, "vir01")]])
    kit.wait_for(lambda: node.running("web"), what="the first web running")
    (old,) = node.vnpus()
    node.api.delete_pod("web")
    kit.wait_for(lambda: node.kubelet.allocation(node.namespace, "web") is None, what="freed")
    kit.wait_for(lambda: node.api.gone("web"), what="the first web gone from the API")
    node.api.place("web", [[_grant(kit, 0, "vir02")]])  # same name, a new UID, same chip
    kit.wait_for(lambda: node.running("web"), what="the second web running")
    assert len(node.vnpus()) == 2
    # kubelet lists "web" with the new pod's devices: the old pod's vNPU is not kept for it
    report = node.plugin.reconciler.run_once()
    assert report.reclaimed == [(0, old[1], "owner_gone")]
    assert [v[2] for v in node.vnpus()] == ["vir02"]
    assert [r["pod_uid"] for r in node.ledger()] == [node.api.pod("web")["metadata"]["uid"]]


def test_allocate_on_a_chip_full_of_a_gone_pods_vnpus_reclaims_them_first(
    node: Node, kit: Kit
) -> None:
    node.start_plugin(reconcile_interval=HOUR, pod_watch=False)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    node.api.place("old", [[_grant(kit, 1, "vir01") for _ in range(7)]])  # every vNPU slot
    kit.wait_for(lambda: node.running("old"), what="old running")
    node.api.delete_pod("old")
    kit.wait_for(lambda: node.kubelet.allocation(node.namespace, "old") is None, what="freed")
    kit.wait_for(lambda: node.api.gone("old"), what="old gone from the API")
    assert len(node.vnpus()) == 7  # nothing reclaims yet
    node.api.place("new", [[_grant(kit, 1, "vir04")]])
    kit.wait_for(lambda: node.running("new"), what="new served on the reclaimed chip")
    assert [v[0::2] for v in node.vnpus()] == [(1, "vir04")]
    assert [r["pod"] for r in node.ledger()] == ["new"]
    assert _by_trigger(node, "allocate") == 7


def test_a_whole_chip_is_handed_out_only_after_a_gone_pods_vnpus_left_it(
    node: Node, kit: Kit
) -> None:
    node.start_plugin(reconcile_interval=HOUR, pod_watch=False)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    node.api.place("old", [[_grant(kit, 2, "vir02"), _grant(kit, 2, "vir04")]])
    kit.wait_for(lambda: node.running("old"), what="old running")
    node.api.delete_pod("old")
    kit.wait_for(lambda: node.kubelet.allocation(node.namespace, "old") is None, what="freed")
    kit.wait_for(lambda: node.api.gone("old"), what="old gone from the API")
    node.api.place("whole", [[_grant(kit, 2, None)]])
    kit.wait_for(lambda: node.running("whole"), what="whole running")
    assert node.env("whole", "c0") == {"ASCEND_VISIBLE_DEVICES": "2"}
    assert node.vnpus() == []
    assert node.ledger() == []
    assert _by_trigger(node, "allocate") == 2


def test_a_live_pods_vnpus_are_never_taken_and_the_refusal_names_the_budget(
    node: Node, kit: Kit
) -> None:
    node.start_plugin(reconcile_interval=HOUR)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    node.api.place("full", [[_grant(kit, 0, "vir01") for _ in range(7)]])
    kit.wait_for(lambda: node.running("full"), what="full running")
    node.api.place("late", [[_grant(kit, 0, "vir01")]])  # a scheduler's stale view
    kit.wait_for(lambda: node.api.phase("late") == "Failed", what="late refused")
    assert any("chip has 0 of 7 free" in m for m in node.api.events("late"))
    assert len(node.vnpus()) == 7
    assert {r["pod"] for r in node.ledger()} == {"full"}
    assert _by_trigger(node, "allocate") == 0


def test_a_held_vnpu_of_a_finished_pod_waits_until_released(prompt: Node, kit: Kit) -> None:
    node = prompt
    node.api.place("held", [[_grant(kit, 3, "vir01")]])
    kit.wait_for(lambda: node.running("held"), what="held running")
    (vnpu,) = node.vnpus()
    control.set_vnpu_load(node.sim_dir, vnpu[1], in_use=True)  # a process still holds it
    node.kubelet.complete_pod(node.namespace, "held")
    kit.wait_for(lambda: node.api.phase("held") == "Succeeded", what="the kubelet's status write")
    time.sleep(0.5)
    assert node.vnpus() == [vnpu]
    control.set_vnpu_load(node.sim_dir, vnpu[1], in_use=False)
    kit.wait_for(lambda: node.vnpus() == [], timeout=8.0, what="reclaimed once released")


def test_a_broken_watch_is_logged_once_and_restored_with_backoff(
    node: Node, kit: Kit, capsys: pytest.CaptureFixture[str]
) -> None:
    proxy = node.through_proxy()
    proxy.inject("GET", r"watch=true", 500, times=3)
    # Then too old: the watch opens and ends with an ERROR event, code 410: list again.
    proxy.inject("GET", r"watch=true", 410, times=1)
    node.start_plugin(reconcile_interval=HOUR)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    restarts = "vnpu_device_plugin_pod_watch_restarts_total"

    def restored() -> bool:
        """A watch relayed (past the faults) and open: the one after the expiry."""
        relayed = any("watch=true" in p and status == 200 for _, p, status in proxy.requests)
        return relayed and node.plugin.pod_watch.watching.is_set()

    kit.wait_for(restored, timeout=10.0, what="the watch restored after it expired")
    assert _sample(node, restarts, reason="error") == 3
    assert _sample(node, restarts, reason="expired") == 1
    logged = capsys.readouterr().out
    assert logged.count("pod_watch_broken") == 1
    assert logged.count("pod_watch_restored") == 1
    node.api.place("after", [[_grant(kit, 1, "vir02")]])
    kit.wait_for(lambda: node.running("after"), what="after running")
    node.api.delete_pod("after")
    kit.wait_for(lambda: node.vnpus() == [], what="reclaimed through the new watch")
    # The counter follows the chip's destroy by a moment.
    kit.wait_for(lambda: _by_trigger(node, "watch") == 1, what="the reclaim counted")
    assert _by_trigger(node, "periodic") == _by_trigger(node, "allocate") == 0


def test_a_watch_from_a_revision_the_api_no_longer_keeps_lists_again(
    root: Path, kube_plane: Any, kit: Kit
) -> None:
    """A plane of its own, without a watch cache (which would still hold the revision): once
    etcd is compacted past the revision, a watch from it ends in an ERROR event, code 410.
    ``kube_plane`` is asked for only so that the test skips, like the others, when the
    binaries are not built."""
    sim = kit.write_node(root / "sim")
    with apiplane.serve(root / "plane", api_args=("--watch-cache=false",)) as plane:
        kubeconfig = plane.write_kubeconfig(root / "kubeconfig", "default")
        api = cluster.KubeCluster.connect(kubeconfig)
        tests = kit.Cluster(kubeconfig, "default", sim)
        _pods, revision = api.list_pods_and_revision(kit.NODE)
        for number in range(4):  # 8 writes after the revision above
            tests.create_pod(f"p{number}", [("c0", 0)])
            tests.bind(f"p{number}", {})
        assert plane.compact() > int(revision)  # the API no longer keeps the revision
        stats = metrics.Metrics()
        npu = sim_backend.SimBackend(sim)
        book = ledger.Ledger(root / "state")
        vnpus = lifecycle.Lifecycle(npu, book, stats, crashpoints.CrashPoints(""))
        reclaimer = reclaim.Reclaimer(
            npu,
            book,
            vnpus,
            api,
            stats,
            node=kit.NODE,
            kubelet=lambda: None,
            handouts=podresources.Handouts(),
        )
        resyncs: list[float] = []
        watch = podwatch.PodWatch(
            api,
            kit.NODE,
            reclaimer,
            stats,
            lock=threading.Lock(),
            resync=lambda: resyncs.append(time.monotonic()),
            give_up=60.0,
        )
        watch.start(revision)
        try:
            kit.wait_for(lambda: resyncs and watch.watching.is_set(), what="listed and watching")
            restarts = "vnpu_device_plugin_pod_watch_restarts_total"
            assert stats.registry.get_sample_value(restarts, {"reason": "expired"}) == 1
            assert stats.registry.get_sample_value(restarts, {"reason": "error"}) == 0
            assert len(resyncs) == 1  # one full pass asked for, for what was missed
        finally:
            watch.stop()
            tests.close()
            api.close()


# The churn: pods deleted (or finished) and new pods needing the same room placed at once,
# round after round, as a scheduler that counts room free the moment a pod leaves the API.
# Each layout is (name, chip, template or None for the whole chip); consecutive layouts
# reuse the same chips with other templates, so every new vNPU needs the old ones gone.
LAYOUTS: tuple[tuple[tuple[int, str | None], ...], ...] = (
    ((0, "vir01"),) * 7 + ((1, None),),
    ((0, None),) + ((1, "vir02"),) * 3,
    ((0, "vir04"), (0, "vir02")) + ((1, "vir01"),) * 7,
)
ROUNDS = 6


def _place_like_a_scheduler(
    node: Node, kit: Kit, name: str, chip: int, template: str | None
) -> None:
    """Lock the node for the pod, bind it, and wait until the plugin has released the lock."""
    lock = node.api.lock((node.namespace, name))
    node.api.create_pod(name, [("c0", 1)])
    node.api.bind(name, node.api.decision([[_grant(kit, chip, template)]]))
    kit.wait_for(
        lambda: node.api.node_annotations().get(protocol.NODE_LOCK_KEY) != lock,
        what=f"the plugin done with {name}",
    )


@pytest.mark.parametrize("watch", [True, False], ids=["watch", "allocate-only"])
def test_churn_deleting_pods_and_filling_their_room_at_once_never_fails(
    node: Node, kit: Kit, watch: bool
) -> None:
    node.start_plugin(reconcile_interval=HOUR, pod_watch=watch)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    if watch:
        kit.wait_for(node.plugin.pod_watch.watching.is_set, what="the pod watch open")
    live: list[str] = []
    failures: list[str] = []
    for round_number in range(ROUNDS):
        for index, name in enumerate(live):
            if index == 0:
                node.kubelet.complete_pod(node.namespace, name)  # one finishes, the rest go
            else:
                node.api.delete_pod(name)
        # The scheduler counts their room free once the API says so: the finished pod
        # Succeeded, the deleted ones gone (once the kubelet confirmed).
        if live:
            first = live[0]
            kit.wait_for(lambda p=first: node.api.phase(p) == "Succeeded", what=f"{first} done")
        for name in live[1:]:
            kit.wait_for(lambda n=name: node.api.gone(n), what=f"{name} gone from the API")
        layout = LAYOUTS[round_number % len(LAYOUTS)]
        live = [f"r{round_number}-p{i}" for i in range(len(layout))]
        for name, (chip, template) in zip(live, layout, strict=True):
            _place_like_a_scheduler(node, kit, name, chip, template)
        for name in live:
            phase = kit.wait_for(
                lambda n=name: node.api.phase(n) in ("Running", "Failed") and node.api.phase(n),
                what=f"{name} admitted",
            )
            if phase != "Running":
                failures.append(f"{name}: {node.api.events(name)}")
        expected = sorted((chip, t) for chip, t in layout if t is not None)
        assert sorted(v[0::2] for v in node.vnpus()) == expected, f"round {round_number}"
        owners = [n for n, (_chip, t) in zip(live, layout, strict=True) if t is not None]
        uids = {node.api.pod(n)["metadata"]["uid"] for n in owners}
        assert {r["pod_uid"] for r in node.ledger()} == uids, f"round {round_number}"
    assert failures == []
    assert _by_trigger(node, "periodic") == 0  # nothing waited for the periodic pass
    if not watch:
        assert _by_trigger(node, "allocate") > 0
