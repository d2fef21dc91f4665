"""One pod (or pod template) written for HAMi or Volcano, rewritten for vnpu.

``rewrite`` returns a copy of a pod body (``metadata`` and ``spec``) where:

* the NPU resource names of every container and init container are vnpu's
  (``resourcenames.translate``); a name that cannot be translated stays as it was;
* ``spec.schedulerName`` is the vnpu scheduler's when the pod asks for an NPU, named
  Volcano's or HAMi's scheduler, or belongs to a converted Volcano Job;
* Volcano's pod-group annotation (``scheduling.k8s.io/group-name`` or
  ``scheduling.volcano.sh/group-name``) becomes ``spec.schedulingGroup.podGroupName``,
  the field kube-scheduler's gang plugin reads (Kubernetes 1.37, GenericWorkload);
* other Volcano annotations (``*volcano.sh/...``) are dropped: nothing else reads them;
* HAMi's UUID lists named by a family word (``hami.io/use-Ascend910B-uuid``) take the
  model's common word. Every other annotation stays: the ones vnpu reads
  (``huawei.com/vnpu-mode``, ``hami.io/*-scheduler-policy``, the UUID lists,
  ``vnpu.io/template``) mean the same to it.

What is not carried over is appended to ``findings``, one ``Finding`` per field; input
that cannot be read raises ``errors.InputFileError`` through ``Where``, which names the
file, the document and the field. Called by ``volcano`` and ``convert``; pure.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, replace
from typing import Any

from vnpu_core import errors, resourcenames

DEFAULT_SCHEDULER_NAME = "vnpu-scheduler"  # deploy/helm values scheduler.schedulerName
FOREIGN_SCHEDULERS = ("volcano", "hami-scheduler")
GROUP_KEYS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
_UUID_LIST = re.compile(r"^hami\.io/(?P<no>no-)?use-(?P<word>.+)-uuid$")
_MINDCLUSTER_LABELS = ("vnpu-level", "vnpu-dvpp")
_ANNOTATION_HINTS = {
    "scheduling.volcano.sh/queue-name": (
        "Volcano queue",
        "vnpu shares NPUs by namespace quotas and teams (docs/quotas.md)",
    ),
    "volcano.sh/preemptable": ("Volcano preemption mark", "give the pod a lower PriorityClass"),
}


@dataclass(frozen=True, slots=True)
class Finding:
    """Something of ``obj`` (``Job train/resnet``) at ``field`` that was not carried over."""

    obj: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.obj}: {self.field}: {self.message}"


def not_converted(what: str, hint: str = "") -> str:
    return f"not converted ({what})" + (f"; {hint}" if hint else "")


@dataclass(frozen=True, slots=True)
class Target:
    """What the output is for: the scheduler name, the chip models, and the Volcano
    PodGroups (namespace, name) converted from the same input."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    models: resourcenames.ModelChoice = dataclasses.field(default_factory=resourcenames.ModelChoice)
    groups: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True, slots=True)
