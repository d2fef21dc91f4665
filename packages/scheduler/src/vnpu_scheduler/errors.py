"""Errors of the scheduler service, and which of them a retry can fix.

``cluster`` translates the Kubernetes client's exceptions into ``ApiError`` subclasses at
its boundary; ``wire`` raises ``BadRequest`` for a body kube-scheduler or the API server
should never send; ``binder`` raises ``BindError`` when a pod cannot be bound (the
extender answers it in ``Error``). The app turns each into the reply its caller expects::

    SchedulerError
    ├── BadRequest          a request body is malformed (field, value)          -> HTTP 400
    ├── ApiError            the Kubernetes API refused or failed (status, reason)
    │   ├── NotFound        404: the object is gone
    │   ├── Conflict        409: resourceVersion precondition failed, or already bound
    │   ├── Expired         410: a watch or list revision is too old; list again
    │   ├── Invalid         400/422: the API rejected what we sent
    │   └── Unavailable     5xx, 429, timeouts, connection errors (retryable)
    ├── BindError           a pod cannot be bound to a node (pod, node, reason)
    └── SettingsError       a flag or environment value is invalid at start (field, value)

``retryable`` says whether the same call may succeed later without any input changing.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base of every error raised by vnpu-scheduler."""

    retryable = False


class BadRequest(SchedulerError):
    """A request body does not have the shape its API defines; ``field`` is a JSON path."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}: {problem} (got {shown})")


class ApiError(SchedulerError):
    """The Kubernetes API answered ``status`` (0 when no answer came) with ``reason``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"Kubernetes API {status} {reason}: {message}")


class NotFound(ApiError):
    """404: the object does not exist (any more)."""


class Conflict(ApiError):
    """409: a resourceVersion precondition failed, or the pod is already bound."""

    retryable = True


class Expired(ApiError):
    """410: the revision asked for is older than the server keeps; list again."""

    retryable = True


class Invalid(ApiError):
    """400 or 422: the API refused what was sent; sending it again cannot help."""


class Unavailable(ApiError):
    """The API could not be reached or is overloaded (5xx, 429, timeouts)."""

    retryable = True


class BindError(SchedulerError):
    """Pod ``pod`` (namespace/name) cannot be bound to ``node``; ``reason`` is a short code."""

    def __init__(self, pod: str, node: str, reason: str, message: str) -> None:
        self.pod = pod
        self.node = node
        self.reason = reason
        self.message = message
        super().__init__(f"pod {pod} on node {node}: {message}")


class SettingsError(SchedulerError):
    """A setting is invalid at start; the service refuses to run."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"setting {field}: {problem} (got {value!r})")
