"""Kubernetes resource quantities (``4096``, ``3k``, ``3e3``, ``4Gi``, ``1500m``) read as exact numbers.

A quantity is a signed decimal number followed by a suffix of one of three forms, as
``k8s.io/apimachinery``'s ``resource.Quantity`` defines them:

* decimal SI: ``n u m`` (10^-9, 10^-6, 10^-3), none, ``k M G T P E`` (10^3 … 10^18);
* binary SI: ``Ki Mi Gi Ti Pi Ei`` (2^10 … 2^60);
* decimal exponent: ``e`` or ``E`` and a signed integer (``3e3``, ``5E-1``).

kube-apiserver stores a pod's quantities in canonical form (``3000`` becomes ``3k``,
``1024Mi`` becomes ``1Gi``), so whoever reads resources back must accept every form that
denotes the same number. ``requests`` (container resources) and ``nodes`` (allocatable
device counts) call ``parse``; it keeps the form so that a caller can refuse binary units
where they would be a unit mistake. Raises ``errors.QuantityError`` naming the value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from fractions import Fraction

from vnpu_core import errors


class Form(StrEnum):
    """How a quantity's suffix scales its number (the names of ``resource.Format``)."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SYNTAX = re.compile(
    r"^(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?(?P<suffix>[a-zA-Z]*[+-]?[0-9]*)$"
)
_EXPONENT = re.compile(r"^[eE][+-]?[0-9]+$")
# A decimal exponent past this many digits either way is no count anyone means; refusing it
# also keeps the arithmetic small.
MAX_EXPONENT = 1000
FORMAT_HELP = (
    "a number with an optional suffix: n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or e<exponent>"
)


@dataclass(frozen=True, slots=True)
class Quantity:
    """The exact value of a quantity and the form its suffix was written in."""

    value: Fraction
    form: Form

    @property
    def whole(self) -> bool:
        """Whether the value is an integer (``3k``, ``3000m``; not ``2.5`` or ``1500m``)."""
        return self.value.denominator == 1


def _scale(suffix: str, value: object) -> tuple[Form, Fraction]:
    if suffix in _DECIMAL_SI:
        return Form.DECIMAL_SI, Fraction(10) ** _DECIMAL_SI[suffix]
    if suffix in _BINARY_SI:
        return Form.BINARY_SI, Fraction(2 ** _BINARY_SI[suffix])
    if _EXPONENT.match(suffix):
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise errors.QuantityError(value, f"exponent {exponent} is out of range")
        return Form.DECIMAL_EXPONENT, Fraction(10) ** exponent
    raise errors.QuantityError(value, f"unknown suffix {suffix!r}: {FORMAT_HELP}")


def parse(value: object) -> Quantity:
    """The quantity in ``value``: a string as written in a manifest, or a JSON/YAML number."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise errors.QuantityError(value, f"must be a string or a number: {FORMAT_HELP}")
    text = repr(value) if isinstance(value, float) else str(value)
    match = _SYNTAX.match(text)
    if match is None or not (match["whole"] or match["fraction"]):
        raise errors.QuantityError(value, f"is not a quantity: {FORMAT_HELP}")
    form, scale = _scale(match["suffix"], value)
    fraction = match["fraction"] or ""
    number = Fraction(int((match["whole"] or "0") + fraction), 10 ** len(fraction))
    sign = -1 if match["sign"] == "-" else 1
    return Quantity(sign * number * scale, form)
