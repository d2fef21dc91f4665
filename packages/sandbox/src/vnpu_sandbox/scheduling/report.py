"""What the driver tells the cluster about a pod: events and the ``PodScheduled`` condition.

``driver`` (a cycle's outcome) and ``binder`` (a bind's outcome) call :class:`Reporter`. A
failure is written as kube-scheduler's ``handleSchedulingFailure`` writes it: a
``FailedScheduling`` Warning event with the message, and the ``PodScheduled`` condition set to
``False`` with reason ``Unschedulable`` (no node fits) or ``SchedulerError`` (an extender or API
failure) and the same message, through a strategic merge patch of ``pods/status`` and only when
the condition changes (its ``lastTransitionTime`` is kept while it stays ``False``). A success
is the ``Scheduled`` event ``Successfully assigned <ns>/<pod> to <node>``. Events go through
``events.Recorder`` (asynchronous); a condition that cannot be written is logged once per
streak and dropped.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from vnpu_sandbox.scheduling import cluster, errors, events, logs

log = logging.getLogger(__name__)

Json = dict[str, Any]

UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"


def key(pod: Json) -> str:
    """``namespace/name`` of a pod, as kube-scheduler's logs and messages name it."""
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or ''}"


def profile(pod: Json) -> str:
    return str((pod.get("spec") or {}).get("schedulerName") or "")


class Reporter:
    def __init__(self, api: cluster.Cluster, recorder: events.Recorder) -> None:
        self._api = api
        self._recorder = recorder
        self._streaks = logs.Streaks()

    def scheduled(self, pod: Json, node: str) -> None:
        message = f"Successfully assigned {key(pod)} to {node}"
        self._recorder.record(pod, "Normal", "Scheduled", "Binding", message, profile(pod))

    def skipped(self, pod: Json) -> str:
        """A pod found being deleted when its turn came: kube-scheduler's event; returns the text."""
        message = f"skip schedule deleting pod: {key(pod)}"
        self._recorder.record(
            pod, "Warning", "FailedScheduling", "Scheduling", message, profile(pod)
        )
        return message

    def failed(self, pod: Json, message: str, reason: str) -> None:
        """The FailedScheduling event and the PodScheduled condition (``reason`` as above)."""
        self._recorder.record(
            pod, "Warning", "FailedScheduling", "Scheduling", message, profile(pod)
        )
        self._set_condition(pod, reason, message)

    def _set_condition(self, pod: Json, reason: str, message: str) -> None:
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next(
            (c for c in conditions if isinstance(c, dict) and c.get("type") == "PodScheduled"), None
        )
        if current is not None and (
            current.get("status"),
            current.get("reason"),
            current.get("message"),
        ) == ("False", reason, message):
            return
        since = None
        if current is not None and current.get("status") == "False":
            since = current.get("lastTransitionTime")
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": since or events.timestamp(time.time()),
        }
        metadata = pod.get("metadata") or {}
        try:
            self._api.patch_pod_status(
                str(metadata.get("namespace") or "default"),
                str(metadata.get("name") or ""),
                {"status": {"conditions": [condition]}},
            )
            if self._streaks.recovered("condition"):
                log.info("pod_condition_write_recovered")
        except errors.ApiError as exc:
            if not exc.not_found and self._streaks.failed("condition"):
                log.warning(
                    "pod_condition_write_failed", extra=logs.fields(pod=key(pod), error=str(exc))
                )
