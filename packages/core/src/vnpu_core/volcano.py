"""Volcano Jobs and PodGroups as Kubernetes 1.37's own objects, for ``vnpu convert``.

A Volcano Job (``batch.volcano.sh/v1alpha1``) becomes, in this order:

* a ``scheduling.k8s.io/v1beta1`` Workload named like the job, with one PodGroupTemplate
  ``gang`` whose ``schedulingPolicy`` is ``gang: {minCount: <minAvailable>}``;
* a ``scheduling.k8s.io/v1beta1`` PodGroup of the same name: ``workloadRef`` names the
  Workload and its template, ``schedulingPolicy`` is the same gang. kube-scheduler's
  GangScheduling plugin (GenericWorkload gate) admits its pods all or nothing;
* per task a ``batch/v1`` Job ``<job>-<task>``: ``parallelism`` and ``completions`` are
  the task's replicas, ``completionMode: Indexed`` when there is more than one (each
  worker keeps its index, ``JOB_COMPLETION_INDEX``, and hostname ``<job>-<task>-<index>``
  across restarts, as training ranks need); its pods name the PodGroup in
  ``spec.schedulingGroup.podGroupName`` and carry the vnpu scheduler name.

One PodGroup per Volcano Job, not per task: Volcano's ``minAvailable`` counts the pods of
all tasks together, and so does the gang's ``minCount``. A Volcano PodGroup
(``scheduling.volcano.sh/v1beta1``) becomes the Workload and PodGroup alone, its pods
joining it through ``podtemplates``. Other Volcano kinds (Queue, Command, JobFlow, ...)
have no counterpart and are dropped. Each field that is not carried over becomes one
``podtemplates.Finding``; ``convert`` calls ``convert_object``. Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from vnpu_core import podtemplates

WORKLOAD_API = "scheduling.k8s.io/v1beta1"
TEMPLATE_NAME = "gang"
JOB_LABEL = "vnpu.io/volcano-job"
TASK_LABEL = "vnpu.io/volcano-task"
POD_GROUP_LABEL = "vnpu.io/volcano-podgroup"
JOB_GROUP = "batch.volcano.sh"
SCHEDULING_GROUP = "scheduling.volcano.sh"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME = 63  # a Job's name is also a label value, and so at most 63 characters

_QUEUE = ("Volcano queue", "vnpu shares NPUs by namespace quotas and teams (docs/quotas.md)")
_NO_COUNTERPART = "Kubernetes has no counterpart"
_JOB_FIELDS = {
    "volumes": ("Volcano job volumes", "add the volumes and volumeMounts to the pod templates"),
    "runningEstimate": ("Volcano scheduling hint", _NO_COUNTERPART),
    "queue": _QUEUE,
    "maxRetry": (
        "Volcano restarts the whole job",
        "each batch/v1 Job retries its failed pods up to spec.backoffLimit (default 6)",
    ),
    "minSuccess": (
        "Volcano success count over all tasks",
        "each batch/v1 Job succeeds when all its completions do",
    ),
    "networkTopology": ("Volcano network-topology placement", _NO_COUNTERPART),
}
_JOB_CONVERTED = ("schedulerName", "minAvailable", "tasks", "ttlSecondsAfterFinished")
_PLUGINS = {
    "ssh": "make a Secret with the keys and mount it in the pod templates",
    "svc": "an Indexed Job's pod has the hostname <job>-<index>; add a headless Service and "
    "spec.subdomain for DNS names",
    "env": "an Indexed Job sets JOB_COMPLETION_INDEX in every container",
}
_TASK_FIELDS = {
    "topologyPolicy": ("Volcano NUMA policy", "the kubelet's Topology Manager is set per node"),
    "maxRetry": ("Volcano task retries", "each batch/v1 Job has spec.backoffLimit"),
    "dependsOn": ("Volcano task order", "start the dependent Job once the other one runs"),
    "partitionPolicy": ("Volcano task partitions", _NO_COUNTERPART),
}
_POD_GROUP_FIELDS = {
    "minTaskMember": ("Volcano per-task minimums", "the PodGroup has one minCount"),
    "queue": _QUEUE,
    "minResources": ("Volcano enqueue check", _NO_COUNTERPART),
    "networkTopology": ("Volcano network-topology placement", _NO_COUNTERPART),
}
_KIND_HINTS = {"Queue": _QUEUE[1]}


def is_volcano(group: str) -> bool:
    """Whether an API group is one of Volcano's (``batch.volcano.sh``, ``bus.volcano.sh``, ...)."""
    return group.endswith("volcano.sh")


