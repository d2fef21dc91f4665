"""Resource-name and quantity rules the kubelet applies to device plugin resources.

``registration`` checks a plugin's ``resource_name`` with :func:`extended_resource_problem`
(the kubelet's ``IsExtendedResourceName``); ``devicemanager`` reads container limits with
:func:`device_count`. Pure functions, no I/O.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_QUOTA_PREFIX = "requests."
_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")


def extended_resource_problem(name: str) -> str | None:
    """Why ``name`` is not an extended resource name (``vendor-domain/type``), or None if it is.

    Same rule as the kubelet: it needs a domain, must not be a native resource (no domain, or
    a ``kubernetes.io/`` domain), must not start with ``requests.``, and ``requests.<name>``
    must be a qualified name (DNS subdomain prefix, then a name part of at most 63 characters).
    """
    if "/" not in name:
        return "it has no vendor domain (want vendor-domain/type)"
    if "kubernetes.io/" in name:
        return "the kubernetes.io domain is reserved for native resources"
    if name.startswith(_QUOTA_PREFIX):
        return f"it must not start with {_QUOTA_PREFIX!r}"
    parts = (_QUOTA_PREFIX + name).split("/")
    if len(parts) != 2:
        return "it has more than one '/'"
    prefix, short = parts
    if len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix):
        return "the domain must be a lowercase DNS subdomain"
    if len(short) > 63 or not _NAME_PART.match(short):
        return (
            "the type must be 1-63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric"
        )
    return None


def quantity(value: object) -> Decimal:
    """The exact value of a Kubernetes quantity (``500m``, ``2``, ``4Gi``, ``1e3``).

    Raises ``ValueError`` naming the value when it is not a quantity.
    """
    text = str(value).strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        amount = Decimal(number)
    except InvalidOperation as exc:
        raise ValueError(f"{text!r} is not a quantity") from exc
    return amount / 1000 if suffix == "m" else amount * _SUFFIXES[suffix]


def device_count(value: object) -> int:
    """The integer count in a container limit, rounded up like the kubelet's ``Value()``.

    Raises ``ValueError`` naming the value when it is not a quantity or is negative.
    """
    amount = quantity(value)
    if amount < 0:
        raise ValueError(f"{str(value).strip()!r} is negative")
    return math.ceil(amount)
