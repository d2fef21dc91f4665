"""The Kubernetes API as the scheduler uses it: the one module that imports the client.

``Cluster`` is the port; ``KubeCluster`` implements it with the official ``kubernetes``
client. Calls return plain dicts exactly as the API sends them (``_preload_content=False``
and ``json.loads``: the core modules read dicts, and it is several times faster than the
client's model classes). Every call is synchronous and blocking: ``informer`` runs the
list/watch loops in their own threads and ``binder`` runs writes in the app's thread pool.
The client's ``ApiException`` and urllib3's transport errors are translated here (and, for
a watch's stream, in ``vnpu_service.watch``, which ``watch`` opens its streams with) into
``vnpu_service.kubeapi.ApiError`` subclasses; the client itself is built by
``vnpu_service.kubeapi.client``.

A caller with a deadline (``binder``: every bind has one) sets it with ``deadline_at``; the
calls made under it, in whatever thread the context was copied to, wait no longer than the
time left (at least ``SHORTEST_CALL`` seconds), so a hung API server cannot hold a bind
past its deadline. A write wrapped in ``in_time`` is not sent at all once the deadline has
passed (a bind's Binding and its lock write, which may wait for a pool thread that long).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import kubernetes

from vnpu_scheduler import errors
from vnpu_service import kubeapi, watch

Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "vnpu-scheduler"
SHORTEST_CALL = 0.05
T = TypeVar("T")
_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "vnpu_scheduler_api_deadline", default=None
)


@contextlib.contextmanager
def deadline_at(when: float) -> Iterator[None]:
    """API calls made in this context (``time.monotonic`` clock) end by ``when``."""
    token = _deadline.set(when)
    try:
        yield
    finally:
        _deadline.reset(token)


def _limit(timeout: float) -> float:
    """``timeout``, cut to the time left before the context's deadline."""
    when = _deadline.get()
    if when is None:
        return timeout
    return max(SHORTEST_CALL, min(timeout, when - time.monotonic()))


def in_time(call: Callable[..., T]) -> Callable[..., T]:
    """``call``, refused with ``ApiError`` (status 0) when it would start after the deadline.

    The check runs where the call runs (a pool thread), so a write queued behind busy threads
    is dropped rather than sent late: other replicas take over the node lock of a bind whose
    deadline has passed (``nodelock``), and a Binding sent after that would race them.
    """

    @functools.wraps(call)
    def guarded(*args: Any) -> T:
        when = _deadline.get()
        if when is not None and time.monotonic() >= when:
            raise kubeapi.ApiError(
                0,
                "DeadlineExceeded",
                f"{getattr(call, '__name__', 'call')}: not sent, its deadline had passed",
            )
        return call(*args)

    return guarded


class Cluster(Protocol):
    """What the scheduler reads and writes in the cluster."""

    def list_nodes(self) -> tuple[list[Json], str]: ...

    def list_pods(
        self, node: str | None = None, namespace: str | None = None
    ) -> tuple[list[Json], str]: ...

    def list_resource_quotas(self) -> tuple[list[Json], str]: ...

    def get_config_map(self, namespace: str, name: str) -> Json | None: ...

    def create_lease(self, namespace: str, body: Json) -> Json: ...

    def get_lease(self, namespace: str, name: str) -> Json | None: ...

    def replace_lease(self, namespace: str, name: str, body: Json) -> Json: ...

    def delete_lease(self, namespace: str, name: str, resource_version: str) -> None: ...

    def watch(self, resource: str, resource_version: str, timeout: int) -> watch.Stream: ...

    def get_node(self, name: str) -> Json: ...

    def get_pod(self, namespace: str, name: str) -> Json: ...

    def patch_node_annotations(
        self, name: str, resource_version: str, annotations: dict[str, str | None]
    ) -> Json: ...

    def patch_pod_annotations(
        self, namespace: str, name: str, annotations: dict[str, str]
    ) -> Json: ...

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None: ...

    def record_event(
        self, pod: Json, kind: str, reason: str, message: str, name: str = ""
    ) -> None: ...

    def evict_pod(self, namespace: str, name: str, uid: str) -> None: ...

    def create_claim_template(self, namespace: str, body: Json) -> Json: ...

    def get_claim_template(self, namespace: str, name: str) -> Json | None: ...


