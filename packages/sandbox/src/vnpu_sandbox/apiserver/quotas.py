"""ResourceQuota's rules on write: which resource names and values ``spec.hard`` may hold.

``strategies.validate_create`` and ``validate_update`` call ``errors_of`` for ResourceQuota
objects. The rules are kube-apiserver's (``ValidateResourceQuotaSpec`` and
``ValidateResourceQuotaStatus`` in ``pkg/apis/core/validation``), applied to ``spec.hard``
and, where the request may write the status, to ``status.hard`` and ``status.used``:

* a name is a qualified name (``[prefix/]name``, as a label key); one without a prefix must
  also be a standard resource (``cpu``, ``pods``, ``requests.memory``, ...) and one of those a
  quota can count, so ``storage`` or ``gpus`` are refused while ``requests.huawei.com/Ascend310P``,
  ``limits.vnpu.io/aicore`` and ``count/pods`` are accepted;
* a value is not negative, and is a whole number for the resources counted in units: the
  object counts (``pods``, ``services``, ...) and extended resources (a prefixed name outside
  ``kubernetes.io/`` that does not start with ``requests.``).

Quantities are already canonical here (``quantities.canonicalise`` ran in ``defaults``, and
refused with 400 what does not parse, as the real decoder does). Scopes and scope selectors
are stored unchecked; nothing is enforced when pods are created.
"""

from __future__ import annotations

from typing import Any

from vnpu_sandbox.apiserver import errors, quantities, selectors

Json = dict[str, Any]

NOT_STANDARD = "must be a standard resource type or fully qualified"
NOT_FOR_QUOTA = "must be a standard resource for quota"
NEGATIVE = "must be greater than or equal to 0"
NOT_INTEGER = "must be an integer"

_COUNTED = frozenset(  # object counts: whole numbers only
    {
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "persistentvolumeclaims",
        "configmaps",
        "services.nodeports",
        "services.loadbalancers",
    }
)
_STANDARD_FOR_QUOTA = _COUNTED | {
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.storage",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
}
_STANDARD = _STANDARD_FOR_QUOTA | {"storage"}


def _huge_pages(name: str) -> bool:
    return name.startswith(("hugepages-", "requests.hugepages-"))


def _extended(name: str) -> bool:
    """A resource a device plugin or an operator defines (``huawei.com/Ascend310P``)."""
    native = "/" not in name or "kubernetes.io/" in name
    if native or name.startswith("requests."):
        return False
    return selectors.label_key_problem(f"requests.{name}") is None


def name_problems(name: str) -> list[str]:
    """Why ``name`` may not be a key of ``hard``, in the order kube-apiserver lists them."""
    if problem := selectors.label_key_problem(name):
        return [problem]
    if "/" in name:
        return []
    found = [] if name in _STANDARD or _huge_pages(name) else [NOT_STANDARD]
    if not (name in _STANDARD_FOR_QUOTA or _huge_pages(name)):
        found.append(NOT_FOR_QUOTA)
    return found


def value_problems(name: str, value: object) -> list[str]:
    """Why ``value`` may not be the amount of ``name``."""
    try:
        milli = quantities.milli_value(value)
    except quantities.QuantityError:
        return []  # refused before validation, by the decoder
    found = [NEGATIVE] if milli < 0 else []
    if (name in _COUNTED or _extended(name)) and milli % 1000:
        found.append(NOT_INTEGER)
    return found


def _list_errors(amounts: object, where: str) -> list[errors.FieldError]:
    if not isinstance(amounts, dict):
        return []
    found: list[errors.FieldError] = []
    for name in sorted(amounts):
        field = f"{where}[{name}]"
        found += [errors.FieldError(field, "Invalid", name, p) for p in name_problems(name)]
        value = str(amounts[name])
        found += [
            errors.FieldError(field, "Invalid", value, p) for p in value_problems(name, value)
        ]
    return found


def errors_of(quota: Json, *, spec: bool, status: bool) -> list[errors.FieldError]:
    """Every problem of the quota's ``spec.hard`` and/or ``status.hard``/``status.used``."""
    found: list[errors.FieldError] = []
    if spec:
        found += _list_errors((quota.get("spec") or {}).get("hard"), "spec.hard")
    if status:
        written = quota.get("status") or {}
        found += _list_errors(written.get("hard"), "status.hard")
        found += _list_errors(written.get("used"), "status.used")
    return found
