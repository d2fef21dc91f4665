"""Structured JSON logs on stdout for every vnpu service: structlog events and stdlib records alike.

Each service's ``__main__`` calls ``configure`` once, before anything logs; modules then log
with ``structlog.get_logger(...)`` and snake_case event names, binding per-request fields
(pod, node, verb) with ``structlog.contextvars``. Records of the libraries' stdlib loggers
(grpc, uvicorn, the Kubernetes client, urllib3) go through the same renderer and carry a
``logger`` field. Every record is one JSON object on one line, with ``event``, ``level``
and an ISO 8601 UTC ``timestamp``; an exception adds its formatted traceback as ``exception``.

By default a structlog event travels through the stdlib ``logging`` machinery as well (one
``LogRecord`` per line, ``logger`` field included). ``direct=True`` writes structlog events
straight to stdout instead, without a ``LogRecord`` and without ``logger``: less than half
the CPU per line (``benchmarks/bench_logs.py``), for a service that writes a line per
request on its event loop (the scheduler).

``configure`` also makes ``SIGUSR1`` write the stack of every thread to stderr (plain text,
``faulthandler``'s format), so that a service that stops answering can be asked where it is
(``kill -USR1 <pid>``) without stopping it.
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import sys
from collections.abc import Iterable
from typing import Any

import structlog

QUIET = ("urllib3", "kubernetes")
"""Library loggers that only say something at WARNING and above, unless told otherwise."""

_CHAIN: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def configure(
    level: str = "info",
    *,
    quiet: Iterable[str] = QUIET,
    adopt: Iterable[str] = (),
    direct: bool = False,
) -> None:
    """Send every log record at ``level`` or above to stdout as one JSON object per line.

    ``quiet`` names stdlib loggers held at WARNING whatever ``level`` is. ``adopt`` names
    stdlib loggers that installed handlers of their own (uvicorn's): those handlers are
    removed, so their records reach the root logger and come out as JSON too. ``direct``
    takes structlog events the cheap way (see the module docstring). A ``level`` that is not
    a logging level name raises ``ValueError`` naming it.
    """
    threshold = _threshold(level)
    if direct:
        structlog.configure(
            processors=[
                structlog.contextvars.merge_contextvars,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso", utc=True),
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(threshold),
            logger_factory=structlog.WriteLoggerFactory(sys.stdout),
            cache_logger_on_first_use=True,
        )
    else:
        structlog.configure(
            processors=[*_CHAIN, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
            logger_factory=structlog.stdlib.LoggerFactory(),
            wrapper_class=structlog.stdlib.BoundLogger,
            cache_logger_on_first_use=True,
        )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_CHAIN,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(threshold)
    for name in adopt:
        adopted = logging.getLogger(name)
        adopted.handlers[:] = []
        adopted.propagate = True
    for name in quiet:
        logging.getLogger(name).setLevel(logging.WARNING)
    if sys.__stderr__ is not None:  # the process's own stderr, even where sys.stderr is replaced
        faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)


def _threshold(level: str) -> int:
    """The numeric logging level named ``level`` (any case)."""
    try:
        return _LEVELS[level.lower()]
    except KeyError:
        raise ValueError(f"log level {level!r}: not one of {', '.join(_LEVELS)}") from None
