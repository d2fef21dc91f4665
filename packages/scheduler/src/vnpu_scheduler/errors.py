"""Errors of the scheduler service, and which of them a retry can fix.

``wire`` raises ``BadRequest`` for a body kube-scheduler or the API server should never
send; ``binder`` raises ``BindError`` when a pod cannot be bound (the extender answers it in
``Error``); ``settings`` and ``cluster`` raise ``SettingsError``. The app turns each into the
reply its caller expects::

    SchedulerError
    ├── BadRequest          a request body is malformed (field, value)          -> HTTP 400
    │   └── BadReview       ... an AdmissionReview (uid, when it could be read, for the reply)
    ├── BindError           a pod cannot be bound to a node (pod, node, reason)
    └── SettingsError       a flag, environment value or kubeconfig is invalid at start (field, value)

The Kubernetes API's refusals and outages are ``vnpu_service.kubeapi.ApiError`` and its
subclasses (``NotFound``, ``Conflict`` for a failed resourceVersion precondition or a pod
already bound, ``Expired`` for a watch or list revision that is too old, ``Invalid``,
``Unavailable``): ``cluster`` translates the client's exceptions into them at its boundary
and ``binder``, ``nodelock``, ``informer`` and ``app`` catch them by those names.

``retryable`` says whether the same call may succeed later without any input changing.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base of every error raised by vnpu-scheduler."""

    retryable = False


class BadRequest(SchedulerError):
    """A request body does not have the shape its API defines; ``field`` is a JSON path.

    ``value`` is shown (cut at 80 characters) unless it is ``...``: not worth showing.
    """

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        if value is Ellipsis:
            super().__init__(f"{field}: {problem}")
            return
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}: {problem} (got {shown})")


class BadReview(BadRequest):
    """An AdmissionReview body is malformed; ``uid`` is its request's uid ('' if unreadable)."""

    def __init__(self, uid: str, field: str, value: object, problem: str) -> None:
        super().__init__(field, value, problem)
        self.uid = uid


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
