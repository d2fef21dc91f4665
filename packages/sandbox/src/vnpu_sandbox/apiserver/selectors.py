"""Label and field selectors: parsing with the real server's error texts, and matching.

``routes`` parses the ``labelSelector`` and ``fieldSelector`` query parameters once per
request into ``Selector``; ``store`` (list) and ``watch`` match objects with it; ``admission``
matches webhooks' ``namespaceSelector``/``objectSelector`` with ``LabelSelector`` structs,
``strategies`` a workload's selector with its template's labels, and ``tables`` and ``scales``
print such structs in the server's string form.
Label syntax: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``, ``!k``,
``k>1``, ``k<1``. Field syntax: ``f=v``, ``f==v``, ``f!=v``, comma-separated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vnpu_sandbox.apiserver import errors, resources

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_PART_HELP = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
_SPECIAL = " \t\r\n,()!=<>"
_OPERATORS = ("in", "notin", "=", "==", "!=", "gt", "lt")


class SelectorError(ValueError):
    """A selector string that does not parse; the message is the real server's wording."""


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (``[prefix/]name``), or None if it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME_PART.match(name):
        return NAME_PART_HELP
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid label value, or None if it is."""
    if len(value) > 63:
        return "must be no more than 63 characters"
    return None if _LABEL_VALUE.match(value) else LABEL_VALUE_HELP


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        match self.operator:
            case "exists":
                return present
            case "!":
                return not present
            case "=" | "in":
                return present and value in self.values
            case "!=" | "notin":
                return not present or value not in self.values
            case _:
                try:
                    number, bound = int(value), int(self.values[0])
                except ValueError:
                    return False
                return present and (number > bound if self.operator == "gt" else number < bound)


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char in " \t\r\n":
            i += 1
        elif char in "(),":
            tokens.append(char)
            i += 1
        elif char in "!=<>":
            two = text[i : i + 2]
            if two in ("==", "!="):
                tokens.append(two)
                i += 2
            else:
                tokens.append(char)
                i += 1
        else:
            start = i
            while i < len(text) and text[i] not in _SPECIAL:
                i += 1
            tokens.append(text[start:i])
    return tokens


def _is_identifier(token: str | None) -> bool:
    return token is not None and token not in ("(", ")", ",", "!", "=", "==", "!=", "<", ">")


class _LabelParser:
    """A recursive-descent parser over the tokens of one label selector."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.position = 0

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        self.position += 1
        return token or ""

    def values(self, key: str, operator: str) -> tuple[str, ...]:
        values: list[str] = []
        if operator in ("in", "notin"):
            if (opening := self.take()) != "(":
                raise SelectorError(f"found '{opening}', expected: '('")
            while self.peek() != ")":
                token = self.take()
                if token == ",":
                    continue
                if not _is_identifier(token) or not token:
                    raise SelectorError(f"found '{token}', expected: ',', ')' or identifier")
                values.append(token)
            self.take()
        else:
            values.append(self.take() if _is_identifier(self.peek()) else "")
            if operator in ("gt", "lt"):
                if not re.fullmatch(r"-?\d+", values[0]):
                    raise SelectorError(
                        "unable to parse requirement: for 'Gt', 'Lt' operators, "
                        "the value must be an integer"
                    )
                return tuple(values)
        for value in values:
            if problem := label_value_problem(value):
                raise SelectorError(
                    f'unable to parse requirement: values[0][{key}]: Invalid value: "{value}": {problem}'
                )
        return tuple(values)

    def requirement(self) -> Requirement:
        negated = self.peek() == "!"
        if negated:
            self.take()
        key = self.take()
        if not key or not _is_identifier(key):
            raise SelectorError(f"found '{key}', expected: identifier")
        if problem := label_key_problem(key):
            raise SelectorError(
                f'unable to parse requirement: key: Invalid value: "{key}": {problem}'
            )
        if negated or self.peek() in (None, ","):
            return Requirement(key, "!" if negated else "exists")
        written = self.take()
        operator = {"==": "=", ">": "gt", "<": "lt"}.get(written, written)
        if operator not in _OPERATORS:
            raise SelectorError(f"found '{written}', expected: {', '.join(_OPERATORS)}")
        return Requirement(key, operator, self.values(key, operator))

    def parse(self) -> tuple[Requirement, ...]:
        requirements: list[Requirement] = []
        while self.peek() is not None:
            requirements.append(self.requirement())
            if self.peek() not in (None, ","):
                raise SelectorError(f"found '{self.peek()}', expected: ',' or 'end of string'")
            self.take()
        return tuple(requirements)


