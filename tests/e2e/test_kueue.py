"""Kueue in front of vnpu: whole Jobs queued and admitted against a ClusterQueue's NPU quota.

``vnpu-sandbox up --kueue`` runs Kueue's manager (``make kueue-bin``) with its CRDs and the
webhooks of its own kinds and of batch/v1 Jobs beside vnpu's (docs/quotas.md, "vnpu quotas
and Kueue"). A ClusterQueue may hold four 910A chips of a node that has eight. Job 1 (four
pods of one chip) is admitted as one unit and its pods run on four different chips, placed by
vnpu; Job 2, the same, stays suspended with no pod while Job 1 holds the quota, though the node
has room; once Job 1 is deleted (the simulated kubelet runs pods until they are deleted), Job 2
is admitted and runs. Both webhooks act on the way: Kueue's suspends each Job at creation,
vnpu's routes each pod to vnpu-scheduler.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

CLUSTER = """\
nodes:
  - {name: train, chip: 910A, chips: 8, server: 910a-8}
"""
KUEUE = True
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]
Json = dict[str, Any]

NAMESPACE = "kueue-training"
RESOURCE = "huawei.com/Ascend910A"
FLAVOR_LABELS = {"vnpu.io/chip-model": "910A"}
"""The label the sandbox's kubelet puts on the node: the flavor's pods land on 910A nodes."""
WORKLOADS = "workloads.kueue.x-k8s.io"  # "workload" alone is scheduling.k8s.io's (gangs)
DECIDED = "hami.io/Ascend910A-devices-allocated"


def _queues(cluster_queue: str, flavor: str, namespace: str | None, quota: int) -> str:
    """A ResourceFlavor of 910A nodes, a ClusterQueue holding ``quota`` chips of it, and (with
    ``namespace``) a LocalQueue ``team`` there pointing at it."""
    docs: list[Json] = [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": FLAVOR_LABELS},
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [RESOURCE],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [{"name": RESOURCE, "nominalQuota": quota}],
                            }
                        ],
                    }
                ],
            },
        },
    ]
    if namespace is not None:
        docs.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "team", "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            }
        )
    return yaml.safe_dump_all(docs)


def _job(name: str, pods: int) -> str:
    """A batch/v1 Job for the LocalQueue ``team``: ``pods`` pods at once, one chip each."""
    container = {"name": "train", "image": "ascend/train", "resources": {"limits": {RESOURCE: 1}}}
    return yaml.safe_dump(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {"kueue.x-k8s.io/queue-name": "team"},
            },
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
            },
        }
    )


def _condition(obj: Json, kind: str) -> Json:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _active(sandbox: Any, cluster_queue: str) -> bool:
    """Kueue has read the ClusterQueue and its flavor: it can admit workloads."""
    queue = sandbox.ctl.json(["get", "clusterqueue", cluster_queue])
    return bool(_condition(queue, "Active").get("status") == "True")


def _workload(sandbox: Any, job: str) -> Json:
    """The Workload Kueue made for ``job`` ({} while there is none)."""
    for item in sandbox.ctl.items(["get", WORKLOADS, "-n", NAMESPACE]):
        owners = item["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return dict(item)
    return {}


def _admitted(sandbox: Any, job: str) -> Json:
    workload = _workload(sandbox, job)
    return workload if _condition(workload, "Admitted").get("status") == "True" else {}


def _pods(sandbox: Any, job: str) -> dict[str, Json]:
    return {
        n: p
        for n, p in sandbox.pods(NAMESPACE).items()
        if p["metadata"].get("labels", {}).get("job-name") == job
    }


def _running(sandbox: Any, job: str, count: int) -> dict[str, Json]:
    pods = _pods(sandbox, job)
    live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
    running = [p for p in live if (p.get("status") or {}).get("phase") == "Running"]
    return pods if len(running) == len(pods) == count else {}


def _explain(sandbox: Any) -> Any:
    def explain() -> str:
        workloads = [
            f"  workload {w['metadata']['name']}: "
            + "; ".join(
                f"{c.get('type')}={c.get('status')} {c.get('message', '')}"
                for c in (w.get("status") or {}).get("conditions") or []
            )
            for w in sandbox.ctl.items(["get", WORKLOADS, "-n", NAMESPACE])
        ]
        return "\n".join([*workloads, sandbox.describe_pods(NAMESPACE)])

    return explain


def _chips(pods: dict[str, Json]) -> list[str]:
    """The chip (UUID) of every device vnpu decided for the pods."""
    found = []
    for pod in pods.values():
        value = pod["metadata"]["annotations"][DECIDED]
        found += [d.split(",")[0] for d in value.replace(";", ":").split(":") if d]
    return found


def _usage(sandbox: Any, name: str) -> tuple[int, int, str]:
    """A ClusterQueue's admitted and pending workloads and the chips its admitted ones use."""
    status = sandbox.ctl.json(["get", "clusterqueue", name]).get("status") or {}
    used = [
        r["total"]
        for flavor in status.get("flavorsUsage") or []
        for r in flavor.get("resources") or []
        if r["name"] == RESOURCE
    ]
    return status.get("admittedWorkloads", 0), status.get("pendingWorkloads", 0), "".join(used)


