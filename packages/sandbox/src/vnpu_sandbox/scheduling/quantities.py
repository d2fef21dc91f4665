"""Kubernetes resource quantities, read the way kube-scheduler reads them.

``podrequests`` and ``nodeinfo`` call :func:`parse` on container requests and node
allocatable, then :func:`milli` (cpu: ``MilliValue``) or :func:`whole` (memory, storage,
pods, extended resources: ``Value``); both round up, as ``resource.Quantity`` does. Every
form of the API's grammar is accepted: plain and signed numbers (``2``, ``+1.5``, ``.5``),
decimal SI suffixes (``n``, ``u``, ``m``, ``k``, ``M``, ``G``, ``T``, ``P``, ``E``), binary SI
suffixes (``Ki`` ... ``Ei``) and decimal exponents (``1e3``, ``5E-1``). Pure functions.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_DECIMAL_SI = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_BINARY_SI = {
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
# The exponent alternative comes before the bare "E" (exa) so that "1E3" reads as 1000.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?$"
)


def parse(value: object) -> Decimal:
    """The exact value of ``value`` (a quantity string, or a YAML/JSON number).

    Raises ``ValueError`` naming the value when it is not a quantity.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not a quantity")
    text = value.strip() if isinstance(value, str) else repr(value)
    match = _QUANTITY.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a quantity")
    try:
        number = Decimal(match.group("number"))
    except InvalidOperation as exc:  # pragma: no cover - the pattern admits only numbers
        raise ValueError(f"{text!r} is not a quantity") from exc
    suffix = match.group("suffix") or ""
    if suffix in _BINARY_SI:
        return number * _BINARY_SI[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise ValueError(f"{text!r}: exponent out of range")
        return number.scaleb(exponent)
    return number * _DECIMAL_SI[suffix]


def milli(value: object) -> int:
    """``value`` in thousandths, rounded up (cpu: ``500m`` is 500, ``0.1`` is 100)."""
    return math.ceil(parse(value) * 1000)


def whole(value: object) -> int:
    """``value`` as an integer, rounded up (memory: ``1Gi`` is 1073741824, ``1.5`` is 2)."""
    return math.ceil(parse(value))
