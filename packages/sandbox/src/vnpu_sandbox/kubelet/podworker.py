"""The simulated kubelet's pod loop: watch the node's pods, admit them one at a time, in order.

``kubelet`` runs one :class:`PodWorker`. A watch thread lists then watches pods with the field
selector ``spec.nodeName=<node>`` (re-listing after a 410 or a lost connection) and queues what
it sees; a single worker thread handles the queue, so admissions, releases and simulated
completions never interleave:

* new pods arriving together (the first list, a burst of watch events) are admitted in
  creation-time order, then by name; each becomes Running, or Failed with the admission
  error, or stays Pending when a container cannot be created. As in the kubelet, which adds
  a pod to its pod manager before admitting it, the pod being admitted is active from the
  start of its admission: PodResources lists it (and ``Get`` finds it) while its devices are
  allocated, with the devices of the containers allocated so far; a rejected pod is not
  active any more;
* before an admitted pod's containers would start, its ResourceClaims are prepared
  (``dramanager``); while that fails the pod stays Pending (containers ``ContainerCreating``,
  a ``FailedPrepareDynamicResources`` event) and it is tried again every ``dra_retry_seconds``;
  PreStartContainer runs once the claims are prepared;
* a pod that is already Running when first seen (a kubelet restart) is adopted as running
  (its claims are prepared again, which drivers take as a no-op);
* deleted pods, pods with a ``deletionTimestamp`` (which the kubelet then deletes for good with
  grace period 0 and a UID precondition) and Succeeded/Failed pods free their devices and
  unprepare the claims no other pod uses; a failed unprepare is retried every
  ``dra_retry_seconds``, and a deleted pod is only deleted for good once it succeeded.

Status writes and final deletes go through ``statusmanager``, which sends them from a thread
of its own and retries them until they land; the worker never waits for the API.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnpu_sandbox.kubelet import (
    admission,
    allocations,
    apiclient,
    cdi,
    devicemanager,
    dramanager,
    drasync,
    errors,
    nodestatus,
    podevents,
    podresources,
    podstatus,
    statusmanager,
)

log = logging.getLogger(__name__)

Json = dict[str, Any]
RETRY_SECONDS = 1.0
TERMINAL = ("Succeeded", "Failed")


@dataclass
class _Tracked:
    pod: Json
    state: str
    """``admitting``, ``preparing``, ``running``, ``start-failed``, ``finished`` or ``deleting``."""
    ip: str | None = None


@dataclass(frozen=True)
class _Complete:
    namespace: str
    name: str
    exit_code: int
    done: Future[None]


def _meta(pod: Json) -> Json:
    meta = pod.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _key(pod: Json) -> str:
    return f"{_meta(pod).get('namespace', '')}/{_meta(pod).get('name', '')}"


class PodWorker:
    def __init__(
        self,
        api: apiclient.KubeApi,
        node: nodestatus.NodeIdentity,
        devices: devicemanager.DeviceManager,
        records: allocations.AllocationStore,
        statuses: statusmanager.StatusManager,
        watch_timeout_seconds: int = 300,
        dra: dramanager.DraManager | None = None,
        cdi_dir: Path | None = None,
        dra_retry_seconds: float = 10.0,
    ) -> None:
        self._api = api
        self._statuses = statuses
        self._node = node
        self._devices = devices
        self._records = records
        self._watch_timeout = watch_timeout_seconds
        self._queue: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._tracked: dict[str, _Tracked] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watch: apiclient.PodWatch | None = None
        self._threads: list[threading.Thread] = []
        self._network = ipaddress.ip_network(node.pod_cidr, strict=False)
        self._events = podevents.Recorder(api, node.name)
        self._dra = dra
        self._cdi_dir = cdi_dir
        self._claims = drasync.DraSync(dra, dra_retry_seconds, self._events.warning)
        self.synced = threading.Event()
        """Set once the first pod list has been handled."""

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._stop.clear()
        self._threads = [
            threading.Thread(
                target=self._watch_loop, name=f"podwatch-{self._node.name}", daemon=True
            ),
            threading.Thread(
                target=self._work_loop, name=f"podworker-{self._node.name}", daemon=True
            ),
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            watch = self._watch
        if watch is not None:
            watch.close()
        self._queue.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = []

    def complete(
        self, namespace: str, name: str, exit_code: int = 0, timeout: float = 10.0
    ) -> None:
        """Simulate every container of a running pod exiting with ``exit_code``."""
        done: Future[None] = Future()
        self._queue.put(("complete", _Complete(namespace, name, exit_code, done)))
        done.result(timeout=timeout)

    def active_pods(self) -> list[podresources.ActivePod]:
        with self._lock:
            tracked = [
                t
                for t in self._tracked.values()
                if t.state in ("admitting", "preparing", "running", "start-failed")
            ]
        out = []
        for item in tracked:
            spec = item.pod.get("spec") or {}
            names = [str(c.get("name", "")) for c in spec.get("containers") or []]
            names += [
                str(c.get("name", ""))
                for c in spec.get("initContainers") or []
                if c.get("restartPolicy") == "Always"
            ]
            meta = _meta(item.pod)
            out.append(
                podresources.ActivePod(
                    str(meta.get("uid", "")),
                    str(meta.get("namespace", "")),
                    str(meta.get("name", "")),
                    tuple(names),
                    item.pod,
                )
            )
        return sorted(out, key=lambda p: (p.namespace, p.name))

    # -- watch thread ------------------------------------------------------------------

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                items, version = self._api.list_pods(self._node.name)
                self._queue.put(("list", items))
                while not self._stop.is_set():
                    watch = self._api.watch_pods(self._node.name, version, self._watch_timeout)
                    with self._lock:
                        self._watch = watch
                    if self._stop.is_set():
                        watch.close()
                        return
                    for kind, obj in watch.events():
                        version = str(_meta(obj).get("resourceVersion") or version)
                        log.debug(
                            "pod_watch_event node=%s type=%s pod=%s resource_version=%s",
                            self._node.name,
                            kind,
                            _key(obj),
                            version,
                        )
                        if kind != "BOOKMARK":
                            self._queue.put(("event", (kind, obj)))
            except errors.ApiError as exc:
                if self._stop.is_set():
                    return
                if exc.status != 410:
                    log.warning("pod_watch_failed node=%s error=%s", self._node.name, exc)
                    self._stop.wait(RETRY_SECONDS)
            except Exception:
                log.exception("pod_watch_crashed node=%s", self._node.name)
                self._stop.wait(RETRY_SECONDS)

    # -- worker thread -----------------------------------------------------------------

    def _work_loop(self) -> None:
        while True:
            try:
                batch: list[tuple[str, Any] | None] = [
                    self._queue.get(timeout=self._claims.next_wait())
                ]
            except queue.Empty:
                batch = []
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if any(item is None for item in batch) or self._stop.is_set():
                for item in batch:
                    if item is not None and item[0] == "complete":
                        item[1].done.set_exception(errors.KubeletError("the kubelet is stopping"))
                return
            try:
                self._handle(batch)
            except Exception:
                log.exception("pod_worker_crashed node=%s", self._node.name)

    def _handle(self, batch: list[tuple[str, Any] | None]) -> None:
        new: dict[str, Json] = {}
        for item in batch:
            if item is None:
                continue
            kind, payload = item
            if kind == "list":
                listed = {str(_meta(p).get("uid")): p for p in payload}
                with self._lock:
                    gone = [t.pod for uid, t in self._tracked.items() if uid not in listed]
                for pod in gone:
                    self._observe("DELETED", pod)
                for pod in listed.values():
                    if self._observe("ADDED", pod):
                        new[str(_meta(pod).get("uid"))] = pod
                continue
            if kind == "event":
                event, pod = payload
                uid = str(_meta(pod).get("uid"))
                if self._is_new(event, pod) or (uid in new and self._is_pending(event, pod)):
                    new[uid] = pod  # consecutive new pods are admitted together, in order
                    continue
                self._admit_all(new)
                self._observe(event, pod)
                continue
            self._admit_all(new)
            self._complete(payload)
        self._admit_all(new)
        self._retry_dra()
        self.synced.set()

    def _is_pending(self, event: str, pod: Json) -> bool:
        """A live, unfinished, not yet running pod of this node."""
        phase = (pod.get("status") or {}).get("phase")
        return (
            event != "DELETED"
            and (pod.get("spec") or {}).get("nodeName") == self._node.name
            and not _meta(pod).get("deletionTimestamp")
            and phase not in TERMINAL
            and phase != "Running"
        )

    def _is_new(self, event: str, pod: Json) -> bool:
        """A pending pod this kubelet has not seen yet (``_observe`` would return True)."""
        with self._lock:
            known = str(_meta(pod).get("uid", "")) in self._tracked
        return not known and self._is_pending(event, pod)

    def _observe(self, event: str, pod: Json) -> bool:
        """Update what is known about a pod; True when it is new and must be admitted."""
        meta = _meta(pod)
        uid = str(meta.get("uid", ""))
        if (pod.get("spec") or {}).get("nodeName") != self._node.name and event != "DELETED":
            return False
        with self._lock:
            tracked = self._tracked.get(uid)
            if tracked is not None:
                tracked.pod = pod
        if event == "DELETED":
            self._release(uid, pod)
            self._statuses.forget(uid)
            with self._lock:
                self._tracked.pop(uid, None)
            return False
        if meta.get("deletionTimestamp"):
            if tracked is None or tracked.state != "deleting":
                self._release(uid, pod)
                with self._lock:
                    self._tracked[uid] = _Tracked(pod, "deleting")
                self._finish_deletion(pod)
            return False
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL:
            if tracked is None or tracked.state != "finished":
                self._release(uid, pod)
                with self._lock:
                    self._tracked[uid] = _Tracked(pod, "finished")
            return False
        if tracked is not None:
            return False
        if phase == "Running":
            ip = (pod.get("status") or {}).get("podIP")
            with self._lock:
                self._tracked[uid] = _Tracked(pod, "running", str(ip) if ip else None)
            log.info("pod_adopted pod=%s", _key(pod))
            if self._claims.uses_claims(pod):
                self._claims.prepare_again(uid)
            return False
        return True

    def _release(self, uid: str, pod: Json) -> None:
        if self._devices.free_pod(uid):
            log.info("pod_devices_freed pod=%s", _key(pod))
        meta = _meta(pod)
        self._records.remove(str(meta.get("namespace", "")), str(meta.get("name", "")))
        self._claims.unprepare(pod)

    def _finish_deletion(self, pod: Json) -> None:
        """The containers have stopped: once the pod's claims are unprepared (the kubelet's
        podResourcesAreReclaimed), the status manager deletes the pod for good."""
        uid = str(_meta(pod).get("uid", ""))
        if self._claims.unprepare_pending(uid):
            log.info("pod_deletion_waits_for_unprepare pod=%s", _key(pod))
            return
        log.info("pod_terminated pod=%s", _key(pod))
        self._statuses.delete(pod)

    def _retry_dra(self) -> None:
        """Prepare and unprepare calls whose retry time has come."""
        unprepare, prepare = self._claims.due()
        for pod in unprepare:
            uid = str(_meta(pod).get("uid", ""))
            self._claims.unprepare(pod)
            with self._lock:
                tracked = self._tracked.get(uid)
            if not self._claims.unprepare_pending(uid) and tracked and tracked.state == "deleting":
                self._finish_deletion(tracked.pod)
        for uid in prepare:
            with self._lock:
                tracked = self._tracked.get(uid)
            if tracked is None or tracked.state not in ("preparing", "running"):
                self._claims.forget_prepare(uid)
            elif tracked.state == "preparing":
                self._start(tracked.pod)
            elif self._claims.prepare(tracked.pod):  # adopted: prepared again, status unchanged
                self._record(tracked.pod)

    # -- admission ---------------------------------------------------------------------

    def _admit_all(self, new: dict[str, Json]) -> None:
        pods = sorted(new.values(), key=admission.admission_order)
        new.clear()
        for pod in pods:
            self._admit(pod)

    def _free_ip(self) -> str:
        with self._lock:
            used = {t.ip for t in self._tracked.values() if t.ip}
        for index, host in enumerate(self._network.hosts()):
            if index > 0 and str(host) not in used:
                return str(host)
        return str(next(iter(self._network.hosts())))

    def _admit(self, pod: Json) -> None:
        uid = str(_meta(pod).get("uid"))
        with self._lock:  # the kubelet adds a pod to its pod manager before admitting it
            self._tracked[uid] = _Tracked(pod, "admitting")
        outcome = admission.allocate(pod, self._devices)
        if isinstance(outcome, admission.Rejected):
            self._devices.free_pod(uid)
            with self._lock:
                self._tracked[uid] = _Tracked(pod, "finished")
            log.info(
                "pod_rejected pod=%s reason=%s message=%s",
                _key(pod),
                outcome.reason,
                outcome.message,
            )
            self._write_status(pod, podstatus.rejected(pod, outcome.reason, outcome.message))
            self._events.warning(pod, outcome.reason, outcome.message)
            return
        self._start(pod)

    def _record(self, pod: Json) -> None:
        """Record what the containers got: device plugin answers, claims, CDI edits."""
        meta = _meta(pod)
        uid = str(meta.get("uid"))
        entries = self._devices.entries(uid)
        claims: dict[str, tuple[allocations.ClaimAllocation, ...]] = {}
        if self._dra is not None:
            spec = pod.get("spec") or {}
            for item in list(spec.get("initContainers") or []) + list(spec.get("containers") or []):
                name = str(item.get("name", ""))
                found = self._dra.container_claims(pod, name)
                if found:
                    claims[name] = tuple(
                        allocations.ClaimAllocation(
                            c.claim,
                            tuple(
                                allocations.ClaimDevice(d.driver, d.pool, d.device)
                                for d in c.devices
                            ),
                            c.cdi_device_ids,
                        )
                        for c in found
                    )
        if entries or claims:
            self._records.put(
                allocations.PodAllocation.from_entries(
                    str(meta.get("namespace")),
                    str(meta.get("name")),
                    uid,
                    self._node.name,
                    entries,
                    claims,
                    cdi.read_specs(self._cdi_dir),
                )
            )

    def _start(self, pod: Json) -> None:
        """Prepare the claims, then PreStartContainer, then the pod runs."""
        uid = str(_meta(pod).get("uid"))
        now = podstatus.timestamp()
        if not self._claims.prepare(pod):
            with self._lock:
                first = self._tracked.get(uid) is None or self._tracked[uid].state != "preparing"
                self._tracked[uid] = _Tracked(pod, "preparing")
            if first:
                self._write_status(pod, podstatus.creating(pod, self._node.ip, now))
            return
        self._record(pod)
        outcome = admission.pre_start(pod, self._devices)
        if outcome is not None:
            with self._lock:
                self._tracked[uid] = _Tracked(pod, "start-failed")
            reason = admission.CREATE_CONTAINER_CONFIG_ERROR
            log.info(
                "pod_start_failed pod=%s container=%s message=%s",
                _key(pod),
                outcome.container,
                outcome.message,
            )
            status = podstatus.start_failed(
                pod, self._node.ip, outcome.container, reason, outcome.message, now
            )
            self._write_status(pod, status)
            self._events.warning(pod, "Failed", f"Error: {outcome.message}")
            return
        ip = self._free_ip()
        with self._lock:
            self._tracked[uid] = _Tracked(pod, "running", ip)
        log.info(
            "pod_running pod=%s devices=%s",
            _key(pod),
            [(e.container, e.resource, e.ids()) for e in self._devices.entries(uid)],
        )
        self._write_status(pod, podstatus.running(pod, self._node.ip, ip, now))

    def _write_status(self, pod: Json, status: Json) -> None:
        self._statuses.set_status(pod, status)

    def _complete(self, request: _Complete) -> None:
        with self._lock:
            tracked = next(
                (
                    t
                    for t in self._tracked.values()
                    if _meta(t.pod).get("namespace") == request.namespace
                    and _meta(t.pod).get("name") == request.name
                    and t.state == "running"
                ),
                None,
            )
        if tracked is None:
            request.done.set_exception(errors.PodNotFoundError(request.namespace, request.name))
            return
        pod = tracked.pod
        uid = str(_meta(pod).get("uid"))
        self._release(uid, pod)
        with self._lock:
            tracked.state = "finished"
        self._write_status(pod, podstatus.completed(pod, request.exit_code, podstatus.timestamp()))
        log.info("pod_completed pod=%s exit_code=%d", _key(pod), request.exit_code)
        request.done.set_result(None)
