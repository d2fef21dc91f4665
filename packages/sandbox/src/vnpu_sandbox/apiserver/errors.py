"""Errors of the API emulator, each rendered as the Status object kube-apiserver sends.

Every module of the emulator raises these; ``routes`` turns one into an HTTP response whose
code, ``reason``, ``message`` and ``details`` are shaped like the real server's, so clients
(the ``kubernetes`` Python client, kubectl, client-go) react to them as they would in a cluster.
The state file has its own error, raised at start-up and never sent over HTTP::

    ApiError (code, reason, message, details)
    ├── BadRequest              400 BadRequest
    ├── Forbidden               403 Forbidden
    ├── NotFound                404 NotFound (resource, name)
    ├── MethodNotAllowed        405 MethodNotAllowed
    ├── NotAcceptable           406 NotAcceptable
    ├── AlreadyExists           409 AlreadyExists (resource, name)
    ├── Conflict                409 Conflict (resource, name)
    ├── Expired                 410 Expired
    ├── RequestEntityTooLarge   413 RequestEntityTooLarge
    ├── UnsupportedMediaType    415 UnsupportedMediaType
    ├── Invalid                 422 Invalid (kind, name, field errors)
    ├── PatchFailed             422 Invalid (cause)
    ├── InternalError           500 InternalError
    ├── Timeout                 504 Timeout
    └── WebhookDenied           the webhook's own code (at least 400) and reason (webhook)
    StateFileError (path, reason)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

Json = dict[str, Any]

FieldErrorType = Literal["Required", "Invalid", "Forbidden", "NotSupported", "Duplicate", "TooLong"]

_FIELD_TEXT: dict[FieldErrorType, tuple[str, str]] = {
    "Required": ("Required value", "FieldValueRequired"),
    "Invalid": ("Invalid value", "FieldValueInvalid"),
    "Forbidden": ("Forbidden", "FieldValueForbidden"),
    "NotSupported": ("Unsupported value", "FieldValueNotSupported"),
    "Duplicate": ("Duplicate value", "FieldValueDuplicate"),
    "TooLong": ("Too long", "FieldValueTooLong"),
}
_SHOWS_VALUE = {"Invalid", "NotSupported", "Duplicate"}


class GoValue(str):
    """A value already rendered as Go prints it (``map[string]string{"app":"web"}``): ``quote``
    leaves it as is."""


def go_string_map(value: object) -> GoValue:
    """A label map as Go's ``%#v`` prints a ``map[string]string`` (keys sorted; nil if absent)."""
    if not isinstance(value, dict):
        return GoValue("map[string]string(nil)")
    pairs = ", ".join(
        f"{json.dumps(str(k))}:{json.dumps(str(v))}" for k, v in sorted(value.items())
    )
    return GoValue(f"map[string]string{{{pairs}}}")


def _go_strings(values: object) -> str:
    if not isinstance(values, list):
        return "[]string(nil)"
    return "[]string{" + ", ".join(json.dumps(str(v)) for v in values) + "}"


def go_label_selector(value: object) -> GoValue:
    """A ``LabelSelector`` as Go's ``%#v`` prints it in field errors."""
    selector = value if isinstance(value, dict) else {}
    expressions = [e for e in selector.get("matchExpressions") or [] if isinstance(e, dict)]
    if expressions:
        items = ", ".join(
            "v1.LabelSelectorRequirement{"
            f"Key:{json.dumps(str(e.get('key', '')))}, "
            f"Operator:{json.dumps(str(e.get('operator', '')))}, "
            f"Values:{_go_strings(e.get('values'))}}}"
            for e in expressions
        )
        rendered = f"[]v1.LabelSelectorRequirement{{{items}}}"
    else:
        rendered = "[]v1.LabelSelectorRequirement(nil)"
    labels = go_string_map(selector.get("matchLabels"))
    return GoValue(f"v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{rendered}}}")


def quote(value: object) -> str:
    """A value as Go's ``%q``/``%v`` prints it in API messages (strings double-quoted)."""
    if isinstance(value, GoValue):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


@dataclass(frozen=True)
class FieldError:
    """One invalid field: where it is, what is wrong and the offending value."""

    field: str
    type: FieldErrorType
    value: object = None
    detail: str = ""

    def body(self) -> str:
        text, _ = _FIELD_TEXT[self.type]
        if self.type in _SHOWS_VALUE:
            text = f"{text}: {quote(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> Json:
        return {"reason": _FIELD_TEXT[self.type][1], "message": self.body(), "field": self.field}