def convert_object(
    where: podtemplates.Where,
    obj: dict[str, Any],
    group: str,
    kind: str,
    target: podtemplates.Target,
    found: list[podtemplates.Finding],
) -> list[dict[str, Any]]:
    """The objects that replace one Volcano object (none for kinds without a counterpart)."""
    if group == JOB_GROUP and kind == "Job":
        return _job(where, obj, target, found)
    if group == SCHEDULING_GROUP and kind == "PodGroup":
        return _pod_group(where, obj, found)
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    name, namespace = meta.get("name") or "(unnamed)", meta.get("namespace")
    owner = f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"
    hint = _KIND_HINTS.get(kind, _NO_COUNTERPART)
    message = podtemplates.not_converted(f"Volcano {kind}", hint)
    found.append(podtemplates.Finding(owner, "kind", message))
    return []


def gang_objects(
    name: str, namespace: str, min_count: int, priority: str, labels: dict[str, str]
) -> list[dict[str, Any]]:
    """The Workload and the PodGroup of one gang of at least ``min_count`` pods."""

    def metadata() -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if namespace:
            meta["namespace"] = namespace
        meta["labels"] = dict(labels)
        return meta

    def policy() -> dict[str, Any]:
        return {"gang": {"minCount": min_count}}

    template: dict[str, Any] = {"name": TEMPLATE_NAME, "schedulingPolicy": policy()}
    group: dict[str, Any] = {
        "workloadRef": {"workloadName": name, "templateName": TEMPLATE_NAME},
        "schedulingPolicy": policy(),
    }
    if priority:
        template["priorityClassName"] = priority
        group["priorityClassName"] = priority
    return [
        {
            "apiVersion": WORKLOAD_API,
            "kind": "Workload",
            "metadata": metadata(),
            "spec": {"podGroupTemplates": [template]},
        },
        {"apiVersion": WORKLOAD_API, "kind": "PodGroup", "metadata": metadata(), "spec": group},
    ]


def _identity(where: podtemplates.Where, obj: dict[str, Any], kind: str) -> tuple[str, str, str]:
    """The object's name and namespace, and how findings name it (``Job train/resnet``)."""
    meta = where.mapping("metadata", obj.get("metadata"))
    name = where.text("metadata.name", meta.get("name"))
    namespace = meta.get("namespace") or ""
    if not isinstance(namespace, str):
        raise where.fail("metadata.namespace", namespace, "must be a string")
    return name, namespace, f"{kind} {namespace}/{name}" if namespace else f"{kind} {name}"


