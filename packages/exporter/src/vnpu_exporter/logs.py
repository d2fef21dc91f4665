"""Structured JSON logs on stdout: structlog for the exporter's events, stdlib loggers routed through it.

``__main__`` calls ``configure`` once; modules log with ``structlog.get_logger(__name__)``
and snake_case event names (``read_failed group=health reason=chip_gone``). The gRPC and
Kubernetes clients' stdlib records go through the same JSON renderer.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_CHAIN: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure(level: str = "info") -> None:
    """Send every log record to stdout as one JSON object per line."""
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
    root.setLevel(level.upper())
    for noisy in ("urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
