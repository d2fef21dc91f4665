"""Errors of the scheduling driver; every module of ``vnpu_sandbox.scheduling`` raises these.

Each carries the data its caller needs (the field at fault, the call that failed), and its
text is what kube-scheduler would print where kube-scheduler has a wording, because the text
ends up in a pod's events::

    SchedulingError
    ├── ConfigError     the KubeSchedulerConfiguration file is unusable (field, value, problem)
    ├── PodSpecError    a pod cannot be read (field, value, problem); retrying cannot help
    ├── ApiError        a Kubernetes API call failed (verb, target, status, message);
    │                   ``temporary`` says whether retrying may help
    └── ExtenderError   an extender call failed or answered badly (verb, url, problem)

A ``ConfigError`` stops the command at start; the others are logged, reported on the pod and
retried with backoff.
"""

from __future__ import annotations


class SchedulingError(Exception):
    """Base of every error raised by the scheduling driver."""


class ConfigError(SchedulingError):
    """``field`` (a path such as ``extenders[0].weight``) of the configuration is unusable."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        shown = "" if value is None else f" (got {value!r})"
        super().__init__(f"{field}: {problem}{shown}")


class PodSpecError(SchedulingError):
    """``field`` of a pod (``spec.containers[0].resources.requests.cpu``) cannot be read."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class ApiError(SchedulingError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, verb: str, target: str, status: int, message: str) -> None:
        self.verb = verb
        self.target = target
        self.status = status
        self.message = message
        super().__init__(f"{verb} {target}: HTTP {status}: {message}")

    @property
    def temporary(self) -> bool:
        """True when the same call may succeed later (no answer, conflict, throttling, 5xx)."""
        return self.status == 0 or self.status in (409, 429) or self.status >= 500

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def expired(self) -> bool:
        """410 Gone: a watch or list from a resourceVersion the server no longer keeps."""
        return self.status == 410


class ExtenderError(SchedulingError):
    """An extender call ``verb`` to ``url`` failed; the text is kube-scheduler's for the case.

    The message is what kube-scheduler's HTTP extender returns: Go's ``Post "<url>": ...``
    for a transport failure, ``failed <verb> with extender at URL <url>, code <n>`` for a
    status other than 200, or the extender's own ``Error`` text.
    """

    def __init__(self, verb: str, url: str, problem: str) -> None:
        self.verb = verb
        self.url = url
        self.problem = problem
        super().__init__(problem)
