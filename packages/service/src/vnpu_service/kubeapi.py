"""The Kubernetes API as every vnpu service reaches it: the client, and what its failures mean.

Each service's cluster adapter (``vnpu_scheduler.cluster``, ``vnpu_device_plugin.cluster``,
``vnpu_exporter.pods``) builds its ``ApiClient`` with ``client``, reads answers with ``fetch``
(or ``document``) and turns every exception the ``kubernetes`` client or urllib3 raises
(``FAILURES``) into one of the classes below with ``translate``. The rest of each service
catches these classes, never the client's own::

    KubeError
    ├── ConfigError         no usable kubeconfig or in-cluster service account (source, problem)
    └── ApiError            the API refused or failed (status, reason, message); status 0: no answer
        ├── NotFound        404: the object is gone
        ├── Conflict        409: a resourceVersion precondition failed, or it exists already
        ├── Expired         410: the revision asked for is older than the server keeps; list again
        ├── Invalid         400, 403, 422: the API refused what was sent
        └── Unavailable     429, 5xx, no answer, or an answer that is not a JSON object

A status outside that table (401, 405, 415, ...) is a plain ``ApiError``. ``retryable`` says
whether the same call may succeed later without any input changing: true for ``Conflict``
(after a re-read), ``Expired`` (after a fresh list) and ``Unavailable`` (after a pause).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import kubernetes
import urllib3
import yaml
from kubernetes.client import exceptions as kube_exceptions

Json = dict[str, Any]

FAILURES: tuple[type[Exception], ...] = (
    kube_exceptions.ApiException,
    urllib3.exceptions.HTTPError,
    OSError,
)
"""What a call through the client raises when the API refuses or cannot be reached."""

_BAD_KUBECONFIG = (
    kubernetes.config.ConfigException,
    OSError,
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    yaml.YAMLError,
)
_BODY_SHOWN = 200  # characters of a non-JSON error body kept in the message


class KubeError(Exception):
    """Base of every error this module raises."""

    retryable = False


class ConfigError(KubeError):
    """No API client can be built from ``source`` (a kubeconfig path or the service account)."""

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


class ApiError(KubeError):
    """The Kubernetes API answered ``status`` (0 when no answer came) with ``reason``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"Kubernetes API {status} {reason}: {message}")


class NotFound(ApiError):
    """404: the object does not exist (any more)."""


class Conflict(ApiError):
    """409: the object changed since it was read, or exists already; re-read and redo."""

    retryable = True


class Expired(ApiError):
    """410: the revision asked for is older than the server keeps; list again."""

    retryable = True


class Invalid(ApiError):
    """400, 403 or 422: the API refused what was sent; sending it again cannot help."""


class Unavailable(ApiError):
    """The API could not be reached, is overloaded (5xx, 429) or answered something unreadable."""

    retryable = True


_BY_STATUS: dict[int, type[ApiError]] = {
    400: Invalid,
    403: Invalid,
    404: NotFound,
    409: Conflict,
    410: Expired,
    422: Invalid,
    429: Unavailable,
}


def error_for(status: int, reason: str, message: str) -> ApiError:
    """The ``ApiError`` subclass for an answer with HTTP ``status`` (0: none came)."""
    kind = _BY_STATUS.get(status)
    if kind is None:
        kind = Unavailable if status == 0 or status >= 500 else ApiError
    return kind(status, reason, message)


def translate(exc: Exception, what: str) -> ApiError:
    """The ``ApiError`` for a client or transport failure while doing ``what``.

    An ``ApiException`` keeps its status; the reason and message come from the Kubernetes
    ``Status`` in its body when there is one. Anything else (urllib3's errors, ``OSError``)
    means no answer came: ``Unavailable`` with status 0 and the exception's class as reason.
    """
    if isinstance(exc, kube_exceptions.ApiException):
        status = int(exc.status or 0)
        reason, message = str(exc.reason or ""), ""
        try:
            body = json.loads(exc.body or "{}")
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        except (ValueError, AttributeError, TypeError):
            message = str(exc.body or "")[:_BODY_SHOWN]
        return error_for(status, reason, f"{what}: {message or reason}")
    return Unavailable(0, type(exc).__name__, f"{what}: {exc}")


def document(data: bytes | str, what: str) -> Json:
    """The JSON object in an answer to ``what``; ``Unavailable`` (BadResponse) when it is not one."""
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise Unavailable(0, "BadResponse", f"{what}: the answer is not JSON ({exc})") from exc
    if not isinstance(parsed, dict):
        raise Unavailable(0, "BadResponse", f"{what}: the answer is not a JSON object")
    return cast(Json, parsed)


def fetch(call: Callable[[], Any], what: str) -> Json:
    """The JSON object the API answers to ``call``, which must pass ``_preload_content=False``.

    The answer is read whole and its connection goes back to the pool; a refusal, an outage
    or an unreadable answer raises the ``ApiError`` that ``translate`` or ``document`` gives.
    """
    try:
        response = call()
        try:
            data = response.data
        finally:
            response.release_conn()
    except FAILURES as exc:
        raise translate(exc, what) from exc
    return document(data, what)


def client(kubeconfig: Path | None, *, pool_size: int | None = None) -> kubernetes.client.ApiClient:
    """An API client from the ``kubeconfig`` file, or the pod's service account when None.

    ``pool_size`` is the most connections kept open to the API server (the client's default,
    4, when None). Raises ``ConfigError`` naming the file or the service account.
    """
    configuration = kubernetes.client.Configuration()
    try:
        if kubeconfig is None:
            _untyped(kubernetes.config.load_incluster_config)(client_configuration=configuration)
        else:
            _untyped(kubernetes.config.load_kube_config)(
                config_file=str(kubeconfig), client_configuration=configuration
            )
    except _BAD_KUBECONFIG as exc:
        source = str(kubeconfig) if kubeconfig is not None else "in-cluster service account"
        raise ConfigError(source, str(exc)) from exc
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    return kubernetes.client.ApiClient(configuration)


def close(api_client: kubernetes.client.ApiClient) -> None:
    """Close the client's connection pool (and its thread pool, if one was started)."""
    _untyped(api_client.close)()


def _untyped(function: Any) -> Callable[..., Any]:
    """The client's loaders and ``close`` carry no annotations; call them as what they are."""
    return cast(Callable[..., Any], function)