class KubeCluster:
    """``Cluster`` over the official client; ``timeout`` bounds each non-watch call (seconds)."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: float = 10.0) -> None:
        self._client = api_client
        self._core = kubernetes.client.CoreV1Api(api_client)
        self._leases = kubernetes.client.CoordinationV1Api(api_client)
        self._resource = kubernetes.client.ResourceV1Api(api_client)
        self._timeout = timeout

    @classmethod
    def connect(
        cls, kubeconfig: Path | None, timeout: float = 10.0, pool_size: int = 16
    ) -> KubeCluster:
        """A client from ``kubeconfig``, or the in-cluster service account when None."""
        try:
            api_client = kubeapi.client(kubeconfig, pool_size=pool_size)
        except kubeapi.ConfigError as exc:
            raise errors.SettingsError("kubeconfig", exc.source, exc.problem) from exc
        return cls(api_client, timeout)

    def close(self) -> None:
        kubeapi.close(self._client)

    def list_nodes(self) -> tuple[list[Json], str]:
        listed = kubeapi.fetch(
            lambda: self._core.list_node(
                _preload_content=False, _request_timeout=_limit(self._timeout * 6)
            ),
            "list nodes",
        )
        return _items(listed)

    def list_pods(
        self, node: str | None = None, namespace: str | None = None
    ) -> tuple[list[Json], str]:
        """Every pod, those bound to ``node``, or those of ``namespace``."""
        if namespace is not None:
            listed = kubeapi.fetch(
                lambda: self._core.list_namespaced_pod(
                    namespace, _preload_content=False, _request_timeout=_limit(self._timeout)
                ),
                f"list pods in namespace {namespace}",
            )
            return _items(listed)
        what = f"list pods on node {node}" if node else "list pods"
        selector = f"spec.nodeName={node}" if node else None
        listed = kubeapi.fetch(
            lambda: self._core.list_pod_for_all_namespaces(
                field_selector=selector,
                _preload_content=False,
                _request_timeout=_limit(self._timeout * (1 if node else 6)),
            ),
            what,
        )
        return _items(listed)

    def list_resource_quotas(self) -> tuple[list[Json], str]:
        listed = kubeapi.fetch(
            lambda: self._core.list_resource_quota_for_all_namespaces(
                _preload_content=False, _request_timeout=_limit(self._timeout * 6)
            ),
            "list resourcequotas",
        )
        return _items(listed)

    def get_config_map(self, namespace: str, name: str) -> Json | None:
        """The ConfigMap, or None when it does not exist."""
        read = self._core.read_namespaced_config_map
        return self._get_or_none(read, namespace, name, f"get configmap {namespace}/{name}")

    def create_lease(self, namespace: str, body: Json) -> Json:
        return self._create(self._leases.create_namespaced_lease, namespace, body, "lease")

    def create_claim_template(self, namespace: str, body: Json) -> Json:
        create = self._resource.create_namespaced_resource_claim_template
        return self._create(create, namespace, body, "resourceclaimtemplate")

    def _create(self, create: Callable[..., Any], namespace: str, body: Json, kind: str) -> Json:
        name = (body.get("metadata") or {}).get("name")
        return kubeapi.fetch(
            lambda: create(
                namespace,
                cast(Any, body),
                _preload_content=False,
                _request_timeout=_limit(self._timeout),
            ),
            f"create {kind} {namespace}/{name}",
        )

    def get_claim_template(self, namespace: str, name: str) -> Json | None:
        """The ResourceClaimTemplate, or None when it does not exist."""
        read = self._resource.read_namespaced_resource_claim_template
        what = f"get resourceclaimtemplate {namespace}/{name}"
        return self._get_or_none(read, namespace, name, what)

    def get_lease(self, namespace: str, name: str) -> Json | None:
        """The Lease, or None when it does not exist."""
        read = self._leases.read_namespaced_lease
        return self._get_or_none(read, namespace, name, f"get lease {namespace}/{name}")

    def _get_or_none(
        self, read: Callable[..., Any], namespace: str, name: str, what: str
    ) -> Json | None:
        try:
            return kubeapi.fetch(
                lambda: read(
                    name, namespace, _preload_content=False, _request_timeout=_limit(self._timeout)
                ),
                what,
            )
        except kubeapi.NotFound:
            return None

    def replace_lease(self, namespace: str, name: str, body: Json) -> Json:
        """PUT the Lease; ``metadata.resourceVersion`` in ``body`` makes it compare-and-swap."""
        return kubeapi.fetch(
            lambda: self._leases.replace_namespaced_lease(
                name,
                namespace,
                cast(Any, body),
                _preload_content=False,
                _request_timeout=_limit(self._timeout),
            ),
            f"replace lease {namespace}/{name}",
        )

    def delete_lease(self, namespace: str, name: str, resource_version: str) -> None:
        """Delete the Lease if it is still at ``resource_version`` (gone already: done)."""
        what = f"delete lease {namespace}/{name}"
        body = {"preconditions": {"resourceVersion": resource_version}}
        try:
            response: Any = self._leases.delete_namespaced_lease(
                name,
                namespace,
                body=cast(Any, body),
                _preload_content=False,
                _request_timeout=_limit(self._timeout),
            )
        except kubeapi.FAILURES as exc:
            error = kubeapi.translate(exc, what)
            if isinstance(error, kubeapi.NotFound):
                return
            raise error from exc
        _drain(response)

    def watch(self, resource: str, resource_version: str, timeout: int) -> watch.Stream:
        calls: dict[str, Callable[..., Any]] = {
            "nodes": self._core.list_node,
            "pods": self._core.list_pod_for_all_namespaces,
            "resourcequotas": self._core.list_resource_quota_for_all_namespaces,
        }
        return watch.open_stream(
            calls[resource],
            f"watch {resource}",
            resource_version,
            timeout,
            (self._timeout, timeout + 30),
        )

    def get_node(self, name: str) -> Json:
        return kubeapi.fetch(
            lambda: self._core.read_node(
                name, _preload_content=False, _request_timeout=_limit(self._timeout)
            ),
            f"get node {name}",
        )

    def get_pod(self, namespace: str, name: str) -> Json:
        return kubeapi.fetch(
            lambda: self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=_limit(self._timeout)
            ),
            f"get pod {namespace}/{name}",
        )

    def patch_node_annotations(
        self, name: str, resource_version: str, annotations: dict[str, str | None]
    ) -> Json:
        """Merge-patch annotations (None deletes) if the node is still at ``resource_version``."""
        body = {"metadata": {"resourceVersion": resource_version, "annotations": annotations}}
        return kubeapi.fetch(
            lambda: self._core.patch_node(
                name,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=_limit(self._timeout),
            ),
            f"patch node {name}",
        )

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str]) -> Json:
        """Merge-patch a pod's annotations (no precondition: the keys written are ours)."""
        body = {"metadata": {"annotations": annotations}}
        return kubeapi.fetch(
            lambda: self._core.patch_namespaced_pod(
                name,
                namespace,
                body,
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=_limit(self._timeout),
            ),
            f"patch pod {namespace}/{name}",
        )

    def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: dict[str, str]
    ) -> None:
        """POST a Binding: ``spec.nodeName`` and ``annotations`` land on the pod in one write."""
        what = f"bind pod {namespace}/{name} to node {node}"
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid,
                "annotations": annotations,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self._post(self._core.create_namespaced_pod_binding, what, name, namespace, body=body)

    def record_event(self, pod: Json, kind: str, reason: str, message: str, name: str = "") -> None:
        """A core/v1 Event about ``pod`` (``kind``: Normal or Warning), as kubectl describe
        shows; named ``name`` (409 if it exists) or generated."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace}
            if name
            else {"generateName": f"{meta.get('name', 'pod')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": meta.get("name"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        what = f"record event {reason} on pod {namespace}/{meta.get('name')}"
        self._post(self._core.create_namespaced_event, what, namespace, body=body)

    def evict_pod(self, namespace: str, name: str, uid: str) -> None:
        """POST a policy/v1 Eviction for the pod with this ``uid`` (a pod of the same name
        created since is left alone: 409). kube-apiserver deletes it gracefully, or answers
        429 while a PodDisruptionBudget forbids it (``kubeapi.Unavailable``, status 429)."""
        what = f"evict pod {namespace}/{name}"
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": {"preconditions": {"uid": uid}},
        }
        self._post(self._core.create_namespaced_pod_eviction, what, name, namespace, body=body)

    def _post(self, create: Callable[..., Any], what: str, *where: str, body: Json) -> None:
        """A create call whose answer is not needed: errors translated, the answer drained."""
        try:
            response: Any = create(
                *where,
                cast(Any, body),
                _preload_content=False,
                _request_timeout=_limit(self._timeout),
            )
        except kubeapi.FAILURES as exc:
            raise kubeapi.translate(exc, what) from exc
        _drain(response)


def _drain(response: Any) -> None:
    """Read the rest of an answer we do not need, so the connection can serve the next call."""
    try:
        response.drain_conn()
    finally:
        response.release_conn()


def _items(document: Json) -> tuple[list[Json], str]:
    items = document.get("items") or []
    version = str((document.get("metadata") or {}).get("resourceVersion") or "")
    return [item for item in items if isinstance(item, dict)], version
