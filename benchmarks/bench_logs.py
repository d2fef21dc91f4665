"""Cost of one JSON log line through ``vnpu_service.logs``: the stdlib path and the direct path.

Each round configures the logs, binds four request fields with ``structlog.contextvars`` (as
the scheduler does per request) and writes lines with four more fields to ``/dev/null``;
the figure is the best round's time per line. Stdlib records (a library's logger) are timed
on the same configuration. Pure CPU, one thread.
Run: ``.venv/bin/python benchmarks/bench_logs.py``.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import time
from collections.abc import Callable

import structlog

from vnpu_service import logs

LINES = 20_000
ROUNDS = 5


def _best(write: Callable[[], None]) -> float:
    """Microseconds per line, best of ``ROUNDS`` rounds of ``LINES`` lines."""
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(LINES):
            write()
        best = min(best, time.perf_counter() - start)
    return best / LINES * 1e6


def _measure(direct: bool) -> tuple[float, float]:
    logs.configure("info", direct=direct)
    structlog.contextvars.bind_contextvars(
        verb="filter", pod="ml/infer-0", node="n1", request_id=41
    )
    log = structlog.get_logger("bench")
    library = logging.getLogger("uvicorn.error")

    def event() -> None:
        log.info("request", outcome="ok", nodes=12, fit=7, duration_seconds=0.000412)

    def record() -> None:
        library.info("connection %s closed", "127.0.0.1:51234")

    per_event = _best(event)
    structlog.contextvars.clear_contextvars()
    return per_event, _best(record)


def main() -> None:
    real = sys.stdout
    with open(os.devnull, "w", encoding="utf-8") as sink:
        sys.stdout = sink  # configure binds the stream it finds here
        try:
            rows = [(direct, *_measure(direct)) for direct in (False, True)]
        finally:
            sys.stdout = real
    print("## Service logs (`vnpu_service.logs`)\n")
    print(
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}. Command: `.venv/bin/python benchmarks/bench_logs.py`"
    )
    print(f"(best of {ROUNDS} rounds of {LINES} lines to /dev/null; pure CPU).\n")
    print("| configuration | structlog event, µs per line | stdlib record, µs per line |")
    print("|---|---:|---:|")
    for direct, per_event, per_record in rows:
        name = "`direct=True` (scheduler)" if direct else "default (device plugin, exporter)"
        print(f"| {name} | {per_event:.1f} | {per_record:.1f} |")


if __name__ == "__main__":
    main()
