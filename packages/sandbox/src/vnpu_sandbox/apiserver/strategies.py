"""Per-kind rules the real server applies on write: defaults, validation, status handling.

``registry`` calls ``defaults`` on every incoming body (create, update and patch results, as
the real scheme defaulting does; ``routes`` and ``admission`` call it before and after
mutating webhooks), ``validate_create``/``validate_update`` before it commits, and
``prepare_update`` to keep what a request may not change: the status on the main
resource, the spec on ``/status``, and server-owned metadata. Pod defaults are the ones
clients rely on (``schedulerName``, ``restartPolicy``, requests copied from limits,
``status.phase: Pending``, ``status.qosClass``); pod spec updates are limited as in
kube-apiserver; webhook configurations get their v1 defaults and checks. Deployments and
ReplicaSets get the apps/v1 defaults (``replicas: 1``, the RollingUpdate strategy at 25%/25%,
``revisionHistoryLimit``, ``progressDeadlineSeconds``, pod template defaults) and the checks that
matter to their controllers: a selector that matches the template's labels and cannot change,
``restartPolicy: Always``, a valid strategy. A ResourceQuota starts with an empty ``status``
and has the names and amounts of ``spec.hard`` (on ``/status``: ``status.hard`` and
``status.used``) checked by ``quotas``.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from vnpu_sandbox.apiserver import errors, quantities, quotas, resources, selectors

Json = dict[str, Any]

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS_SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
DNS_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)
_WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def _pod_spec_defaults(spec: Json) -> None:
    """What the real scheme sets on every PodSpec, pods' and pod templates' alike."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})


def _container_defaults(container: Json) -> None:
    image = str(container.get("image", ""))
    tag = image.rsplit("/", 1)[-1]
    latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
    container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def _pod_template_defaults(template: Json) -> None:
    """A pod template's defaults; the Pod-only ones (``enableServiceLinks``, ``priority``,
    requests copied from limits) come when a pod is created from it, as in the real server."""
    _pod_spec_defaults(spec := template.setdefault("spec", {}))
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            if isinstance(container, dict):
                _container_defaults(container)


def _workload_defaults(obj: Json) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    if obj.get("kind") == "Deployment":
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif isinstance(obj.get("status"), dict):
        obj["status"].setdefault("replicas", 0)  # not omitempty in Go: always serialized
    _pod_template_defaults(spec.setdefault("template", {}))


def _pod_defaults(pod: Json) -> None:
    spec = pod.setdefault("spec", {})
    _pod_spec_defaults(spec)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("priority", 0)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    for group in ("initContainers", "containers"):
        for container in spec.get(group) or []:
            if not isinstance(container, dict):
                continue
            _container_defaults(container)
            limits_requests = container["resources"]
            limits = limits_requests.get("limits") or {}
            if limits:
                requests = limits_requests.setdefault("requests", {})
                for name, quantity in limits.items():
                    requests.setdefault(name, quantity)


def _webhook_defaults(config: Json) -> None:
    for hook in config.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        if config.get("kind") == "MutatingWebhookConfiguration":
            hook.setdefault("reinvocationPolicy", "Never")
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)


def defaults(resource: resources.Resource, obj: Json) -> None:
    """Fill the scheme defaults of ``obj`` in place, its quantities in canonical form first."""
    obj.setdefault("metadata", {})
    quantities.canonicalise(resource.kind, resource.api_version, obj)
    if resource.kind == "Pod":
        _pod_defaults(obj)
    elif resource in resources.WORKLOADS:
        _workload_defaults(obj)
    elif resource.kind in _WEBHOOK_KINDS:
        _webhook_defaults(obj)


def _quantity_set(container: Json, field: str) -> dict[str, Any]:
    value = (container.get("resources") or {}).get(field) or {}
    return {k: v for k, v in value.items() if k in ("cpu", "memory")}