def _carried(
    where: podtemplates.Where, obj: dict[str, Any], owner: str, found: list[podtemplates.Finding]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Volcano Job's own labels and annotations for its Jobs, without Volcano's keys."""
    meta = where.mapping("metadata", obj.get("metadata"))
    carried: list[dict[str, Any]] = []
    for part in ("labels", "annotations"):
        raw = where.mapping(f"metadata.{part}", meta.get(part), required=False)
        kept = {}
        for key, value in raw.items():
            if podtemplates.is_volcano_key(str(key)):
                found.append(
                    podtemplates.Finding(
                        owner,
                        f'metadata.{part}["{key}"]',
                        podtemplates.not_converted(f"Volcano {part[:-1]}"),
                    )
                )
            else:
                kept[str(key)] = value
        carried.append(kept)
    return carried[0], carried[1]


@dataclass(frozen=True, slots=True)
class _Task:
    """One task of a Volcano Job: where it is, its body, name, replicas and own minimum."""

    at: str
    body: dict[str, Any]
    name: str
    replicas: int
    least: int | None


@dataclass(frozen=True, slots=True)
class _Job:
    """What every batch/v1 Job of one Volcano Job shares."""

    name: str
    namespace: str
    owner: str
    priority: str
    ttl: int | None
    labels: dict[str, Any]
    annotations: dict[str, Any]


def _job(
    where: podtemplates.Where,
    obj: dict[str, Any],
    target: podtemplates.Target,
    found: list[podtemplates.Finding],
) -> list[dict[str, Any]]:
    name, namespace, owner = _identity(where, obj, "Job")
    spec = where.mapping("spec", obj.get("spec"))
    where.listing("spec.tasks", spec.get("tasks"), required=True)
    for key, value in spec.items():
        _job_field(str(key), value, owner, found)
    tasks = _tasks(where, spec["tasks"], owner, found)
    min_available = _min_available(where, spec, tasks, owner, found)
    priority = ""
    if spec.get("priorityClassName") is not None:
        priority = where.text("spec.priorityClassName", spec["priorityClassName"])
    ttl = spec.get("ttlSecondsAfterFinished")
    if ttl is not None:
        ttl = where.integer("spec.ttlSecondsAfterFinished", ttl, 0)
    labels, annotations = _carried(where, obj, owner, found)
    job = _Job(name, namespace, owner, priority, ttl, labels, annotations)
    out = gang_objects(name, namespace, min_available, priority, {JOB_LABEL: name})
    out += [_batch_job(where, task, job, target, found) for task in tasks]
    return out


def _tasks(
    where: podtemplates.Where, raw_tasks: list[Any], owner: str, found: list[podtemplates.Finding]
) -> list[_Task]:
    tasks: list[_Task] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_tasks):
        at = f"spec.tasks[{i}]"
        task = where.mapping(at, raw)
        # Volcano names a task without a name default<index>
        name = where.text(f"{at}.name", task["name"]) if "name" in task else f"default{i}"
        if not _DNS_LABEL.match(name):
            raise where.fail(f"{at}.name", name, "must be a DNS label: a-z, 0-9 and '-'")
        if name in seen:
            raise where.fail(f"{at}.name", name, "names another task too")
        seen.add(name)
        replicas = where.integer(f"{at}.replicas", task.get("replicas"), 0)
        least = task.get("minAvailable")
        if least is not None:
            least = where.integer(f"{at}.minAvailable", least, 0)
        for key, value in task.items():
            _task_field(f"{at}.{key}", str(key), value, owner, found)
        tasks.append(_Task(at, task, name, replicas, least))
    return tasks


def _min_available(
    where: podtemplates.Where,
    spec: dict[str, Any],
    tasks: list[_Task],
    owner: str,
    found: list[podtemplates.Finding],
) -> int:
    """The gang's minCount: ``spec.minAvailable``, by default every task's minimum."""
    total = sum(t.replicas for t in tasks)
    if spec.get("minAvailable") is not None:
        least = where.integer("spec.minAvailable", spec["minAvailable"], 1)
    else:  # a task's minimum defaults to its replicas
        least = sum(t.replicas if t.least is None else t.least for t in tasks)
    if not 1 <= least <= total:
        raise where.fail("spec.minAvailable", least, f"must be from 1 to the tasks' {total} pods")
    if least < total:  # only then do the tasks' own minimums say more than the one minCount
        what, hint = _POD_GROUP_FIELDS["minTaskMember"]
        for task in tasks:
            if task.least is not None:
                message = podtemplates.not_converted(what, hint)
                found.append(podtemplates.Finding(owner, f"{task.at}.minAvailable", message))
    return least


def _batch_job(
    where: podtemplates.Where,
    task: _Task,
    job: _Job,
    target: podtemplates.Target,
    found: list[podtemplates.Finding],
) -> dict[str, Any]:
    """The batch/v1 Job of one task: its pods join the Volcano Job's PodGroup."""
    at, owner = f"{task.at}.template", job.owner
    pod = podtemplates.rewrite(
        where, at, task.body.get("template"), owner, job.namespace, target, found, job.name
    )
    ours = {JOB_LABEL: job.name, TASK_LABEL: task.name}
    pod_meta = pod.pop("metadata", {})
    pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **ours}
    pod = {"metadata": pod_meta, **pod}
    pod_spec = pod["spec"]
    restart = pod_spec.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        pod_spec["restartPolicy"] = "Never"
        was = "not set" if restart is None else repr(restart)
        message = f"{was}: set to Never (a batch/v1 Job's pods take Never or OnFailure)"
        found.append(podtemplates.Finding(owner, f"{at}.spec.restartPolicy", message))
    if job.priority and not pod_spec.get("priorityClassName"):
        pod_spec["priorityClassName"] = job.priority
    name = f"{job.name}-{task.name}"
    if len(name) > MAX_NAME:
        message = (
            f"the batch/v1 Job {name} has {len(name)} characters, more than the {MAX_NAME} "
            "Kubernetes takes: shorten the job or task name"
        )
        found.append(podtemplates.Finding(owner, f"{task.at}.name", message))
    meta: dict[str, Any] = {"name": name}
    if job.namespace:
        meta["namespace"] = job.namespace
    meta["labels"] = {**job.labels, **ours}
    if job.annotations:
        meta["annotations"] = dict(job.annotations)
    spec: dict[str, Any] = {"parallelism": task.replicas, "completions": task.replicas}
    if task.replicas > 1:
        spec["completionMode"] = "Indexed"
    if job.ttl is not None:
        spec["ttlSecondsAfterFinished"] = job.ttl
    spec["template"] = pod
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def _job_field(key: str, value: object, owner: str, found: list[podtemplates.Finding]) -> None:
    """A finding for each part of a Volcano Job's ``spec.<key>`` that is not carried over."""
    if key in _JOB_CONVERTED or key == "priorityClassName":
        return
    field = f"spec.{key}"
    if key == "plugins":
        names = value if isinstance(value, dict) else {"(plugins)": None}
        for plugin in names:
            hint = _PLUGINS.get(str(plugin), _NO_COUNTERPART)
            found.append(
                podtemplates.Finding(
                    owner, f"{field}.{plugin}", podtemplates.not_converted("Volcano plugin", hint)
                )
            )
    elif key == "policies":
        _policies(field, value, owner, found)
    else:
        what, hint = _JOB_FIELDS.get(key, ("unknown Volcano Job field", ""))
        found.append(podtemplates.Finding(owner, field, podtemplates.not_converted(what, hint)))