class Where:
    """Document ``document`` (from 1; its content starts on ``line``) of ``source``;
    ``prefix`` leads every field (``items[2].`` inside a List)."""

    source: str
    document: int
    line: int
    prefix: str = ""

    def item(self, index: int) -> Where:
        return replace(self, prefix=f"{self.prefix}items[{index}].")

    def path(self, field: str) -> str:
        where = f"document {self.document}" + (f" (line {self.line})" if self.line else "")
        return f"{where}: {self.prefix}{field}"

    def fail(self, field: str, value: object, problem: str) -> errors.InputFileError:
        return errors.InputFileError(self.source, self.path(field), value, problem)

    def mapping(self, field: str, value: object, required: bool = True) -> dict[str, Any]:
        if value is None and not required:
            return {}
        if not isinstance(value, dict):
            raise self.fail(field, value, "is required" if value is None else "must be a mapping")
        return value

    def listing(self, field: str, value: object, required: bool = False) -> list[Any]:
        if value is None and not required:
            return []
        if value is None:
            raise self.fail(field, value, "is required")
        if not isinstance(value, list):
            raise self.fail(field, value, "must be a list")
        if required and not value:
            raise self.fail(field, value, "must not be empty")
        return value

    def text(self, field: str, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            problem = "is required" if value is None else "must be a non-empty string"
            raise self.fail(field, value, problem)
        return value

    def integer(self, field: str, value: object, low: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            problem = "is required" if value is None else f"must be an integer of at least {low}"
            raise self.fail(field, value, problem)
        return value


def is_volcano_key(key: str) -> bool:
    """Whether an annotation or label key is Volcano's own (``volcano.sh/...``, ``batch.volcano.sh/...``)."""
    return key.partition("/")[0].endswith("volcano.sh") and "/" in key


def join(at: str, field: str) -> str:
    return f"{at}.{field}" if at else field


def rewrite(
    where: Where,
    at: str,
    body: object,
    owner: str,
    namespace: str,
    target: Target,
    findings: list[Finding],
    gang: str | None = None,
) -> dict[str, Any]:
    """A rewritten copy of the pod body at field ``at`` ("" for a Pod) of ``owner``.

    ``gang``: the PodGroup every pod joins (a converted Volcano Job's); it also sets the
    scheduler name whatever the pod asks for.
    """
    pod = copy.deepcopy(where.mapping(at or "(document)", body))
    meta_at, spec_at = join(at, "metadata"), join(at, "spec")
    metadata = where.mapping(meta_at, pod.get("metadata"), required=False)
    spec = where.mapping(spec_at, pod.get("spec"))
    where.listing(join(spec_at, "containers"), spec.get("containers"), required=True)
    note = _Notes(owner, findings)
    asks_npu, asks_cores = False, False
    for kind in ("initContainers", "containers"):
        for i, container in enumerate(where.listing(join(spec_at, kind), spec.get(kind))):
            ctr_at = join(spec_at, f"{kind}[{i}]")
            where.mapping(ctr_at, container)
            resources = where.mapping(
                join(ctr_at, "resources"), container.get("resources"), required=False
            )
            for part in ("limits", "requests"):
                part_at = join(ctr_at, f"resources.{part}")
                wanted = where.mapping(part_at, resources.get(part), required=False)
                asks_cores = asks_cores or resourcenames.GENERIC_CORES in wanted
                renamed = resourcenames.translate(wanted, target.models)
                for name, why in renamed.problems.items():
                    note.add(f'{part_at}["{name}"]', not_converted(why))
                if wanted:
                    resources[part] = renamed.resources
                asks_npu = asks_npu or any(
                    str(k).startswith(resourcenames.PREFIX) for k in renamed.resources
                )
    group = _annotations(where, meta_at, metadata, target, note)
    if asks_cores:
        labels = where.mapping(join(meta_at, "labels"), metadata.get("labels"), required=False)
        for label in _MINDCLUSTER_LABELS:
            if label in labels:
                note.add(
                    f'{meta_at}.labels["{label}"]',
                    not_converted(
                        "MindCluster template choice",
                        "vnpu picks among templates of equal memory itself; "
                        "pin one with the vnpu.io/template annotation",
                    ),
                )
    _scheduler(spec, spec_at, target, note, force=gang is not None or asks_npu)
    chosen = gang or group
    if chosen is not None and (gang is not None or "schedulingGroup" not in spec):
        spec["schedulingGroup"] = {"podGroupName": chosen}
        if gang is None and (namespace, chosen) not in target.groups:
            note.add(
                join(spec_at, "schedulingGroup.podGroupName"),
                f"set to {chosen} from Volcano's group-name annotation; that PodGroup is not in "
                "this input: convert it too",
            )
    if metadata:
        pod["metadata"] = metadata
    return pod


@dataclass(frozen=True, slots=True)
class _Notes:
    owner: str
    findings: list[Finding]

    def add(self, field: str, message: str) -> None:
        self.findings.append(Finding(self.owner, field, message))


def _annotations(
    where: Where, meta_at: str, metadata: dict[str, Any], target: Target, note: _Notes
) -> str | None:
    """Rewrite the annotations in place; the PodGroup Volcano's group annotation names."""
    raw = where.mapping(join(meta_at, "annotations"), metadata.get("annotations"), required=False)
    if not raw:
        return None
    kept: dict[str, Any] = {}
    group: str | None = None
    for key, value in raw.items():
        name = str(key)
        field = f'{meta_at}.annotations["{name}"]'
        if name in GROUP_KEYS:
            group = where.text(field, value)
            continue  # carried as spec.schedulingGroup
        if is_volcano_key(name):
            what, hint = _ANNOTATION_HINTS.get(name, ("Volcano annotation", "nothing reads it"))
            note.add(field, not_converted(what, hint))
            continue
        kept[_uuid_key(name, field, target, note)] = value
    if kept:
        metadata["annotations"] = kept
    else:
        metadata.pop("annotations", None)
    return group


def _uuid_key(name: str, field: str, target: Target, note: _Notes) -> str:
    """HAMi's UUID list key with the model's common word for a family word."""
    found = _UUID_LIST.match(name)
    if not found:
        return name
    model = resourcenames.model_for_word(found["word"], target.models)
    if model is None:
        return name
    if isinstance(model, str):
        note.add(field, not_converted(model))
        return name
    return f"hami.io/{found['no'] or ''}use-{model.common_word}-uuid"


def _scheduler(
    spec: dict[str, Any], spec_at: str, target: Target, note: _Notes, force: bool
) -> None:
    current = spec.get("schedulerName")
    if current in FOREIGN_SCHEDULERS or (force and current in (None, "", "default-scheduler")):
        spec["schedulerName"] = target.scheduler_name
    elif force and current != target.scheduler_name:
        note.add(
            join(spec_at, "schedulerName"),
            not_converted(
                f"the pod names scheduler {current!r}",
                f"vnpu places NPU pods only under {target.scheduler_name}",
            ),
        )
