"""Errors of the exporter, and which of them a later refresh can fix.

The NPU access layer raises its own ``vnpu_npu.errors.NpuError`` family and the
Kubernetes API source (``pods``) raises ``vnpu_service.kubeapi.ApiError`` and its subclasses;
the exporter's other sources translate everything else at their boundary into these::

    ExporterError
    ├── SettingsError       a flag, environment value or kubeconfig is invalid (field, value)
    └── SourceError         a data source failed (source, problem); retryable
        ├── PodResourcesError  the kubelet's PodResources socket failed (code)
        └── LedgerError     the device plugin's ownership ledger or the DRA driver's claim
                            ledger is unreadable (path)

``sampler`` counts every failed read in ``vnpu_exporter_read_errors_total`` and leaves its
values out of the next scrapes; nothing here stops the service once it runs. Only
``SettingsError`` ends it, at start, with exit status 2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from vnpu_npu import errors as npu_errors

R = TypeVar("R")


class ExporterError(Exception):
    """Base of every error raised by vnpu-exporter."""

    retryable = False


class SettingsError(ExporterError):
    """``field`` holds ``value``, which cannot work: ``problem`` says why."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(f"{field}: {problem} (got {shown})")


class SourceError(ExporterError):
    """Reading ``source`` failed; the next refresh tries again."""

    retryable = True

    def __init__(self, source: str, problem: str) -> None:
        self.source = source
        self.problem = problem
        super().__init__(f"{source}: {problem}")


class PodResourcesError(SourceError):
    """The kubelet's PodResources ``List`` failed with gRPC status ``code``."""

    def __init__(self, socket: str, code: str, problem: str) -> None:
        self.socket = socket
        self.code = code
        super().__init__(f"pod-resources {socket}", f"{code}: {problem}")


class LedgerError(SourceError):
    """The ledger at ``path`` (the device plugin's ownership ledger, or the DRA driver's claim
    ledger) cannot be read."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        super().__init__(f"ownership ledger {path}", problem)


def scan_ledger(scan: Callable[[Path], R], path: Path, fmt: str) -> R:
    """``scan(path)`` of a node-local ledger; a file that cannot be read as a whole (not
    JSON, another format than ``fmt``) is a ``LedgerError`` saying why."""
    try:
        return scan(path)
    except npu_errors.WrongFormat as exc:
        problem = f"format is {exc.found!r}, this exporter reads {fmt}"
        raise LedgerError(exc.path, problem) from exc
    except npu_errors.StateFileError as exc:
        raise LedgerError(exc.path, exc.problem) from exc
