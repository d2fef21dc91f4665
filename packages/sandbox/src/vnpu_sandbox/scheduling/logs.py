"""JSON log lines of the scheduling driver: one object per line on stdout.

``command`` calls :func:`configure` once; every module logs through stdlib ``logging`` with a
snake_case event name as the message and its data as ``extra=logs.fields(pod=..., node=...)``.
A line carries ``timestamp`` (ISO 8601, UTC), ``level``, ``event``, ``logger`` and the fields;
an exception adds its traceback as ``exception``. Records of the libraries (urllib3, httpx,
the Kubernetes client) come out the same way, their message as ``event``; those libraries are
held at ERROR unless the level is ``debug``: the driver reports their failures itself, once
and with context, where urllib3 would warn at every connection retry. :class:`Streaks` is
how a module logs a recurring failure once per streak.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
import threading
from typing import Any

LEVELS = ("debug", "info", "warning", "error")
QUIET = ("urllib3", "kubernetes", "httpx", "httpcore")


def fields(**values: Any) -> dict[str, Any]:
    """The ``extra`` argument that puts ``values`` into the JSON line."""
    return {"fields": values}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "timestamp": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            "logger": record.name,
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            line.update(extra)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str = "info") -> None:
    """Route every log record at ``level`` or above to stdout as JSON; ``ValueError`` on a bad level."""
    if level.lower() not in LEVELS:
        raise ValueError(f"log level {level!r}: must be one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in QUIET:
        logging.getLogger(name).setLevel(
            logging.DEBUG if level.lower() == "debug" else logging.ERROR
        )


class Streaks:
    """Say a recurring failure once when it starts and once when it ends, not at every occurrence."""

    def __init__(self) -> None:
        self._failing: set[str] = set()
        self._lock = threading.Lock()

    def failed(self, key: str) -> bool:
        """Record a failure of ``key``; True for the first of a streak (log it)."""
        with self._lock:
            first = key not in self._failing
            self._failing.add(key)
            return first

    def recovered(self, key: str) -> bool:
        """Record a success of ``key``; True when it ends a streak (log that)."""
        with self._lock:
            if key in self._failing:
                self._failing.discard(key)
                return True
            return False