class ApiError(Exception):
    """An error answered as a ``Status`` with ``code``, ``reason``, ``message`` and ``details``."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, details: Json | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def status(self) -> Json:
        body: Json = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def resource_details(group: str, resource: str, name: str) -> Json:
    """Status details naming an object: the real server puts the resource in ``kind``."""
    details: Json = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def qualified(group: str, resource: str) -> str:
    return f"{resource}.{group}" if group else resource


class BadRequest(ApiError):
    code = 400
    reason = "BadRequest"


class Forbidden(ApiError):
    code = 403
    reason = "Forbidden"


class _NamedObjectError(ApiError):
    """An error about one object, worded ``<resource> "<name>" <what>`` with the object in details."""

    what = ""

    def __init__(self, group: str, resource: str, name: str) -> None:
        super().__init__(
            f'{qualified(group, resource)} "{name}" {self.what}',
            resource_details(group, resource, name),
        )
        self.resource = resource
        self.name = name


class NotFound(_NamedObjectError):
    code = 404
    reason = "NotFound"
    what = "not found"


class MethodNotAllowed(ApiError):
    code = 405
    reason = "MethodNotAllowed"

    def __init__(self, method: str) -> None:
        super().__init__("the server does not allow this method on the requested resource")
        self.method = method


class NotAcceptable(ApiError):
    code = 406
    reason = "NotAcceptable"


class AlreadyExists(_NamedObjectError):
    code = 409
    reason = "AlreadyExists"
    what = "already exists"


class Conflict(ApiError):
    code = 409
    reason = "Conflict"

    def __init__(self, group: str, resource: str, name: str, why: str) -> None:
        super().__init__(
            f'Operation cannot be fulfilled on {qualified(group, resource)} "{name}": {why}',
            resource_details(group, resource, name),
        )
        self.resource = resource
        self.name = name


STALE_OBJECT = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


class Expired(ApiError):
    """410: a revision older than the event window; may carry a token to continue anyway."""

    code = 410
    reason = "Expired"

    def __init__(self, message: str, continue_token: str = "") -> None:
        super().__init__(message)
        self.continue_token = continue_token

    def status(self) -> Json:
        body = super().status()
        if self.continue_token:
            body["metadata"] = {"continue": self.continue_token}
        return body


class RequestEntityTooLarge(ApiError):
    code = 413
    reason = "RequestEntityTooLarge"


class UnsupportedMediaType(ApiError):
    code = 415
    reason = "UnsupportedMediaType"


class Invalid(ApiError):
    code = 422
    reason = "Invalid"

    def __init__(self, group: str, kind: str, name: str, errors: list[FieldError]) -> None:
        joined = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
        qualified_kind = f"{kind}.{group}" if group else kind
        details: Json = {"name": name}
        if group:
            details["group"] = group
        details["kind"] = kind
        details["causes"] = [error.cause() for error in errors]
        super().__init__(f'{qualified_kind} "{name}" is invalid: {joined}', details)
        self.kind = kind
        self.name = name
        self.errors = tuple(errors)


class PatchFailed(ApiError):
    """A patch that decodes but cannot be applied: the real server's 422 text, the cause in details."""

    code = 422
    reason = "Invalid"

    def __init__(self, cause: str) -> None:
        super().__init__(
            "the server rejected our request due to an error in our request",
            {"causes": [{"message": cause}]},
        )
        self.cause = cause


class InternalError(ApiError):
    code = 500
    reason = "InternalError"

    def __init__(self, cause: str) -> None:
        super().__init__(f"Internal error occurred: {cause}", {"causes": [{"message": cause}]})


class Timeout(ApiError):
    code = 504
    reason = "Timeout"


class WebhookDenied(ApiError):
    """A webhook said no: its status code (at least 400) and reason, the real server's wording."""

    def __init__(self, webhook: str, result: Json | None) -> None:
        result = result if isinstance(result, dict) else {}
        denied = f'admission webhook "{webhook}" denied the request'
        message = result.get("message") or result.get("reason")
        super().__init__(f"{denied}: {message}" if message else f"{denied} without explanation")
        code = result.get("code")
        self.code = code if isinstance(code, int) and code >= 400 else 400
        reason = result.get("reason")
        self.reason = reason if isinstance(reason, str) else ""
        details = result.get("details")
        self.details = details if isinstance(details, dict) else None
        self.webhook = webhook

    def status(self) -> Json:
        body = super().status()
        if not self.reason:
            del body["reason"]
        return body


class StateFileError(Exception):
    """The ``--state`` file cannot be read or written; names the file and the reason."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"state file {path}: {reason}")
        self.path = path
        self.reason = reason
