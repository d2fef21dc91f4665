"""The reconciler: driver vNPUs, the ownership ledger and the pods in the API kept in agreement.

Passes are run by hand (``reconciler.run_once``) so each test controls when one happens;
the plugin runs without its pod watch here, which would otherwise reclaim first (the watch
is tested in test_prompt_reclaim.py).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest

from vnpu_device_plugin import ledger, podresources, reclaim, reconciler
from vnpu_npu.sim import control

Node = Any
Kit = Any


def _run(node: Node, kit: Kit, name: str, grants: Any, **extra: Any) -> int:
    node.api.place(name, grants, **extra)
    kit.wait_for(lambda: node.running(name), what=f"{name} running")
    return int(
        node.env(name, extra.get("containers", [("c0", 1)])[-1][0])["ASCEND_VISIBLE_DEVICES"]
    )


@pytest.fixture
def running(node: Node, kit: Kit) -> Node:
    """The node with its plugin started and registered, without the pod watch."""
    node.start_plugin(pod_watch=False)
    kit.wait_for(lambda: node.capacity() == (28, 28), what="capacity 28 (4 chips x 7)")
    return node


def _reclaimed(node: Node, reason: str) -> float:
    value = node.plugin.stats.registry.get_sample_value(
        "vnpu_device_plugin_vnpus_reclaimed_total", {"reason": reason}
    )
    return float(value or 0.0)


def test_a_finished_pods_vnpu_is_reclaimed(running: Node, kit: Kit) -> None:
    node = running
    vnpu = _run(node, kit, "done", [[kit.Grant(1, "vir02", 6144)]])
    assert node.plugin.reconciler.run_once().reclaimed == []  # still running: kept
    node.kubelet.complete_pod(node.namespace, "done")
    kit.wait_for(lambda: node.api.phase("done") == "Succeeded")
    report = node.plugin.reconciler.run_once()
    assert report.reclaimed == [(1, vnpu, "owner_finished")]
    assert node.vnpus() == []
    assert node.ledger() == []
    assert _reclaimed(node, "owner_finished") == 1


def test_a_deleted_pods_vnpu_is_reclaimed(running: Node, kit: Kit) -> None:
    node = running
    vnpu = _run(node, kit, "gone", [[kit.Grant(3, "vir04", 12288)]])
    node.api.delete_pod("gone")
    kit.wait_for(lambda: node.kubelet.allocation(node.namespace, "gone") is None, what="freed")
    kit.wait_for(lambda: node.api.gone("gone"), what="the kubelet's confirmation of the delete")
    assert node.plugin.reconciler.run_once().reclaimed == [(3, vnpu, "owner_gone")]


def test_a_pod_kubelet_still_runs_keeps_its_vnpu_after_leaving_the_api(
    running: Node, kit: Kit
) -> None:
    node = running
    vnpu = _run(node, kit, "forced", [[kit.Grant(0, "vir01", 3072)]])
    plugin = node.plugin
    ids = node.kubelet.allocation(node.namespace, "forced").container("c0").device_ids(kit.RESOURCE)
    kubelet_lists = {(node.namespace, "forced"): frozenset(ids)}  # what PodResources would answer
    reclaimer = reclaim.Reclaimer(
        plugin.npu,
        plugin.ledger,
        plugin.vnpus,
        plugin.api,
        plugin.stats,
        node=kit.NODE,
        kubelet=lambda: podresources.Listing(dict(kubelet_lists)),
        handouts=plugin.reclaimer.handouts,
    )
    view = reconciler.Reconciler(
        plugin.npu,
        plugin.inventory,
        plugin.ledger,
        reclaimer,
        plugin.api,
        plugin.stats,
        lock=threading.Lock(),
        grace=300,
        interval=60,
        paths=None,
    )
    node.kubelet.stop()  # the kubelet no longer frees anything
    node.kubelet = None
    node.api.delete_pod("forced", force=True)  # gone from the API at once, as with --force
    assert "forced" not in [p["metadata"]["name"] for p in plugin.api.list_pods(kit.NODE)]
    assert view.run_once().reclaimed == []  # kubelet still lists the pod: kept
    assert len(node.vnpus()) == 1
    kubelet_lists.clear()  # kubelet has stopped the containers
    assert view.run_once().reclaimed == [(0, vnpu, "owner_gone")]


def test_a_vnpu_a_container_still_holds_is_kept_until_released(running: Node, kit: Kit) -> None:
    node = running
    vnpu = _run(node, kit, "held", [[kit.Grant(2, "vir02", 6144)]])
    control.set_vnpu_load(node.sim_dir, vnpu, in_use=True)
    node.kubelet.complete_pod(node.namespace, "held")
    kit.wait_for(lambda: node.api.phase("held") == "Succeeded", what="the kubelet's status write")
    report = node.plugin.reconciler.run_once()
    assert report.reclaimed == []
    assert report.kept_in_use == [(2, vnpu)]
    control.set_vnpu_load(node.sim_dir, vnpu, in_use=False)
    assert node.plugin.reconciler.run_once().reclaimed == [(2, vnpu, "owner_finished")]


def test_an_init_containers_own_vnpu_goes_once_it_has_finished(running: Node, kit: Kit) -> None:
    node = running
    grants = [[kit.Grant(1, "vir01", 3072)], [kit.Grant(1, "vir04", 12288)]]
    app = _run(node, kit, "staged", grants, init=[("init", 1)], containers=[("app", 1)])
    init = int(node.env("staged", "init")["ASCEND_VISIBLE_DEVICES"])
    # the simulated kubelet reports init containers terminated once the pod runs
    report = node.plugin.reconciler.run_once()
    assert report.reclaimed == [(1, init, "init_finished")]
    assert [v[1] for v in node.vnpus()] == [app]
    assert [r["container"] for r in node.ledger()] == ["app"]


def test_a_vnpu_shared_by_init_and_app_stays_for_the_app(running: Node, kit: Kit) -> None:
    node = running
    grants = [[kit.Grant(1, "vir02", 6144)], [kit.Grant(1, "vir02", 6144)]]
    vnpu = _run(node, kit, "shared", grants, init=[("init", 1)], containers=[("app", 1)])
    assert node.plugin.reconciler.run_once().reclaimed == []
    assert [v[1] for v in node.vnpus()] == [vnpu]
    assert [r["container"] for r in node.ledger()] == ["app"]


def test_an_unowned_idle_vnpu_goes_after_the_grace_period_only(node: Node, kit: Kit) -> None:
    node.start_plugin(unowned_grace=0.3)
    sim = node.sim()
    stray = sim.create_vnpu(0, "vir01")
    held = sim.create_vnpu(1, "vir01")
    control.set_vnpu_load(node.sim_dir, held, in_use=True)
    assert node.plugin.reconciler.run_once().reclaimed == []  # seen unowned: the grace starts
    time.sleep(0.4)
    assert node.plugin.reconciler.run_once().reclaimed == [(0, stray, "unowned")]
    assert [v[1] for v in node.vnpus()] == [held]  # a container holds it: never destroyed


def test_runtime_mode_leaves_vnpus_on_chips_its_running_pods_use(node: Node, kit: Kit) -> None:
    node.start_plugin(vnpu_mode="runtime", unowned_grace=0.0)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    node.api.place("rt", [[kit.Grant(2, "vir02", 6144)]])
    kit.wait_for(lambda: node.running("rt"))
    sim = node.sim()
    by_runtime = sim.create_vnpu(2, "vir02")  # what ascend-docker-runtime made for the pod
    stray = sim.create_vnpu(3, "vir02")
    report = node.plugin.reconciler.run_once()
    assert report.reclaimed == [(3, stray, "unowned")]
    assert [v[1] for v in node.vnpus()] == [by_runtime]


def test_ledger_records_without_their_vnpu_are_dropped_and_intents_with_one_recovered(
    node: Node, kit: Kit
) -> None:
    sim = node.sim()
    made = sim.create_vnpu(0, "vir02", 100)
    uuid0 = node.api.uuid(0)

    def record(vnpu_id: int, state: str, pod: str) -> dict[str, Any]:
        return {
            "pod_uid": f"uid-{pod}",
            "namespace": node.namespace,
            "pod": pod,
            "container": "c0",
            "init": False,
            "chip": 0,
            "chip_uuid": uuid0,
            "vnpu_id": vnpu_id,
            "template": "vir02",
            "state": state,
            "created_at": 1.0,
        }

    node.state_dir.mkdir(parents=True)
    (node.state_dir / "ledger.json").write_text(
        json.dumps(
            {
                "format": ledger.FORMAT,
                "records": [
                    record(made, "intent", "crashed"),
                    record(101, "intent", "never-created"),
                    record(102, "owned", "destroyed-elsewhere"),
                ],
            }
        ),
        encoding="utf-8",
    )
    node.start_plugin()  # the start-up pass settles the ledger; no pod exists: reclaimed too
    assert node.ledger() == []
    assert node.vnpus() == []
    assert _reclaimed(node, "owner_gone") == 1


def test_a_restarted_plugin_keeps_the_vnpus_of_running_pods(running: Node, kit: Kit) -> None:
    node = running
    vnpu = _run(node, kit, "long", [[kit.Grant(0, "vir04", 12288)]])
    before = node.ledger()
    node.stop_plugin()
    node.start_plugin()
    assert node.ledger() == before
    assert [v[1] for v in node.vnpus()] == [vnpu]
    assert node.plugin.reconciler.run_once().reclaimed == []


def test_soft_mode_directories_of_gone_pods_are_removed(node: Node, kit: Kit) -> None:
    node.start_plugin(hami_vnpu_core=True)
    kit.wait_for(lambda: node.capacity() == (28, 28))
    node.api.place("soft", [[kit.Grant(1, None, 2048, 20)]], soft=True)
    kit.wait_for(lambda: node.running("soft"))
    uid = node.api.pod("soft")["metadata"]["uid"]
    directory = node.root / "hami-core" / "containers" / f"{uid}_c0"
    assert directory.is_dir()
    node.plugin.reconciler.run_once()
    assert directory.is_dir()
    node.api.delete_pod("soft")
    kit.wait_for(lambda: node.kubelet.allocation(node.namespace, "soft") is None)
    kit.wait_for(lambda: node.api.gone("soft"), what="the kubelet's confirmation of the delete")
    node.plugin.reconciler.run_once()
    assert not directory.exists()
