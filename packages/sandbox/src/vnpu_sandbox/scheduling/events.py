"""Events on pods (``Scheduled``, ``FailedScheduling``), written the way client-go's recorder writes them.

``scheduler`` calls :meth:`Recorder.record` from the scheduling thread and the bind workers;
the recorder writes on a thread of its own, so a slow API never holds a scheduling cycle up.
Each event is a core/v1 Event on the pod (``involvedObject`` with the pod's uid), with
``source.component`` and ``reportingComponent`` set to the profile's ``schedulerName``, and is
named ``<pod>.<hex nanoseconds>`` as client-go names them.

Like client-go's ``EventCorrelator``, an event whose source, object, type, reason and message
repeat one already written is not written again: the existing Event is patched with
``count + 1`` and a new ``lastTimestamp`` (``kubectl describe`` then shows ``(x2 over 3s)``);
if that Event is gone (404) a new one is created. The recorder remembers the last 4096
distinct events. client-go's second stage, which merges ten different messages with the same
reason into one "(combined from similar events)" event, is not done. A write that fails is
retried twice and then dropped, logged once with the error.
"""

from __future__ import annotations

import collections
import datetime
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

from vnpu_sandbox.scheduling import cluster, errors, logs, messages

log = logging.getLogger(__name__)

Json = dict[str, Any]

CACHE_SIZE = 4096
ATTEMPTS = 3
RETRY_PAUSE = 0.5


def timestamp(moment: float) -> str:
    return datetime.datetime.fromtimestamp(moment, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class _Pending:
    namespace: str
    key: tuple[str, ...]
    body: Json
    moment: float


@dataclass
class _Written:
    name: str
    count: int


class Recorder:
    """Writes pod events asynchronously; :meth:`stop` drains what is queued (bounded)."""

    def __init__(self, api: cluster.Cluster, instance: str) -> None:
        self._api = api
        self._instance = instance
        self._queue: queue.Queue[_Pending | None] = queue.Queue()
        self._written: collections.OrderedDict[tuple[str, ...], _Written] = (
            collections.OrderedDict()
        )
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="event-recorder", daemon=True)
        self._pending = 0
        self._settled = threading.Condition()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def record(
        self, pod: Json, kind: str, reason: str, action: str, message: str, component: str
    ) -> None:
        """Queue an event of ``kind`` (Normal or Warning) on ``pod``."""
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata.get("name") or "")
        uid = str(metadata.get("uid") or "")
        text = messages.truncate(message)
        moment = time.time()
        involved = {
            "kind": "Pod",
            "namespace": namespace,
            "name": name,
            "uid": uid,
            "apiVersion": "v1",
            "resourceVersion": str(metadata.get("resourceVersion") or ""),
        }
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{name}.{time.time_ns():x}", "namespace": namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": text,
            "type": kind,
            "action": action,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": f"{component}-{self._instance}",
            "firstTimestamp": timestamp(moment),
            "lastTimestamp": timestamp(moment),
            "count": 1,
        }
        key = (component, "Pod", namespace, name, uid, "v1", kind, reason, text)
        with self._settled:
            self._pending += 1
        self._queue.put(_Pending(namespace, key, body, moment))

    def wait_idle(self, timeout: float) -> bool:
        """True once every queued event has been written or dropped (for tests and shutdown)."""
        with self._settled:
            return self._settled.wait_for(lambda: self._pending == 0, timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            try:
                self._write(item)
            except Exception:  # never let one bad event stop the recorder
                log.exception(
                    "event_write_crashed", extra=logs.fields(reason=item.body.get("reason"))
                )
            with self._settled:
                self._pending -= 1
                self._settled.notify_all()

    def _write(self, item: _Pending) -> None:
        for attempt in range(ATTEMPTS):
            try:
                self._write_once(item)
                if self._failing:
                    log.info("event_write_recovered")
                    self._failing = False
                return
            except errors.ApiError as exc:
                if attempt + 1 == ATTEMPTS or not exc.temporary:
                    if not self._failing:
                        log.warning(
                            "event_write_failed",
                            extra=logs.fields(
                                reason=item.body["reason"],
                                pod=f"{item.namespace}/{item.body['involvedObject']['name']}",
                                error=str(exc),
                                dropped=True,
                            ),
                        )
                    self._failing = True
                    return
                time.sleep(RETRY_PAUSE)

    def _write_once(self, item: _Pending) -> None:
        written = self._written.get(item.key)
        if written is not None:
            count = written.count + 1
            try:
                self._api.patch_event(
                    item.namespace,
                    written.name,
                    {"count": count, "lastTimestamp": timestamp(item.moment)},
                )
                written.count = count
                self._written.move_to_end(item.key)
                return
            except errors.ApiError as exc:
                if not exc.not_found:
                    raise
                del self._written[item.key]
                body = {**item.body, "count": count}
                self._create(item, body, count)
                return
        self._create(item, item.body, 1)

    def _create(self, item: _Pending, body: Json, count: int) -> None:
        self._api.create_event(item.namespace, body)
        self._written[item.key] = _Written(str(body["metadata"]["name"]), count)
        while len(self._written) > CACHE_SIZE:
            self._written.popitem(last=False)
