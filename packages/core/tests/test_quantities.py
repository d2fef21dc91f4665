"""Kubernetes quantities read as exact values: every suffix form, signs, fractions, refusals."""

from fractions import Fraction

import pytest

from vnpu_core import errors, quantities
from vnpu_core.quantities import Form


@pytest.mark.parametrize(
    ("value", "number", "form"),
    [
        ("4096", 4096, Form.DECIMAL_SI),
        (4096, 4096, Form.DECIMAL_SI),
        ("3k", 3000, Form.DECIMAL_SI),
        ("32k", 32000, Form.DECIMAL_SI),
        ("1.5k", 1500, Form.DECIMAL_SI),
        ("3M", 3_000_000, Form.DECIMAL_SI),
        ("1E", 10**18, Form.DECIMAL_SI),  # a bare E is exa, not an exponent
        ("3000m", 3, Form.DECIMAL_SI),
        ("1500m", Fraction(3, 2), Form.DECIMAL_SI),
        ("2.5", Fraction(5, 2), Form.DECIMAL_SI),
        (".5", Fraction(1, 2), Form.DECIMAL_SI),
        ("5.", 5, Form.DECIMAL_SI),
        ("7n", Fraction(7, 10**9), Form.DECIMAL_SI),
        ("+3", 3, Form.DECIMAL_SI),
        ("-3", -3, Form.DECIMAL_SI),
        ("007", 7, Form.DECIMAL_SI),
        ("3e3", 3000, Form.DECIMAL_EXPONENT),
        ("3E3", 3000, Form.DECIMAL_EXPONENT),
        ("3e+3", 3000, Form.DECIMAL_EXPONENT),
        ("32e3", 32000, Form.DECIMAL_EXPONENT),
        ("5e-1", Fraction(1, 2), Form.DECIMAL_EXPONENT),
        ("1.2e3", 1200, Form.DECIMAL_EXPONENT),
        (3000.0, 3000, Form.DECIMAL_SI),  # a YAML float
        (1e20, 10**20, Form.DECIMAL_EXPONENT),
        ("1Ki", 1024, Form.BINARY_SI),
        ("4Gi", 4 * 2**30, Form.BINARY_SI),
        ("4096Mi", 4096 * 2**20, Form.BINARY_SI),
        ("0.5Ki", 512, Form.BINARY_SI),
    ],
)
def test_every_form_reads_as_its_exact_value(value: object, number: Fraction, form: Form) -> None:
    quantity = quantities.parse(value)
    assert quantity.value == number
    assert quantity.form is form
    assert quantity.whole == (Fraction(number).denominator == 1)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "is not a quantity"),
        ("two", "is not a quantity"),
        ("1.2.3", "is not a quantity"),
        ("4 Gi", "is not a quantity"),
        ("4GB", "unknown suffix 'GB'"),
        ("4K", "unknown suffix 'K'"),  # kilo is lowercase
        ("1i", "unknown suffix 'i'"),
        ("1e", "unknown suffix 'e'"),
        ("1e3.5", "is not a quantity"),
        ("1e99999", "exponent 99999 is out of range"),
        ("Mi", "is not a quantity"),
        (True, "must be a string or a number"),
        (None, "must be a string or a number"),
        ([1], "must be a string or a number"),
        (float("inf"), "is not a quantity"),
    ],
)
def test_what_is_not_a_quantity_is_refused_with_the_value(value: object, words: str) -> None:
    with pytest.raises(errors.QuantityError) as caught:
        quantities.parse(value)
    assert caught.value.value == value
    assert words in caught.value.problem
    assert repr(value) in str(caught.value)
