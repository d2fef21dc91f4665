"""The simulated kubelet's status manager: pod status writes and final deletes, retried until they land.

``podworker`` hands it what the API should say about a pod (:meth:`StatusManager.set_status`)
and the pods to delete for good (:meth:`StatusManager.delete`), and goes on at once. A thread
of its own sends them, as the kubelet's status manager does: straight away when something is
handed over, and every ``sync_seconds`` (the kubelet's 10 s) for whatever has not landed yet,
so a write or a delete that failed because kube-apiserver or etcd was away is sent again
until it goes through. For each pod the status goes first, then the delete.

* A status is sent as a ``pods/status`` merge patch that carries the pod's UID: kube-apiserver
  refuses it (409) when the name now belongs to another pod, as the kubelet's patches do.
* The final delete has grace period 0 and the pod's UID as its precondition.
* A pod that is gone (404), or whose name now belongs to another pod (409), is forgotten;
  so is one whose deletion the pod watch reports (:meth:`StatusManager.forget`).

A newer status for a pod replaces one not yet sent: only the latest is ever written.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from vnpu_sandbox.kubelet import apiclient, errors

log = logging.getLogger(__name__)

Json = dict[str, Any]
SYNC_SECONDS = 10.0
"""The kubelet status manager's sync period."""


@dataclass
class _Pending:
    namespace: str
    name: str
    status: Json | None = None
    """The status to write (None: written already)."""
    version: int = 0
    delete: bool = False
    """Delete the pod for good once its status is written."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _identity(pod: Json) -> tuple[str, str, str]:
    meta = pod.get("metadata") or {}
    return str(meta.get("uid", "")), str(meta.get("namespace", "")), str(meta.get("name", ""))


class StatusManager:
    """What the kubelet still has to tell the API about its pods, and the thread that tells it."""

    def __init__(self, api: apiclient.KubeApi, node: str, sync_seconds: float = SYNC_SECONDS):
        self._api = api
        self._node = node
        self._sync_seconds = sync_seconds
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_status(self, pod: Json, status: Json) -> None:
        """Write ``status`` for ``pod`` soon, replacing any status of it not yet written."""
        uid, namespace, name = _identity(pod)
        with self._lock:
            entry = self._pending.setdefault(uid, _Pending(namespace, name))
            entry.status = status
            entry.version += 1
        self._wake.set()

    def delete(self, pod: Json) -> None:
        """Delete ``pod`` for good soon (after its pending status, if any)."""
        uid, namespace, name = _identity(pod)
        with self._lock:
            self._pending.setdefault(uid, _Pending(namespace, name)).delete = True
        self._wake.set()

    def forget(self, uid: str) -> None:
        """The pod is gone from the API: nothing more to write about it."""
        with self._lock:
            self._pending.pop(uid, None)

    # -- the sync thread ---------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name=f"podstatus-{self._node}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._sync_seconds)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.sync()
            except Exception:
                log.exception("pod_status_sync_crashed node=%s", self._node)

    def sync(self) -> None:
        """Send everything pending once, pod by pod, in the order they were handed over."""
        with self._lock:
            uids = list(self._pending)
        for uid in uids:
            if self._stop.is_set():
                return
            self._sync_pod(uid)

    def _sync_pod(self, uid: str) -> None:
        with self._lock:
            entry = self._pending.get(uid)
            if entry is None:
                return
            status, version, delete = entry.status, entry.version, entry.delete
        step = "pod_status_write_failed"
        try:
            if status is not None:
                self._api.patch_pod_status(entry.namespace, entry.name, status, uid)
                with self._lock:
                    if entry.version == version:
                        entry.status = None
            step = "pod_delete_failed"
            if delete:
                self._api.delete_pod(entry.namespace, entry.name, uid)
                log.info("pod_deleted pod=%s", entry.key)
        except errors.ApiError as exc:
            if exc.status in (404, 409):
                log.info("pod_status_dropped pod=%s error=%s", entry.key, exc)
                self._drop(uid, entry)
                return
            log.warning("%s pod=%s error=%s", step, entry.key, exc)
            return
        with self._lock:
            if entry.status is None and entry.delete == delete:
                self._drop_locked(uid, entry)

    def _drop(self, uid: str, entry: _Pending) -> None:
        with self._lock:
            self._drop_locked(uid, entry)

    def _drop_locked(self, uid: str, entry: _Pending) -> None:
        if self._pending.get(uid) is entry:
            del self._pending[uid]
