"""The pods bound to this node, from the Kubernetes API: the one module that imports the client.

``sampler`` calls ``Source.list`` on the ``pods`` refresh interval; ``attribution`` reads
the pods' vnpu annotations (``hami.io/<CW>-devices-allocated``, ``huawei.com/<CW>``) and
container names. Pods come back as the plain JSON the API sends (``_preload_content=False``),
which is what ``vnpu_core.ledger`` reads. One LIST with ``fieldSelector=spec.nodeName=<node>``
per refresh: a node holds tens of pods, so a watch would save little and add a stream to
keep alive. The client's exceptions and transport failures become ``errors.ApiError`` here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, cast

import kubernetes
import urllib3
from kubernetes.client import exceptions as kube_exceptions

from vnpu_exporter import errors

Json = dict[str, Any]


class Source(Protocol):
    """Where the pods bound to a node come from."""

    def list(self, node: str) -> list[Json]: ...

    def close(self) -> None: ...


def _untyped(function: Callable[..., Any]) -> Callable[..., Any]:
    """The kubernetes client has no type hints; call it through an explicit ``Any``."""
    return function


def _translate(exc: Exception, what: str) -> errors.ApiError:
    if isinstance(exc, kube_exceptions.ApiException):
        status = int(exc.status or 0)
        reason, message = str(exc.reason or ""), ""
        try:
            body = json.loads(exc.body or "{}")
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        except (ValueError, AttributeError):
            message = str(exc.body or "")[:200]
        return errors.ApiError(status, reason, f"{what}: {message or reason}")
    return errors.ApiError(0, type(exc).__name__, f"{what}: {exc}")


_FAILURES = (kube_exceptions.ApiException, urllib3.exceptions.HTTPError, OSError)


class KubePods:
    """``Source`` over the official client; each LIST waits at most ``timeout`` seconds."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float = 10.0) -> None:
        self._client = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self.timeout = timeout

    @classmethod
    def connect(cls, kubeconfig: Path | None, timeout: float = 10.0) -> KubePods:
        """A client from ``kubeconfig``, or from the in-cluster service account when None."""
        configuration = kubernetes.client.Configuration()
        try:
            if kubeconfig is None:
                _untyped(kubernetes.config.load_incluster_config)(
                    client_configuration=configuration
                )
            else:
                _untyped(kubernetes.config.load_kube_config)(
                    config_file=str(kubeconfig), client_configuration=configuration
                )
        except (kubernetes.config.ConfigException, OSError, ValueError) as exc:
            where = str(kubeconfig) if kubeconfig else "in-cluster service account"
            raise errors.SettingsError("kubeconfig", where, str(exc)) from exc
        return cls(kubernetes.client.ApiClient(configuration), timeout)

    def list(self, node: str) -> list[Json]:
        what = f"list pods on node {node}"
        try:
            response = _untyped(self._core.list_pod_for_all_namespaces)(
                field_selector=f"spec.nodeName={node}",
                _preload_content=False,
                _request_timeout=self.timeout,
            )
        except _FAILURES as exc:
            raise _translate(exc, what) from exc
        try:
            data = response.data
        except _FAILURES as exc:
            raise _translate(exc, what) from exc
        finally:
            response.release_conn()
        try:
            document = json.loads(data)
        except ValueError as exc:
            raise errors.ApiError(0, "BadResponse", f"{what}: the answer is not JSON") from exc
        items = document.get("items") if isinstance(document, dict) else None
        if not isinstance(items, list):
            raise errors.ApiError(0, "BadResponse", f"{what}: the answer has no items list")
        return [cast(Json, item) for item in items if isinstance(item, dict)]

    def close(self) -> None:
        _untyped(self._client.close)()
