"""The deployment controller against the API emulator: the ReplicaSet per template, status and
conditions, rolling updates within maxSurge/maxUnavailable, Recreate, scaling and history."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from vnpu_sandbox.controllers import manager, rollout

Json = dict[str, Any]


def _complete(apps: k8s.AppsV1Api, name: str, replicas: int) -> Callable[[], Any]:
    def check() -> Any:
        found = apps.read_namespaced_deployment(name, "default")
        status = found.status
        done = (
            status.observed_generation == found.metadata.generation
            and status.updated_replicas == replicas
            and status.replicas == replicas
            and status.available_replicas == replicas
            and status.ready_replicas == replicas
        )
        return done and found

    return check


def _replica_sets(apps: k8s.AppsV1Api, name: str) -> list[Any]:
    return sorted(
        apps.list_namespaced_replica_set("default", label_selector=f"app={name}").items,
        key=lambda rs: int(rs.metadata.annotations[rollout.REVISION]),
    )


def test_a_deployment_gets_one_replica_set_and_reports_ready(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    created = apps.create_namespaced_deployment("default", deployment("web", 3))
    done = wait(_complete(apps, "web", 3))
    (replica_set,) = _replica_sets(apps, "web")
    template_hash = replica_set.metadata.labels["pod-template-hash"]
    assert replica_set.metadata.name == f"web-{template_hash}"
    assert len(template_hash) <= 10
    assert set(template_hash) <= set("bcdfghjklmnpqrstvwxz2456789")
    assert replica_set.spec.selector.match_labels == {
        "app": "web",
        "pod-template-hash": template_hash,
    }
    assert replica_set.spec.template.metadata.labels["pod-template-hash"] == template_hash
    (ref,) = replica_set.metadata.owner_references
    assert (ref.kind, ref.uid, ref.controller) == ("Deployment", created.metadata.uid, True)
    assert replica_set.metadata.annotations[rollout.REVISION] == "1"
    assert replica_set.metadata.annotations[rollout.DESIRED_REPLICAS] == "3"
    assert replica_set.metadata.annotations[rollout.MAX_REPLICAS] == "4"  # 3 + 25% up
    assert done.metadata.annotations[rollout.REVISION] == "1"
    conditions = {c.type: c for c in done.status.conditions}
    assert conditions["Available"].status == "True"
    assert conditions["Available"].reason == "MinimumReplicasAvailable"
    assert conditions["Progressing"].reason == "NewReplicaSetAvailable"
    assert conditions["Progressing"].message == (
        f'ReplicaSet "{replica_set.metadata.name}" has successfully progressed.'
    )
    pods = core.list_namespaced_pod("default", label_selector="app=web").items
    assert all(p.metadata.name.startswith(f"{replica_set.metadata.name}-") for p in pods)
    events = core.list_namespaced_event(
        "default", field_selector="involvedObject.kind=Deployment,involvedObject.name=web"
    ).items
    assert [e.message for e in events] == [
        f"Scaled up replica set {replica_set.metadata.name} to 3"
    ]


def test_scaling_through_the_scale_subresource(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment("default", deployment("scaled", 2))
    wait(_complete(apps, "scaled", 2))
    apps.patch_namespaced_deployment_scale("scaled", "default", {"spec": {"replicas": 5}})
    wait(_complete(apps, "scaled", 5))
    apps.patch_namespaced_deployment_scale("scaled", "default", {"spec": {"replicas": 1}})
    wait(_complete(apps, "scaled", 1))
    (replica_set,) = _replica_sets(apps, "scaled")
    assert replica_set.spec.replicas == 1
    wait(lambda: len(core.list_namespaced_pod("default", label_selector="app=scaled").items) == 1)


def test_rolling_update_stays_within_surge_and_unavailability(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}
    apps.create_namespaced_deployment("default", deployment("roll", 4, strategy=strategy))
    wait(_complete(apps, "roll", 4))
    totals: list[int] = []
    listed = apps.list_namespaced_replica_set("default", label_selector="app=roll")
    replicas = {rs.metadata.name: rs.spec.replicas for rs in listed.items}
    stop = threading.Event()

    def record() -> None:
        version = listed.metadata.resource_version
        while not stop.is_set():
            for event in k8s_watch.Watch().stream(
                apps.list_namespaced_replica_set,
                "default",
                label_selector="app=roll",
                resource_version=version,
                timeout_seconds=1,
            ):
                version = event["object"].metadata.resource_version
                replicas[event["object"].metadata.name] = event["object"].spec.replicas
                totals.append(sum(replicas.values()))

    watcher = threading.Thread(target=record, daemon=True)
    watcher.start()
    apps.patch_namespaced_deployment(
        "roll",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:1.26"}]}}}},
    )
    done = wait(_complete(apps, "roll", 4), timeout=8)
    stop.set()
    watcher.join(3)
    old, new = _replica_sets(apps, "roll")
    assert (old.spec.replicas, new.spec.replicas) == (0, 4)
    assert new.metadata.annotations[rollout.REVISION] == "2"
    assert done.metadata.annotations[rollout.REVISION] == "2"
    assert new.spec.template.spec.containers[0].image == "nginx:1.26"
    assert totals, "no ReplicaSet change was seen"
    assert max(totals) <= 4 + 1  # maxSurge
    # Each step took away at most what maxUnavailable allows: 4 - 1 = 3 stay counted.
    assert min(totals) >= 3


def test_a_rollout_whose_pods_never_get_ready_stops_at_the_limits(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}
    apps.create_namespaced_deployment("default", deployment("stuck", 4, strategy=strategy))
    wait(_complete(apps, "stuck", 4))
    kubelet.hold = True
    apps.patch_namespaced_deployment(
        "stuck",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "bad:1"}]}}}},
    )

    def stalled() -> Any:
        sets = _replica_sets(apps, "stuck")
        shape = [(rs.spec.replicas, rs.status.replicas) for rs in sets]
        found = apps.read_namespaced_deployment("stuck", "default")
        reported = (found.status.updated_replicas, found.status.available_replicas)
        return shape == [(3, 3), (2, 2)] and reported == (2, 3) and found

    # 4 + maxSurge 1 = 5 pods at most; 4 - maxUnavailable 1 = 3 available at least.
    found = wait(stalled)
    time.sleep(0.3)  # and it stays there
    assert [rs.spec.replicas for rs in _replica_sets(apps, "stuck")] == [3, 2]
    assert found.status.unavailable_replicas == 2
    conditions = {c.type: c for c in found.status.conditions}
    assert conditions["Available"].status == "True"
    assert conditions["Progressing"].reason == "ReplicaSetUpdated"
    kubelet.hold = False
    wait(_complete(apps, "stuck", 4))
    assert [rs.spec.replicas for rs in _replica_sets(apps, "stuck")] == [0, 4]


def test_recreate_scales_old_pods_away_before_new_ones_start(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    core: k8s.CoreV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment(
        "default", deployment("recreate", 2, strategy={"type": "Recreate"})
    )
    wait(_complete(apps, "recreate", 2))
    (first,) = _replica_sets(apps, "recreate")
    kubelet.hold = True  # new pods will not become ready: the old ones must be gone anyway
    overlap: list[tuple[str, str]] = []

    def look() -> Any:
        images = {
            p.spec.containers[0].image
            for p in core.list_namespaced_pod("default", label_selector="app=recreate").items
        }
        if len(images) > 1:
            overlap.append(tuple(sorted(images)))  # type: ignore[arg-type]
        return (
            images == {"nginx:2"}
            and len(core.list_namespaced_pod("default", label_selector="app=recreate").items) == 2
        )

    apps.patch_namespaced_deployment(
        "recreate",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "nginx:2"}]}}}},
    )
    wait(look)
    assert overlap == []
    first_now, second = _replica_sets(apps, "recreate")
    assert first_now.metadata.uid == first.metadata.uid
    assert first_now.spec.replicas == 0
    assert second.spec.replicas == 2


def test_rolling_back_reuses_the_old_replica_set_with_a_new_revision(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment("default", deployment("back", 1, image="app:1"))
    wait(_complete(apps, "back", 1))
    for image in ("app:2", "app:1"):
        apps.patch_namespaced_deployment(
            "back",
            "default",
            {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}}},
        )
        wait(_complete(apps, "back", 1))
    sets = _replica_sets(apps, "back")
    assert len(sets) == 2
    assert [rs.spec.template.spec.containers[0].image for rs in sets] == ["app:2", "app:1"]
    assert sets[-1].metadata.annotations[rollout.REVISION] == "3"
    assert sets[-1].spec.replicas == 1


def test_history_beyond_the_limit_is_deleted(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment(
        "default", deployment("history", 1, image="app:0", revisionHistoryLimit=1)
    )
    wait(_complete(apps, "history", 1))
    for number in (1, 2, 3):
        apps.patch_namespaced_deployment(
            "history",
            "default",
            {
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "main", "image": f"app:{number}"}]}
                    }
                }
            },
        )
        wait(_complete(apps, "history", 1))
    sets = wait(lambda: len(_replica_sets(apps, "history")) == 2 and _replica_sets(apps, "history"))
    assert [rs.metadata.annotations[rollout.REVISION] for rs in sets] == ["3", "4"]


def test_a_paused_deployment_does_not_roll_out(
    controllers: manager.ControllerManager,
    kubelet: Any,
    apps: k8s.AppsV1Api,
    deployment: Callable[..., Json],
    wait: Callable[..., Any],
) -> None:
    apps.create_namespaced_deployment("default", deployment("paused", 1))
    wait(_complete(apps, "paused", 1))
    apps.patch_namespaced_deployment(
        "paused",
        "default",
        {
            "spec": {
                "paused": True,
                "template": {"spec": {"containers": [{"name": "main", "image": "nginx:9"}]}},
            }
        },
    )
    wait(
        lambda: apps.read_namespaced_deployment("paused", "default").status.observed_generation == 2
    )
    assert len(_replica_sets(apps, "paused")) == 1
    apps.patch_namespaced_deployment("paused", "default", {"spec": {"paused": False}})
    wait(_complete(apps, "paused", 1))
    assert len(_replica_sets(apps, "paused")) == 2