def _task_field(
    field: str, key: str, value: object, owner: str, found: list[podtemplates.Finding]
) -> None:
    if key in ("name", "replicas", "template", "minAvailable"):
        return
    if key == "policies":
        _policies(field, value, owner, found)
        return
    what, hint = _TASK_FIELDS.get(key, ("unknown Volcano task field", ""))
    found.append(podtemplates.Finding(owner, field, podtemplates.not_converted(what, hint)))


def _policies(field: str, value: object, owner: str, found: list[podtemplates.Finding]) -> None:
    """One finding per lifecycle policy (``event: PodEvicted, action: RestartJob``)."""
    items = value if isinstance(value, list) else [value]
    for i, policy in enumerate(items):
        shown = ""
        if isinstance(policy, dict):
            when = policy.get("events") or policy.get("event")
            if isinstance(when, list):
                when = ", ".join(str(w) for w in when)
            if when is None and policy.get("exitCode") is not None:
                when = f"exit code {policy['exitCode']}"
            shown = f": {when} -> {policy.get('action', 'None')}"
        found.append(
            podtemplates.Finding(
                owner,
                f"{field}[{i}]",
                podtemplates.not_converted(
                    f"Volcano lifecycle policy{shown}",
                    "a batch/v1 Job acts on one pod's failure (spec.podFailurePolicy), "
                    "not on the whole gang",
                ),
            )
        )


def _pod_group(
    where: podtemplates.Where, obj: dict[str, Any], found: list[podtemplates.Finding]
) -> list[dict[str, Any]]:
    name, namespace, owner = _identity(where, obj, "PodGroup")
    spec = where.mapping("spec", obj.get("spec"), required=False)
    members = spec.get("minMember")
    if members is None or members == 0:
        members = 1
        found.append(
            podtemplates.Finding(
                owner, "spec.minMember", "not set: gang minCount 1 (every pod on its own)"
            )
        )
    else:
        members = where.integer("spec.minMember", members, 1)
    priority = ""
    if spec.get("priorityClassName") is not None:
        priority = where.text("spec.priorityClassName", spec["priorityClassName"])
    for key in spec:
        if key in ("minMember", "priorityClassName"):
            continue
        what, hint = _POD_GROUP_FIELDS.get(str(key), ("unknown Volcano PodGroup field", ""))
        found.append(
            podtemplates.Finding(owner, f"spec.{key}", podtemplates.not_converted(what, hint))
        )
    return gang_objects(name, namespace, members, priority, {POD_GROUP_LABEL: name})
