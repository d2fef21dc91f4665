"""Errors of the simulated kubelet; every module of ``vnpu_sandbox.kubelet`` raises these.

Each carries the data a caller needs, and its text is the kubelet's own wording where the
kubelet has one, because that text ends up where users read it (a pod's status message,
a device plugin's registration error)::

    KubeletError
    ├── RegistrationError   a RegisterRequest is refused (field, value, problem)
    ├── AdmissionError      a container cannot get its devices (resource); the pod is rejected
    │   └── PluginCallError a call to a device plugin failed (resource, method, code, details)
    ├── DraError            DRA: a claim cannot be prepared or unprepared now (claim, problem);
    │                       always retried, the pod waits in Pending meanwhile
    ├── CheckpointError     the device checkpoint file cannot be read (path, problem)
    ├── PodNotFoundError    no pod of that name runs on this node (namespace, name)
    └── ApiError            a Kubernetes API call failed (verb, target, status, message);
                            ``temporary`` says whether retrying may help

``ApiError`` is worth retrying when ``temporary`` is true; ``DraError`` always is (the kubelet
retries preparing a pod's claims until it succeeds or the pod goes away).
"""

from __future__ import annotations

import grpc


class KubeletError(Exception):
    """Base of every error raised by the simulated kubelet."""


class RegistrationError(KubeletError):
    """A device plugin's RegisterRequest is refused; ``field`` names the request field at fault."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        super().__init__(problem)


class AdmissionError(KubeletError):
    """The device manager cannot give a container the devices of ``resource``.

    The text is the kubelet device manager's error; the pod is then rejected with reason
    ``UnexpectedAdmissionError`` and the message
    ``Pod was rejected: Allocate failed due to <text>, which is unexpected``.
    """

    def __init__(self, resource: str, problem: str) -> None:
        self.resource = resource
        self.problem = problem
        super().__init__(problem)


def go_code_name(code: grpc.StatusCode) -> str:
    """A gRPC status code as grpc-go prints it (``INVALID_ARGUMENT`` -> ``InvalidArgument``)."""
    if code is grpc.StatusCode.CANCELLED:
        return "Canceled"
    if code is grpc.StatusCode.OK:
        return "OK"
    return "".join(part.capitalize() for part in code.name.split("_"))


class PluginCallError(AdmissionError):
    """A gRPC call to the plugin serving ``resource`` failed.

    ``rpc_text`` renders the failure as grpc-go does (``rpc error: code = Unknown desc = ...``),
    which is what the kubelet puts in its messages.
    """

    def __init__(
        self, resource: str, method: str, code: grpc.StatusCode, details: str, *, wrap: str = ""
    ) -> None:
        self.method = method
        self.code = code
        self.details = details
        self.rpc_text = f"rpc error: code = {go_code_name(code)} desc = {details}"
        super().__init__(resource, wrap.format(self.rpc_text) if wrap else self.rpc_text)

    @classmethod
    def from_rpc(
        cls, resource: str, method: str, exc: grpc.RpcError, *, wrap: str = ""
    ) -> PluginCallError:
        """Translate a failed call; the RpcErrors grpc raises also carry ``code()`` and ``details()``."""
        code_of = getattr(exc, "code", None)
        details_of = getattr(exc, "details", None)
        if callable(code_of) and callable(details_of):
            code = code_of()
            if isinstance(code, grpc.StatusCode):
                return cls(resource, method, code, str(details_of() or ""), wrap=wrap)
        return cls(resource, method, grpc.StatusCode.UNKNOWN, str(exc), wrap=wrap)


class DraError(KubeletError):
    """Preparing or unpreparing the ResourceClaims of a pod failed; the text is the kubelet DRA
    manager's (``NodePrepareResources failed for ResourceClaim x: ...``). ``claim`` names the
    claim at fault when there is one."""

    def __init__(self, problem: str, claim: str = "") -> None:
        self.claim = claim
        self.problem = problem
        super().__init__(problem)


class CheckpointError(KubeletError):
    """The checkpoint file at ``path`` cannot be read back."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"checkpoint {path}: {problem}")


class PodNotFoundError(KubeletError):
    """No pod ``namespace/name`` is running on this node."""

    def __init__(
        self, namespace: str, name: str, problem: str = "not running on this node"
    ) -> None:
        self.namespace = namespace
        self.name = name
        super().__init__(f"pod {namespace}/{name}: {problem}")


class ApiError(KubeletError):
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