def _check_placed(pods: dict[str, Json]) -> None:
    """Both webhooks' marks: vnpu routed every pod to its scheduler, which placed it on its own
    chip of the node Kueue's flavor selects."""
    for name, pod in pods.items():
        spec = pod["spec"]
        assert spec["schedulerName"] == "vnpu-scheduler", name
        assert spec["nodeName"] == "train", name
        assert spec.get("nodeSelector") == FLAVOR_LABELS, name  # injected by Kueue at admission
    chips = _chips(pods)
    assert len(chips) == len(set(chips)) == len(pods), chips


def test_a_cluster_queue_admits_whole_jobs_within_its_npu_quota(sandbox: Any) -> None:
    """Quota 4 x 910A on a node of 8: Job 1 (4 x 1 chip) admitted and running; Job 2 the same,
    suspended with no pod until Job 1 is deleted, then admitted and running."""
    explain = _explain(sandbox)
    sandbox.ctl.run(["create", "namespace", NAMESPACE])
    sandbox.apply(_queues("npu-training", "ascend-910a", NAMESPACE, quota=4))
    sandbox.wait_for(lambda: _active(sandbox, "npu-training"), "the ClusterQueue active")

    sandbox.apply(_job("job-1", 4))
    workload = sandbox.wait_for(lambda: _admitted(sandbox, "job-1"), "Job 1 admitted", 60, explain)
    (assignment,) = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 4  # one unit: the whole Job's pods at once
    assert assignment["resourceUsage"] == {RESOURCE: "4"}
    assert assignment["flavors"] == {RESOURCE: "ascend-910a"}
    first = sandbox.wait_for(lambda: _running(sandbox, "job-1", 4), "Job 1 running", 90, explain)
    _check_placed(first)

    sandbox.apply(_job("job-2", 4))
    sandbox.wait_for(
        lambda: (
            "insufficient unused quota"
            in _condition(_workload(sandbox, "job-2"), "QuotaReserved").get("message", "")
        ),
        "Kueue refusing Job 2 its quota",
        60,
        explain,
    )
    waiting = _workload(sandbox, "job-2")
    assert _condition(waiting, "QuotaReserved")["status"] == "False", explain()
    assert _condition(waiting, "Admitted").get("status") != "True", explain()
    job = sandbox.ctl.json(["get", "job", "-n", NAMESPACE, "job-2"])
    assert job["spec"]["suspend"] is True  # set by Kueue's webhook: the manifest has none
    assert _pods(sandbox, "job-2") == {}, explain()

    sandbox.ctl.run(["delete", "job", "-n", NAMESPACE, "job-1", "--wait=false"])
    sandbox.wait_for(lambda: _admitted(sandbox, "job-2"), "Job 2 admitted", 60, explain)
    second = sandbox.wait_for(lambda: _running(sandbox, "job-2", 4), "Job 2 running", 90, explain)
    _check_placed(second)
    sandbox.wait_for(lambda: not _pods(sandbox, "job-1"), "Job 1's pods gone", 60, explain)
    sandbox.wait_for(
        lambda: _usage(sandbox, "npu-training") == (1, 0, "4"),
        "the ClusterQueue counting Job 2 alone: 4 chips in use, nothing pending",
        explain=lambda: str(_usage(sandbox, "npu-training")),
    )


def test_kueue_objects_convert_through_its_webhook_on_the_sandbox_ca(sandbox: Any) -> None:
    """A v1beta2 ClusterQueue read as v1beta1: kube-apiserver calls Kueue's conversion webhook
    on loopback, trusting the sandbox CA it was registered with."""
    sandbox.apply(_queues("npu-convert", "ascend-910a-convert", None, quota=2))
    old = sandbox.ctl.json(["get", "clusterqueues.v1beta1.kueue.x-k8s.io", "npu-convert"])
    assert old["apiVersion"] == "kueue.x-k8s.io/v1beta1"
    (group,) = old["spec"]["resourceGroups"]
    assert group["flavors"][0]["resources"] == [{"name": RESOURCE, "nominalQuota": "2"}]
