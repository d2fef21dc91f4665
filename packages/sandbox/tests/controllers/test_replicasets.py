"""The replicaset controller against the API emulator: pods created, replaced, deleted in the
real order, adopted and released, and the status kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s

from vnpu_sandbox.controllers import manager

Json = dict[str, Any]


def test_pods_are_created_with_generate_name_and_a_controller_reference(
    controllers: manager.ControllerManager,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    replica_set: Callable[..., Json],
    pods: Callable[..., list[Any]],
    wait: Callable[..., Any],
) -> None:
    created = apps.create_namespaced_replica_set("default", replica_set("web", 3))
    found = wait(lambda: len(pods(core, "app=web")) == 3 and pods(core, "app=web"))
    for pod in found:
        assert pod.metadata.name.startswith("web-")
        assert len(pod.metadata.name) == len("web-") + 5
        assert pod.metadata.generate_name == "web-"
        (ref,) = pod.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid) == ("ReplicaSet", "web", created.metadata.uid)
        assert ref.controller is True
        assert ref.block_owner_deletion is True
        assert pod.spec.containers[0].image == "nginx:1.25"
        assert pod.spec.enable_service_links is True  # pod defaults, filled on create
    status = wait(lambda: apps.read_namespaced_replica_set("web", "default").status)
    wait(lambda: apps.read_namespaced_replica_set("web", "default").status.replicas == 3)
    assert status is not None
    events = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=web,reason=SuccessfulCreate"
    ).items
    assert len(events) == 3
    assert events[0].source.component == "replicaset-controller"
    assert events[0].message.startswith("Created pod: web-")


def test_status_counts_ready_and_available_pods(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    replica_set: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_replica_set("default", replica_set("ready", 2))

    def settled() -> Any:
        status = apps.read_namespaced_replica_set("ready", "default").status
        return status.ready_replicas == 2 and status.available_replicas == 2 and status

    status = wait(settled)
    assert status.replicas == 2
    assert status.fully_labeled_replicas == 2
    assert status.observed_generation == 1


def test_deleted_and_finished_pods_are_replaced(
    controllers: manager.ControllerManager,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    replica_set: Callable[..., Json],
    pods: Callable[..., list[Any]],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_replica_set("default", replica_set("keep", 2))
    first = wait(lambda: len(pods(core, "app=keep")) == 2 and pods(core, "app=keep"))
    core.delete_namespaced_pod(first[0].metadata.name, "default")
    core.patch_namespaced_pod_status(
        first[1].metadata.name, "default", {"status": {"phase": "Failed"}}
    )

    def replaced() -> list[Any]:
        live = [p for p in pods(core, "app=keep") if p.status.phase != "Failed"]
        return len(live) == 2 and live

    live = wait(replaced)
    assert first[0].metadata.name not in {p.metadata.name for p in live}
    assert first[1].metadata.name not in {p.metadata.name for p in live}
    # The failed pod stays (the pod garbage collector of a real cluster removes it much later).
    assert len(pods(core, "app=keep")) == 3


def test_scale_down_deletes_in_the_real_order(
    controllers: manager.ControllerManager,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    replica_set: Callable[..., Json],
    pods: Callable[..., list[Any]],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_replica_set("default", replica_set("order", 5))
    made = wait(lambda: len(pods(core, "app=order")) == 5 and pods(core, "app=order"))
    by_age = sorted(made, key=lambda p: p.metadata.name)
    unassigned, pending, running_unready, ready_old, ready_new = by_age

    def bind(pod: Any) -> None:
        core.create_namespaced_pod_binding(
            pod.metadata.name,
            "default",
            {"metadata": {"name": pod.metadata.name}, "target": {"kind": "Node", "name": "n"}},
            _preload_content=False,
        )

    def status(pod: Any, body: Json) -> None:
        core.patch_namespaced_pod_status(pod.metadata.name, "default", {"status": body})

    for pod in (pending, running_unready, ready_old, ready_new):
        bind(pod)
    status(running_unready, {"phase": "Running"})
    status(
        ready_old,
        {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-01T00:00:00Z"}
            ],
        },
    )
    status(
        ready_new,
        {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2024-06-01T00:00:00Z"}
            ],
        },
    )
    expected_order = [unassigned, pending, running_unready, ready_new, ready_old]
    for keep in (4, 3, 2, 1, 0):
        apps.patch_namespaced_replica_set_scale("order", "default", {"spec": {"replicas": keep}})

        def left(count: int = keep) -> list[str]:
            names = sorted(
                p.metadata.name
                for p in pods(core, "app=order")
                if p.metadata.deletion_timestamp is None
            )
            return len(names) == count and names  # type: ignore[return-value]

        if keep:
            assert wait(left) == sorted(p.metadata.name for p in expected_order[5 - keep :])
        else:
            wait(lambda: all(p.metadata.deletion_timestamp for p in pods(core, "app=order")))


def test_orphans_are_adopted_and_mismatched_pods_released(
    controllers: manager.ControllerManager,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    replica_set: Callable[..., Json],
    pods: Callable[..., list[Any]],
    wait: Callable[..., Any],
) -> None:
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "stray", "labels": {"app": "adopt"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]},
        },
    )
    owner = apps.create_namespaced_replica_set("default", replica_set("adopt", 2))

    def adopted() -> Any:
        pod = core.read_namespaced_pod("stray", "default")
        refs = pod.metadata.owner_references or []
        return refs and refs[0].uid == owner.metadata.uid

    wait(adopted)
    wait(lambda: len(pods(core, "app=adopt")) == 2)  # the orphan counts: one more pod only
    core.patch_namespaced_pod("stray", "default", {"metadata": {"labels": {"app": "other"}}})
    wait(lambda: not core.read_namespaced_pod("stray", "default").metadata.owner_references)
    wait(lambda: len(pods(core, "app=adopt")) == 2)  # and it is replaced


def test_a_replica_set_being_deleted_gets_no_new_pods(
    controllers: manager.ControllerManager,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    replica_set: Callable[..., Json],
    pods: Callable[..., list[Any]],
    wait: Callable[..., Any],
) -> None:
    body = replica_set("stopping", 2)
    body["metadata"]["finalizers"] = ["example.com/hold"]
    apps.create_namespaced_replica_set("default", body)
    made = wait(lambda: len(pods(core, "app=stopping")) == 2 and pods(core, "app=stopping"))
    apps.delete_namespaced_replica_set("stopping", "default", propagation_policy="Orphan")
    wait(
        lambda: (
            not core.read_namespaced_pod(made[0].metadata.name, "default").metadata.owner_references
        )
    )
    core.delete_namespaced_pod(made[0].metadata.name, "default")
    controllers.queue.add(("replicaset", "default", "stopping"))
    wait(lambda: len(controllers.queue) == 0)
    assert [p.metadata.name for p in pods(core, "app=stopping")] == [made[1].metadata.name]
