"""The device-config file: loaded at start, reloaded when it changes, the last good one kept.

``app`` builds one ``ConfigSource`` from ``--device-config`` (or none, for the built-in chip
models) and polls it every ``config_poll_seconds``; a change of content (a ConfigMap
volume swaps a symlink, so the content is compared, not the modification time) is parsed
with ``vnpu_core.deviceconfig.load``. A good load hands the new catalog to the cache; a bad
one keeps the last good catalog and records the error, which ``/readyz``, the
``vnpu_scheduler_device_config_ok`` gauge and the log all show. A bad file at start is
fatal (``errors.SettingsError``): the service must not run with a config nobody checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from vnpu_core import catalog, deviceconfig
from vnpu_core import errors as core_errors
from vnpu_scheduler import errors, metrics

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ConfigStatus:
    """What ``/readyz`` reports about the device config."""

    source: str
    loaded: bool
    digest: str
    error: str = ""  # the last reload's error while the previous config is kept


class ConfigSource:
    """The chip catalog from ``path`` (built-in when None); ``on_change`` gets each new one."""

    def __init__(
        self,
        path: Path | None,
        stats: metrics.Metrics,
        on_change: Callable[[catalog.Catalog], None] = lambda _: None,
    ) -> None:
        self._path = path
        self._stats = stats
        self.on_change = on_change
        self._digest = ""
        self._error = ""
        self.catalog = catalog.BUILTIN
        if path is not None:
            text = self._read()
            try:
                loaded = deviceconfig.load(text, str(path))
            except core_errors.ConfigError as exc:
                self._stats.config_reloads.labels("failed").inc()
                raise errors.SettingsError("device_config", str(path), str(exc)) from exc
            self._accept(loaded, text)
        self._stats.config_ok.set(1)

    @property
    def status(self) -> ConfigStatus:
        source = str(self._path) if self._path else "(built-in chip models)"
        return ConfigStatus(source, True, self._digest[:12], self._error)

    def _read(self) -> str:
        assert self._path is not None
        try:
            return self._path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise errors.SettingsError("device_config", str(self._path), str(exc)) from exc

    def _accept(self, loaded: deviceconfig.LoadedConfig, text: str) -> None:
        self._digest = hashlib.sha256(text.encode()).hexdigest()
        self.catalog = loaded.catalog
        self._error = ""
        self._stats.config_reloads.labels("ok").inc()
        self._stats.config_ok.set(1)
        for warning in loaded.warnings:
            log.warning("device_config_warning", source=str(self._path), warning=warning)
        words = sorted(m.common_word for m in loaded.catalog)
        log.info("device_config_loaded", source=str(self._path), models=words)

    def poll(self) -> bool:
        """Reload when the file's content changed; True when a new catalog was taken."""
        if self._path is None:
            return False
        try:
            text = self._read()
        except errors.SettingsError as exc:
            return self._reject(exc.problem)
        if hashlib.sha256(text.encode()).hexdigest() == self._digest:
            return False
        try:
            loaded = deviceconfig.load(text, str(self._path))
        except core_errors.ConfigError as exc:
            return self._reject(str(exc))
        self._accept(loaded, text)
        self.on_change(self.catalog)
        return True

    def _reject(self, problem: str) -> bool:
        if problem != self._error:
            self._stats.config_reloads.labels("failed").inc()
            log.error(
                "device_config_rejected",
                source=str(self._path),
                error=problem,
                kept=self._digest[:12],
            )
        self._error = problem
        self._stats.config_ok.set(0)
        return False