def qos_class(pod: Json) -> str:
    """Guaranteed, Burstable or BestEffort, from cpu and memory requests and limits."""
    containers = [
        *(pod["spec"].get("initContainers") or []),
        *(pod["spec"].get("containers") or []),
    ]
    containers = [c for c in containers if isinstance(c, dict)]
    if not any(_quantity_set(c, "requests") or _quantity_set(c, "limits") for c in containers):
        return "BestEffort"
    guaranteed = all(
        set(_quantity_set(c, "limits")) == {"cpu", "memory"}
        and _quantity_set(c, "requests") == _quantity_set(c, "limits")
        for c in containers
    )
    return "Guaranteed" if guaranteed else "Burstable"


def prepare_create(resource: resources.Resource, obj: Json) -> None:
    """Server-set fields of a new object: pod phase and QoS class, namespace phase and label."""
    if resource.kind == "Pod":
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status["qosClass"] = qos_class(obj)
    elif resource in resources.WORKLOADS:
        # The controllers fill it in; a ReplicaSet's replicas is always serialized.
        obj["status"] = {"replicas": 0} if resource is resources.REPLICASETS else {}
    elif resource is resources.RESOURCE_QUOTAS:
        obj["status"] = {}  # the quota controller fills it in
    elif resource.kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]


def _name_errors(resource: resources.Resource, name: object) -> list[errors.FieldError]:
    if not isinstance(name, str) or not name:
        return [
            errors.FieldError(
                "metadata.name", "Required", detail="name or generateName is required"
            )
        ]
    if resource.kind == "Namespace":
        if len(name) > 63 or not _DNS_LABEL.match(name):
            return [errors.FieldError("metadata.name", "Invalid", name, DNS_LABEL_HELP)]
    elif len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        return [errors.FieldError("metadata.name", "Invalid", name, DNS_SUBDOMAIN_HELP)]
    return []


def _label_errors(metadata: Json, where: str = "metadata") -> list[errors.FieldError]:
    """Label keys and values that are not valid (their JSON types were checked by ``schemas``)."""
    found: list[errors.FieldError] = []
    for key, value in (metadata.get("labels") or {}).items():
        if problem := selectors.label_key_problem(key):
            found.append(errors.FieldError(f"{where}.labels", "Invalid", key, problem))
        if problem := selectors.label_value_problem(value):
            found.append(errors.FieldError(f"{where}.labels", "Invalid", value, problem))
    return found


_PERCENT = re.compile(r"^[0-9]+%$")
_NON_NEGATIVE = "must be greater than or equal to 0"
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _non_negative(spec: Json, field: str) -> list[errors.FieldError]:
    value = spec.get(field)
    if isinstance(value, int) and value < 0:
        return [errors.FieldError(f"spec.{field}", "Invalid", value, _NON_NEGATIVE)]
    return []


