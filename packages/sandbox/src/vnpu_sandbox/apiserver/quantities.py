"""Resource quantities stored as kube-apiserver stores them: canonical form, or the input kept.

kube-apiserver decodes every quantity into ``resource.Quantity`` (k8s.io/apimachinery) and
encodes it back, so a client that wrote ``3000`` reads ``3k``, ``1024Mi`` comes back as
``1Gi`` and ``1.5`` as ``1500m``. ``strategies.defaults`` calls ``canonicalise`` on every
body it defaults (create, update, patch results, mutated objects), which rewrites:

* the container resources of a pod (``spec.containers``, ``initContainers``,
  ``ephemeralContainers``: ``resources.limits``/``requests``), its ``spec.overhead`` and
  pod-level ``spec.resources``, and the same in a workload's ``spec.template.spec``;
* a node's ``status.capacity`` and ``status.allocatable``;
* a ResourceQuota's ``spec.hard``, ``status.hard`` and ``status.used``.

The rules are the Go type's. The suffix form is kept: decimal SI (``m``, none, ``k``, ``M``,
…, ``E``), binary SI (``Ki`` … ``Ei``) or decimal exponent (``e3``). A string the parser
finds canonical already is stored unchanged, quirks included (``+5`` and ``007`` survive, as
does ``3E3``): a decimal one whose digits do not end in ``000``, do not start with ``0`` and
whose exponent is a multiple of 3; a binary one whose number is not a multiple of 8. Anything
else is rewritten with the largest suffix of its form that keeps the mantissa an integer;
values finer than 10^-9 are rounded up to it; a binary value above 2^63-1 is capped there;
one that is below 1024 in magnitude or not an integer is written in decimal SI (``0.5Ki``
is ``512``); a decimal exponent past ``E`` is written as ``e21``. A JSON number is read from
its Python value, so ``1e3`` sent unquoted is stored as ``1k`` where the real server keeps
``1e3``. A value that is no quantity is a 400 with the real server's message.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from vnpu_sandbox.apiserver import errors

Json = dict[str, Any]
Form = Literal["DecimalSI", "BinarySI", "DecimalExponent"]

FORMAT_WRONG = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
BAD_SUFFIX = "unable to parse quantity's suffix"

_SYNTAX = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]*)(?:\.(?P<denom>[0-9]*))?(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)$"
)
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX = {exponent: suffix for suffix, exponent in _DECIMAL_SI.items()}
_BINARY_SUFFIX = {exponent // 10: suffix for suffix, exponent in _BINARY_SI.items()}
_NANO = -9
_MAX_INT64 = 2**63 - 1
_INT64_DIGITS = 18  # digits that always fit an int64: the parser's fast path


class QuantityError(ValueError):
    """``value`` is not a quantity; ``problem`` is the Go parser's error text."""

    def __init__(self, value: object, problem: str) -> None:
        self.value = value
        self.problem = problem
        super().__init__(f"{value!r}: {problem}")


@dataclass(frozen=True, slots=True)
class _Amount:
    """``unscaled`` x 10^``exponent``, exact (inf.Dec's representation)."""

    unscaled: int
    exponent: int


def _wrap_int32(number: int) -> int:
    """The exponent as Go's ``int32(parsed)`` keeps it."""
    return (number + 2**31) % 2**32 - 2**31


def _suffix(suffix: str, value: object) -> tuple[Form, int]:
    """The form and exponent (of 10, or of 2 for binary SI) a suffix stands for."""
    if suffix in _DECIMAL_SI:
        return "DecimalSI", _DECIMAL_SI[suffix]
    if suffix in _BINARY_SI:
        return "BinarySI", _BINARY_SI[suffix]
    if _EXPONENT.match(suffix) and abs(int(suffix[1:])) <= _MAX_INT64:
        return "DecimalExponent", _wrap_int32(int(suffix[1:]))
    raise QuantityError(value, BAD_SUFFIX)


def _power_of_ten(exponent: int) -> int:
    """10^``exponent`` for a non-negative exponent, typed as an int."""
    return int(10**exponent)


def _round_to_nano(amount: _Amount) -> _Amount:
    """Round a magnitude finer than 10^-9 up to the next 10^-9 (never down to zero)."""
    if amount.unscaled == 0 or amount.exponent >= _NANO:
        return amount
    shift = _NANO - amount.exponent
    magnitude = abs(amount.unscaled)
    if shift > len(str(magnitude)):
        rounded = 1
    else:
        whole, rest = divmod(magnitude, _power_of_ten(shift))
        rounded = whole + (rest != 0)
    return _Amount(rounded if amount.unscaled > 0 else -rounded, _NANO)


def _integer(amount: _Amount) -> int | None:
    """The value as an int, or None when it has a fractional part."""
    if amount.exponent >= 0:
        return amount.unscaled * _power_of_ten(amount.exponent)
    whole, rest = divmod(amount.unscaled, _power_of_ten(-amount.exponent))
    return None if rest else whole


def _magnitude_above(amount: _Amount, bound: int) -> bool:
    """Whether ``|amount| > bound``, without scaling the amount to an integer."""
    if amount.exponent >= 0:
        return abs(amount.unscaled) * _power_of_ten(amount.exponent) > bound
    return abs(amount.unscaled) > bound * _power_of_ten(-amount.exponent)


