"""The garbage collector against the API emulator: background, foreground and orphan deletion of
a Deployment, dangling references, and owners of kinds it does not watch."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from vnpu_sandbox.controllers import manager

Json = dict[str, Any]


def _ready(apps: k8s.AppsV1Api, name: str, replicas: int) -> Callable[[], bool]:
    def check() -> bool:
        status = apps.read_namespaced_deployment(name, "default").status
        return status.ready_replicas == replicas and status.updated_replicas == replicas

    return check


def _gone(apps: k8s.AppsV1Api, name: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            apps.read_namespaced_deployment(name, "default")
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    return check


def test_background_deletion_takes_replica_sets_and_pods(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment("default", deployment("bg", 3))
    wait(_ready(apps, "bg", 3))
    apps.delete_namespaced_deployment("bg", "default", propagation_policy="Background")
    assert _gone(apps, "bg")()  # at once: the dependents go afterwards
    wait(lambda: not apps.list_namespaced_replica_set("default", label_selector="app=bg").items)
    wait(lambda: not core.list_namespaced_pod("default", label_selector="app=bg").items)


def test_foreground_deletion_waits_for_the_pods(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment("default", deployment("fg", 2))
    wait(_ready(apps, "fg", 2))
    kubelet.stop()  # nobody finishes Terminating pods now
    apps.delete_namespaced_deployment("fg", "default", propagation_policy="Foreground")
    wait(
        lambda: all(
            p.metadata.deletion_timestamp
            for p in core.list_namespaced_pod("default", label_selector="app=fg").items
        )
    )
    time.sleep(0.3)
    held = apps.read_namespaced_deployment("fg", "default")
    assert held.metadata.finalizers == ["foregroundDeletion"]
    (replica_set,) = apps.list_namespaced_replica_set("default", label_selector="app=fg").items
    assert replica_set.metadata.finalizers == ["foregroundDeletion"]
    for pod in core.list_namespaced_pod("default", label_selector="app=fg").items:
        core.delete_namespaced_pod(pod.metadata.name, "default", grace_period_seconds=0)
    wait(_gone(apps, "fg"))
    assert not apps.list_namespaced_replica_set("default", label_selector="app=fg").items


def test_orphan_deletion_leaves_the_replica_set_and_its_pods(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment("default", deployment("orphan", 2))
    wait(_ready(apps, "orphan", 2))
    apps.delete_namespaced_deployment("orphan", "default", propagation_policy="Orphan")
    wait(_gone(apps, "orphan"))
    (replica_set,) = apps.list_namespaced_replica_set("default", label_selector="app=orphan").items
    assert not replica_set.metadata.owner_references
    pods = core.list_namespaced_pod("default", label_selector="app=orphan").items
    assert len(pods) == 2
    assert all(p.metadata.owner_references[0].name == replica_set.metadata.name for p in pods)
    # Applied again, the Deployment adopts its old ReplicaSet instead of making another.
    created = apps.create_namespaced_deployment("default", deployment("orphan", 2))
    wait(
        lambda: (
            (
                apps.read_namespaced_replica_set(
                    replica_set.metadata.name, "default"
                ).metadata.owner_references
                or [None]
            )[0]
            is not None
        )
    )
    adopted = apps.read_namespaced_replica_set(replica_set.metadata.name, "default")
    assert adopted.metadata.owner_references[0].uid == created.metadata.uid
    wait(_ready(apps, "orphan", 2))
    assert len(apps.list_namespaced_replica_set("default", label_selector="app=orphan").items) == 1


def test_dangling_references_are_removed_or_collected(
    controllers: manager.ControllerManager,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    owner = apps.create_namespaced_deployment("default", deployment("keeper", 0))
    gone_ref = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "never-was",
        "uid": "00000000-0000-0000-0000-000000000000",
    }
    kept_ref = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "keeper",
        "uid": owner.metadata.uid,
    }
    foreign_ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "1"}

    def pod(name: str, refs: list[Json]) -> None:
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": name, "ownerReferences": refs},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            },
        )

    pod("dangling", [gone_ref])
    pod("shared", [gone_ref, kept_ref])
    pod("foreign", [foreign_ref])

    def pruned() -> bool:
        refs = core.read_namespaced_pod("shared", "default").metadata.owner_references
        return [r.uid for r in refs] == [owner.metadata.uid]

    wait(pruned)

    def collected() -> bool:
        names = {p.metadata.name for p in core.list_namespaced_pod("default").items}
        return "dangling" not in names

    wait(collected)
    assert core.read_namespaced_pod("foreign", "default").metadata.owner_references[0].kind == "Job"