def _selector_errors(selector: Json) -> list[errors.FieldError]:
    found: list[errors.FieldError] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        if problem := selectors.label_key_problem(key):
            found.append(errors.FieldError("spec.selector.matchLabels", "Invalid", key, problem))
        if problem := selectors.label_value_problem(str(value)):
            found.append(errors.FieldError("spec.selector.matchLabels", "Invalid", value, problem))
    for index, expression in enumerate(selector.get("matchExpressions") or []):
        where = f"spec.selector.matchExpressions[{index}]"
        operator = expression.get("operator")
        values = expression.get("values") or []
        if operator not in _OPERATORS:
            found.append(
                errors.FieldError(
                    f"{where}.operator", "Invalid", operator, "not a valid selector operator"
                )
            )
        elif operator in ("In", "NotIn") and not values:
            found.append(
                errors.FieldError(
                    f"{where}.values",
                    "Required",
                    detail="must be specified when `operator` is 'In' or 'NotIn'",
                )
            )
        elif operator in ("Exists", "DoesNotExist") and values:
            found.append(
                errors.FieldError(
                    f"{where}.values",
                    "Forbidden",
                    detail="may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                )
            )
    return found


def _percent_or_count(rolling: Json, field: str) -> tuple[list[errors.FieldError], int | None]:
    """Check an IntOrString of a rolling update; its number (percent or count) when valid."""
    value = rolling.get(field, 0)
    where = f"spec.strategy.rollingUpdate.{field}"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            return [errors.FieldError(where, "Invalid", value, _NON_NEGATIVE)], None
        return [], value
    if not isinstance(value, str) or not _PERCENT.match(value):
        shown = errors.GoValue(str(value)) if isinstance(value, str) else value
        return [
            errors.FieldError(
                where, "Invalid", shown, "must be an integer or percentage (e.g '5%')"
            )
        ], None
    number = int(value[:-1])
    if field == "maxUnavailable" and number > 100:
        return [
            errors.FieldError(
                where, "Invalid", errors.GoValue(value), "must not be greater than 100%"
            )
        ], None
    return [], number


def _strategy_errors(spec: Json) -> list[errors.FieldError]:
    strategy = spec.get("strategy") or {}
    kind = strategy.get("type")
    if kind == "Recreate":
        if "rollingUpdate" in strategy:
            return [
                errors.FieldError(
                    "spec.strategy.rollingUpdate",
                    "Forbidden",
                    detail="may not be specified when strategy `type` is 'Recreate'",
                )
            ]
        return []
    if kind != "RollingUpdate":
        return [
            errors.FieldError(
                "spec.strategy.type",
                "NotSupported",
                kind,
                'supported values: "Recreate", "RollingUpdate"',
            )
        ]
    rolling = strategy.get("rollingUpdate") or {}
    unavailable_errors, unavailable = _percent_or_count(rolling, "maxUnavailable")
    surge_errors, surge = _percent_or_count(rolling, "maxSurge")
    found = unavailable_errors + surge_errors
    if unavailable == 0 and surge == 0:
        found.append(
            errors.FieldError(
                "spec.strategy.rollingUpdate.maxUnavailable",
                "Invalid",
                errors.GoValue(str(rolling.get("maxUnavailable", 0))),
                "may not be 0 when `maxSurge` is 0",
            )
        )
    return found


def _workload_errors(obj: Json) -> list[errors.FieldError]:
    """What kube-apiserver refuses in a Deployment or ReplicaSet spec (the checks that matter
    to the controllers: replicas, selector against template labels, template, strategy)."""
    spec = obj.get("spec") or {}
    found = _non_negative(spec, "replicas") + _non_negative(spec, "minReadySeconds")
    selector = spec.get("selector")
    template = spec.get("template") or {}
    template_metadata = template.get("metadata") or {}
    labels = template_metadata.get("labels") or {}
    if selector is None:
        found.append(errors.FieldError("spec.selector", "Required"))
    else:
        found += _selector_errors(selector)
        if not selector.get("matchLabels") and not selector.get("matchExpressions"):
            found.append(
                errors.FieldError(
                    "spec.selector",
                    "Invalid",
                    errors.go_label_selector(selector),
                    "empty selector is invalid for deployment",
                )
            )
    empty = selector is not None and not (
        selector.get("matchLabels") or selector.get("matchExpressions")
    )
    if not empty and (selector is None or not selectors.label_selector_matches(selector, labels)):
        found.append(
            errors.FieldError(
                "spec.template.metadata.labels",
                "Invalid",
                errors.go_string_map(template_metadata.get("labels")),
                "`selector` does not match template `labels`",
            )
        )
    found += _label_errors(template_metadata, "spec.template.metadata")
    found += _pod_errors(template, "spec.template.spec")
    template_spec = template.get("spec") or {}
    if template_spec.get("restartPolicy", "Always") != "Always":
        found.append(
            errors.FieldError(
                "spec.template.spec.restartPolicy",
                "NotSupported",
                template_spec.get("restartPolicy"),
                'supported values: "Always"',
            )
        )
    if "activeDeadlineSeconds" in template_spec:
        found.append(
            errors.FieldError(
                "spec.template.spec.activeDeadlineSeconds",
                "Forbidden",
                detail="activeDeadlineSeconds in ReplicaSet is not Supported",
            )
        )
    if obj.get("kind") == "Deployment":
        found += _strategy_errors(spec)
        found += _non_negative(spec, "revisionHistoryLimit")
        deadline = spec.get("progressDeadlineSeconds")
        if isinstance(deadline, int) and deadline <= int(spec.get("minReadySeconds") or 0):
            found.append(
                errors.FieldError(
                    "spec.progressDeadlineSeconds",
                    "Invalid",
                    deadline,
                    "must be greater than minReadySeconds",
                )
            )
    return found


def _pod_errors(pod: Json, spec_path: str = "spec") -> list[errors.FieldError]:
    """Problems of a pod's spec (or a pod template's, with ``spec_path`` naming where it is)."""
    found: list[errors.FieldError] = []
    containers = (pod.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        return [errors.FieldError(f"{spec_path}.containers", "Required")]
    seen: set[str] = set()
    for index, container in enumerate(containers):
        where = f"{spec_path}.containers[{index}]"
        if not isinstance(container, dict):
            found.append(errors.FieldError(where, "Invalid", container, "must be an object"))
            continue
        name = container.get("name")
        if not name:
            found.append(errors.FieldError(f"{where}.name", "Required"))
        elif name in seen:
            found.append(errors.FieldError(f"{where}.name", "Duplicate", name))
        seen.add(str(name))
        if not container.get("image"):
            found.append(errors.FieldError(f"{where}.image", "Required"))
    return found


def _webhook_errors(config: Json) -> list[errors.FieldError]:
    found: list[errors.FieldError] = []
    names: set[str] = set()
    hooks = config.get("webhooks") or []
    if not isinstance(hooks, list):
        return [errors.FieldError("webhooks", "Invalid", hooks, "must be a list")]
    for index, hook in enumerate(hooks):
        where = f"webhooks[{index}]"
        if not isinstance(hook, dict):
            found.append(errors.FieldError(where, "Invalid", hook, "must be an object"))
            continue
        name = hook.get("name")
        if not name:
            found.append(errors.FieldError(f"{where}.name", "Required"))
        elif str(name).count(".") < 2:
            found.append(
                errors.FieldError(
                    f"{where}.name",
                    "Invalid",
                    name,
                    "should be a domain with at least three segments separated by dots",
                )
            )
        elif name in names:
            found.append(errors.FieldError(f"{where}.name", "Duplicate", name))
        names.add(str(name))
        client = hook.get("clientConfig") or {}
        if not isinstance(client, dict) or ("url" in client) == ("service" in client):
            found.append(
                errors.FieldError(
                    f"{where}.clientConfig",
                    "Required",
                    detail="exactly one of url or service is required",
                )
            )
        if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            found.append(
                errors.FieldError(
                    f"{where}.sideEffects",
                    "Required" if "sideEffects" not in hook else "NotSupported",
                    hook.get("sideEffects"),
                    'must specify one of "None", "NoneOnDryRun"',
                )
            )
        versions = hook.get("admissionReviewVersions")
        if not isinstance(versions, list) or not {"v1", "v1beta1"} & set(map(str, versions)):
            found.append(
                errors.FieldError(
                    f"{where}.admissionReviewVersions",
                    "Required",
                    detail="must specify one of v1, v1beta1",
                )
            )
        if hook.get("failurePolicy") not in ("Fail", "Ignore"):
            found.append(
                errors.FieldError(
                    f"{where}.failurePolicy",
                    "NotSupported",
                    hook.get("failurePolicy"),
                    'supported values: "Fail", "Ignore"',
                )
            )
        timeout = hook.get("timeoutSeconds")
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            found.append(
                errors.FieldError(
                    f"{where}.timeoutSeconds",
                    "Invalid",
                    timeout,
                    "the timeout value must be between 1 and 30 seconds",
                )
            )
    return found


def validate_create(resource: resources.Resource, obj: Json) -> None:
    """Raise ``Invalid`` listing every problem of a new object."""
    metadata = obj["metadata"]
    found = _name_errors(resource, metadata.get("name")) + _label_errors(metadata)
    if resource.kind == "Pod":
        found += _pod_errors(obj)
    elif resource in resources.WORKLOADS:
        found += _workload_errors(obj)
    elif resource.kind in _WEBHOOK_KINDS:
        found += _webhook_errors(obj)
    elif resource is resources.RESOURCE_QUOTAS:
        found += quotas.errors_of(obj, spec=True, status=False)
    if found:
        raise errors.Invalid(resource.group, resource.kind, str(metadata.get("name", "")), found)


def _changed_spec_fields(old: Json, new: Json) -> list[str]:
    allowed = copy.deepcopy(old)
    for group in ("containers", "initContainers"):
        for before, after in zip(allowed.get(group) or [], new.get(group) or [], strict=False):
            if isinstance(before, dict) and isinstance(after, dict) and "image" in after:
                before["image"] = after["image"]
    for field in ("activeDeadlineSeconds", "terminationGracePeriodSeconds"):
        if field in new:
            allowed[field] = new[field]
    old_tolerations = old.get("tolerations") or []
    new_tolerations = new.get("tolerations") or []
    if all(t in new_tolerations for t in old_tolerations):
        allowed["tolerations"] = new.get("tolerations")
    if all(g in (old.get("schedulingGates") or []) for g in new.get("schedulingGates") or []):
        allowed["schedulingGates"] = new.get("schedulingGates")
    keys = sorted(set(allowed) | set(new))
    return [f"spec.{k}" for k in keys if (allowed.get(k) or None) != (new.get(k) or None)]


def validate_update(resource: resources.Resource, old: Json, new: Json, subresource: str) -> None:
    """Raise ``Invalid`` if an update changes what the real server keeps immutable."""
    name = str(old["metadata"]["name"])
    found = _label_errors(new["metadata"])
    old_finalizers = old["metadata"].get("finalizers") or []
    if old["metadata"].get("deletionTimestamp"):
        added = [f for f in new["metadata"].get("finalizers") or [] if f not in old_finalizers]
        if added:
            found.append(
                errors.FieldError(
                    "metadata.finalizers",
                    "Forbidden",
                    detail="no new finalizers can be added if the object is being deleted, found new finalizers "
                    + errors.quote(added),
                )
            )
    if resource.kind == "Pod" and subresource == "":
        changed = _changed_spec_fields(old.get("spec") or {}, new.get("spec") or {})
        if changed:
            found.append(
                errors.FieldError(
                    "spec",
                    "Forbidden",
                    detail=f"{POD_UPDATE_FORBIDDEN} (changed: {', '.join(changed)})",
                )
            )
    elif resource in resources.WORKLOADS and subresource == "":
        found += _workload_errors(new)
        selector = (new.get("spec") or {}).get("selector")
        if selector != (old.get("spec") or {}).get("selector"):
            found.append(
                errors.FieldError(
                    "spec.selector",
                    "Invalid",
                    errors.go_label_selector(selector),
                    "field is immutable",
                )
            )
    elif resource.kind in _WEBHOOK_KINDS:
        found += _webhook_errors(new)
    elif resource is resources.RESOURCE_QUOTAS:
        found += quotas.errors_of(new, spec=subresource == "", status=subresource == "status")
    if found:
        raise errors.Invalid(resource.group, resource.kind, name, found)


_SERVER_OWNED = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "name",
    "namespace",
    "selfLink",
)


def prepare_update(resource: resources.Resource, old: Json, new: Json, subresource: str) -> None:
    """Keep in ``new`` what this request may not change, and bump ``generation`` on spec changes."""
    for field in _SERVER_OWNED:
        if field in old["metadata"]:
            new["metadata"][field] = old["metadata"][field]
        else:
            new["metadata"].pop(field, None)
    if subresource == "status":
        for field in ("spec", "webhooks"):
            if field in old:
                new[field] = copy.deepcopy(old[field])
        if resource.kind == "Pod" and "ownerReferences" in old["metadata"]:
            new["metadata"]["ownerReferences"] = copy.deepcopy(old["metadata"]["ownerReferences"])
    elif resource.has_status:
        if "status" in old:
            new["status"] = copy.deepcopy(old["status"])
        else:
            new.pop("status", None)
    tracked = "webhooks" if resource.kind in _WEBHOOK_KINDS else "spec"
    if "generation" in old["metadata"] and old.get(tracked) != new.get(tracked):
        new["metadata"]["generation"] = int(old["metadata"]["generation"]) + 1
