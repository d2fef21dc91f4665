"""Errors raised by vnpu-core; every service translates these at its boundary.

Each error carries the data a caller needs (which field, which value), not only text::

    VnpuError
    ├── ConfigError        a device-config file is invalid (path inside the file, value)
    ├── ProtocolError      a wire annotation cannot be decoded (key, bad fragment)
    ├── QuantityError      a resource quantity is not one Kubernetes can read (value)
    ├── RequestError       a pod asks for something malformed or impossible (container, resource, value)
    │   └── PinError       its pinned template (``vnpu.io/template``) cannot serve it (field, value)
    ├── QuotaError         a ResourceQuota or the tenants config is invalid (source, path, value)
    ├── InputFileError     a `vnpu plan` input file is invalid (file, path, value)
    └── DocumentError      YAML text cannot be read, or goes past a limit (line, column, value, limit)

``DocumentError`` comes from ``vnpu_core.yamldoc``; the loaders that call it turn it into their
own error (``ConfigError``, ``QuotaError``, ``InputFileError``), so callers meet it only there.

None of them is worth retrying: the input has to change first.
"""

from __future__ import annotations


class VnpuError(Exception):
    """Base of every error raised by vnpu-core."""


class ConfigError(VnpuError):
    """A device-config document is invalid at ``path`` (e.g. ``vnpus.configs[2].templates[0].memory``)."""

    def __init__(self, path: str, value: object, problem: str, *, source: str = "") -> None:
        self.path = path
        self.value = value
        self.problem = problem
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {problem} (got {value!r})")


class ProtocolError(VnpuError):
    """An annotation value does not follow the wire grammar; ``fragment`` is the offending part."""

    def __init__(self, key: str, fragment: str, problem: str) -> None:
        self.key = key
        self.fragment = fragment
        self.problem = problem
        super().__init__(f"annotation {key}: {problem} (at {fragment!r})")


class QuantityError(VnpuError):
    """A resource quantity does not follow the Kubernetes grammar (``4096``, ``3k``, ``4Gi``)."""

    def __init__(self, value: object, problem: str) -> None:
        self.value = value
        self.problem = problem
        super().__init__(f"quantity {value!r}: {problem}")


class RequestError(VnpuError):
    """A container's NPU request is malformed or can never be satisfied by any chip of its model."""

    def __init__(self, container: str, resource: str, value: object, problem: str) -> None:
        self.container = container
        self.resource = resource
        self.value = value
        self.problem = problem
        super().__init__(f"container {container!r}: {resource}={value}: {problem}")


class PinError(RequestError):
    """The template a pod pins (annotation ``key``) cannot serve it: unknown, of another chip
    model, smaller than a container asks, or pinned on whole chips or soft slices.

    ``field`` is where the pin is written (``metadata.annotations[vnpu.io/template]``) and
    leads the message; ``container`` is the container it cannot serve, or ``(pod)`` when the
    pin is wrong for the whole pod. ``resource`` is the annotation key.
    """

    def __init__(self, container: str, key: str, value: str, problem: str) -> None:
        super().__init__(container, key, value, problem)
        self.field = f"metadata.annotations[{key}]"
        who = "" if container == "(pod)" else f"container {container!r}: "
        self.args = (f"{self.field}={value}: {who}{problem}",)


class QuotaError(VnpuError):
    """An NPU quota cannot be read: ``source`` names the object (``ResourceQuota ml/npu``, the
    tenants config key), ``path`` the field inside it (``spec.hard["limits.vnpu.io/aicore"]``,
    ``teams[1].nominal.memory``)."""

    def __init__(self, source: str, path: str, value: object, problem: str) -> None:
        self.source = source
        self.path = path
        self.value = value
        self.problem = problem
        super().__init__(f"{source}: {path}: {problem} (got {value!r})")


class InputFileError(VnpuError):
    """A planner input file is invalid at ``path``."""

    def __init__(self, file: str, path: str, value: object, problem: str) -> None:
        self.file = file
        self.path = path
        self.value = value
        self.problem = problem
        super().__init__(f"{file}: {path}: {problem} (got {value!r})")


class DocumentError(VnpuError):
    """YAML text that cannot be read: a syntax error, or something refused by a limit.

    ``summary`` says what (``YAML syntax error``, ``YAML alias *a refused``, ``YAML nested too
    deeply``, ``YAML document too large``), ``detail`` how; ``line`` and ``column`` (from 1; 0
    when the whole text is meant) where; ``value`` is the text of that line, or the figure that
    was too large; ``limit`` the bound that was passed (None for a syntax error).
    """

    def __init__(
        self,
        summary: str,
        detail: str,
        value: object,
        *,
        line: int = 0,
        column: int = 0,
        limit: int | None = None,
    ) -> None:
        self.summary = summary
        self.detail = detail
        self.value = value
        self.line = line
        self.column = column
        self.limit = limit
        at = f" at {self.where}" if self.where else ""
        super().__init__(f"{summary}{at}: {detail} (got {value!r})")

    @property
    def where(self) -> str:
        """``line 3, column 5``, or "" when the whole text is meant."""
        return f"line {self.line}, column {self.column}" if self.line else ""