def parse_labels(text: str) -> tuple[Requirement, ...]:
    """Parse a label selector string; raises ``SelectorError`` with the real server's text."""
    return _LabelParser(text).parse()


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts, current, escaped = [], "", False
    for char in text:
        if escaped:
            current += char
            escaped = False
        elif char == "\\":
            current += char
            escaped = True
        elif char == separator:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def parse_fields(text: str, resource: resources.Resource) -> tuple[Requirement, ...]:
    """Parse a field selector and check each label is selectable on ``resource``."""
    requirements: list[Requirement] = []
    for term in _split_unescaped(text, ","):
        if not term.strip():
            continue
        match = re.match(r"^(.*?)(!=|==|=)(.*)$", term)
        if match is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        field, operator, value = match.group(1).strip(), match.group(2), _unescape(match.group(3))
        if field not in resource.field_labels:
            raise SelectorError(f"field label not supported: {field}")
        requirements.append(Requirement(field, "!=" if operator == "!=" else "=", (value,)))
    return tuple(requirements)


@dataclass(frozen=True)
class Selector:
    """Parsed ``labelSelector`` and ``fieldSelector`` of one request (both may be empty)."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, label_text: str, field_text: str, resource: resources.Resource) -> Selector:
        try:
            return cls(parse_labels(label_text), parse_fields(field_text, resource))
        except SelectorError as exc:
            raise errors.BadRequest(str(exc)) from exc

    def matches(self, obj: dict[str, Any]) -> bool:
        if self.labels:
            labels = obj.get("metadata", {}).get("labels") or {}
            if not all(r.matches(labels) for r in self.labels):
                return False
        for requirement in self.fields:
            actual = resources.field_value(obj, requirement.key)
            if (actual == requirement.values[0]) != (requirement.operator == "="):
                return False
        return True

    def single_name(self) -> str | None:
        """The name an equality ``metadata.name`` requirement pins, if any."""
        for requirement in self.fields:
            if requirement.key == "metadata.name" and requirement.operator == "=":
                return requirement.values[0]
        return None


def label_selector_matches(selector: object, labels: Mapping[str, str]) -> bool:
    """Match a ``LabelSelector`` struct (matchLabels, matchExpressions); None or {} matches all."""
    if not isinstance(selector, dict):
        return True
    match_labels = selector.get("matchLabels") or {}
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key = str(expression.get("key", ""))
        values = tuple(str(v) for v in expression.get("values") or [])
        operator = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}.get(
            str(expression.get("operator")), ""
        )
        if not operator or not Requirement(key, operator, values).matches(labels):
            return False
    return True


def label_selector_text(selector: object) -> str:
    """A ``LabelSelector`` struct in the string form the real server prints (``app=web,tier in
    (a,b)``): requirements sorted by key, as ``Scale.status.selector`` and the SELECTOR column show."""
    if not isinstance(selector, dict):
        return ""
    parts: list[tuple[str, str]] = [
        (str(key), f"{key}={value}") for key, value in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        if not isinstance(expression, dict):
            continue
        key = str(expression.get("key", ""))
        values = ",".join(sorted(str(v) for v in expression.get("values") or []))
        operator = str(expression.get("operator"))
        text = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(operator)
        if text is not None:
            parts.append((key, text))
    return ",".join(text for _, text in sorted(parts, key=lambda part: part[0]))