def _decimal_text(amount: _Amount, form: Form) -> str:
    """Trailing zeros into the exponent, then down to a multiple of 3; the suffix of ``form``."""
    unscaled, exponent = amount.unscaled, amount.exponent
    while unscaled % 10 == 0:
        unscaled //= 10
        exponent += 1
    while exponent % 3:
        unscaled *= 10
        exponent -= 1
    if form == "DecimalSI" and exponent in _DECIMAL_SUFFIX:
        return f"{unscaled}{_DECIMAL_SUFFIX[exponent]}"
    return f"{unscaled}e{exponent}" if exponent else str(unscaled)


def _binary_text(number: int) -> str:
    times = 0
    while number % 1024 == 0:
        number //= 1024
        times += 1
    return f"{number}{_BINARY_SUFFIX[times] if times else ''}"


def _canonical_text(amount: _Amount, form: Form) -> str:
    if amount.unscaled == 0:
        return "0"
    if form == "BinarySI":
        number = _integer(amount) if _magnitude_above(amount, 1023) else None
        if number is not None:
            return _binary_text(number)
        form = "DecimalSI"  # small or fractional binary values keep their precision
    return _decimal_text(amount, form)


def _cap(amount: _Amount) -> _Amount:
    """A binary value beyond 2^63-1 in magnitude is capped there, keeping its sign."""
    if not _magnitude_above(amount, _MAX_INT64):
        return amount
    return _Amount(_MAX_INT64 if amount.unscaled > 0 else -_MAX_INT64, 0)


def canonical(value: object) -> str:
    """The string kube-apiserver stores for the quantity ``value`` (a string or JSON number)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise QuantityError(value, FORMAT_WRONG)
    text = (repr(value) if isinstance(value, float) else str(value)).strip()
    if text == "0":
        return text
    match = _SYNTAX.match(text)
    if not text or match is None:
        raise QuantityError(value, FORMAT_WRONG)
    form, exponent = _suffix(match["suffix"], value)
    num = match["num"].lstrip("0") or "0"
    denom = match["denom"] or ""
    digits = int(num + denom)
    sign = -1 if match["sign"] == "-" else 1
    if form == "BinarySI":
        if not denom and 15 - len(num) - exponent * 3 // 10 - 1 >= 0:
            # The parser's fast path: it keeps the string unless the number is a multiple of 8.
            if digits & 7:
                return text
            return _canonical_text(_Amount(sign * (digits << exponent), 0), form)
        amount = _round_to_nano(_Amount(sign * (digits << exponent), -len(denom)))
        return _canonical_text(_cap(amount), form)
    scale = exponent - len(denom)
    shifted = num + denom
    fast = len(shifted) <= _INT64_DIGITS and scale >= _NANO
    if fast and scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0":
        return text
    return _canonical_text(_round_to_nano(_Amount(sign * digits, scale)), form)


def milli_value(value: object) -> int:
    """The quantity in thousandths, rounded up (Go's ``MilliValue``); ``QuantityError`` if none."""
    text = canonical(value)
    match = _SYNTAX.match(text)
    if match is None:  # "0", the one canonical text the pattern is not asked about
        return 0
    form, exponent = _suffix(match["suffix"], value)
    sign = -1 if match["sign"] == "-" else 1
    base = 2 if form == "BinarySI" else 10
    if exponent > (200 if base == 2 else 60):  # far past int64: a whole number of thousandths
        return sign * _power_of_ten(60)
    number = Fraction(f"{match['num'] or '0'}.{match['denom'] or '0'}")
    return sign * math.ceil(number * Fraction(base) ** exponent * 1000)


def _resource_lists(kind: str, obj: Json) -> Iterator[Json]:
    """Every mapping of resource name to quantity that the real type of ``kind`` decodes."""
    specs: list[Any] = []
    if kind == "Pod":
        specs.append(obj.get("spec"))
    elif kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job"):
        template = (obj.get("spec") or {}).get("template")
        specs.append(template.get("spec") if isinstance(template, dict) else None)
    elif kind == "Node":
        status = obj.get("status")
        if isinstance(status, dict):
            yield from (
                status[k] for k in ("capacity", "allocatable") if isinstance(status.get(k), dict)
            )
    elif kind == "ResourceQuota":
        for part, fields in (("spec", ("hard",)), ("status", ("hard", "used"))):
            holder = obj.get(part)
            if isinstance(holder, dict):
                yield from (holder[k] for k in fields if isinstance(holder.get(k), dict))
    for spec in specs:
        if not isinstance(spec, dict):
            continue
        if isinstance(spec.get("overhead"), dict):
            yield spec["overhead"]
        holders = [spec]
        for group in ("initContainers", "containers", "ephemeralContainers"):
            holders += [c for c in spec.get(group) or [] if isinstance(c, dict)]
        for holder in holders:
            resources = holder.get("resources")
            if isinstance(resources, dict):
                yield from (
                    resources[k]
                    for k in ("limits", "requests")
                    if isinstance(resources.get(k), dict)
                )


def canonicalise(kind: str, api_version: str, obj: Json) -> None:
    """Rewrite the quantities of ``obj`` in place; ``BadRequest`` for one that is no quantity."""
    for quantities in _resource_lists(kind, obj):
        for name, value in quantities.items():
            try:
                quantities[name] = canonical(value)
            except QuantityError as exc:
                version = api_version.rsplit("/", 1)[-1]
                raise errors.BadRequest(
                    f'{kind} in version "{version}" cannot be handled as a {kind}: {exc.problem}'
                ) from exc
