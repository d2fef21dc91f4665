"""The device-config file: loaded at start, reloaded when it changes, the last good one kept.

``app`` builds one ``ConfigSource`` from ``--device-config`` (or none, for the built-in chip
models) and polls it every ``config_poll_seconds``; a change of content (a ConfigMap
volume swaps a symlink, so the content is compared, not the modification time) is parsed
with ``vnpu_core.deviceconfig.load``. At most ``deviceconfig.MAX_BYTES`` (and one more, to
tell) are read: a larger file is refused unread.

A good load hands the new catalog to the cache. A bad one, or any failure while loading
(``MemoryError`` included), keeps the last good catalog and is a *rejection*: logged once
(``device_config_rejected``, with the reason), counted once
(``vnpu_scheduler_device_config_reloads_total{result="failed"}``), and shown by
``vnpu_scheduler_device_config_ok`` and ``/readyz`` (``status``) until the file loads
or holds the config in use again. The same rejected content is not parsed again at every
poll. A bad file at start is fatal (``errors.SettingsError``): the service must not run with
a config nobody checked.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from vnpu_core import catalog, deviceconfig
from vnpu_core import errors as core_errors
from vnpu_scheduler import errors, metrics

log = structlog.get_logger(__name__)
SHOWN_DIGEST = 12  # hex characters of a sha256 shown in /readyz and the log


@dataclass(frozen=True, slots=True)
class ConfigStatus:
    """What ``/readyz`` reports about the device config."""

    source: str
    loaded: bool
    digest: str  # of the config in use
    error: str = ""  # why the file as it is now is not in use ("" when it is)
    rejected_digest: str = ""  # of the content refused ("" when it could not be read whole)

    @property
    def source_rejected(self) -> bool:
        """True while the file's current content was refused and the last good one serves."""
        return bool(self.error)


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
        self.catalog = catalog.BUILTIN
        self._status = ConfigStatus(str(path) if path else "(built-in chip models)", True, "")
        if path is not None:
            try:
                text = self._read()
                loaded = deviceconfig.load(text, str(path))
            except core_errors.ConfigError as exc:
                self._stats.config_reloads.labels("failed").inc()
                raise errors.SettingsError("device_config", str(path), str(exc)) from exc
            self._accept(loaded, text)
        self._stats.config_ok.set(1)

    @property
    def status(self) -> ConfigStatus:
        return self._status  # replaced whole, never changed in place: one consistent reading

    def _read(self) -> str:
        """The file's text; ``SettingsError`` when it cannot be read, ``ConfigError`` when it is
        larger than a device config may be (the rest is not read)."""
        assert self._path is not None
        try:
            with self._path.open("rb") as handle:
                data = handle.read(deviceconfig.MAX_BYTES + 1)
                if len(data) > deviceconfig.MAX_BYTES:
                    size = max(os.fstat(handle.fileno()).st_size, len(data))
                    raise deviceconfig.oversize(size, str(self._path))
            return data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise errors.SettingsError("device_config", str(self._path), str(exc)) from exc

    def _accept(self, loaded: deviceconfig.LoadedConfig, text: str) -> None:
        digest = hashlib.sha256(text.encode()).hexdigest()
        self.catalog = loaded.catalog
        self._status = ConfigStatus(self._status.source, True, digest)
        self._stats.config_reloads.labels("ok").inc()
        self._stats.config_ok.set(1)
        for warning in loaded.warnings:
            log.warning("device_config_warning", source=self._status.source, warning=warning)
        words = sorted(m.common_word for m in loaded.catalog)
        log.info(
            "device_config_loaded",
            source=self._status.source,
            digest=digest[:SHOWN_DIGEST],
            models=words,
        )

    def poll(self) -> bool:
        """Reload when the file's content changed; True when a new catalog was taken.

        Never raises for what the file holds: any failure to read or load it is a rejection.
        """
        if self._path is None:
            return False
        try:
            text = self._read()
        except errors.SettingsError as exc:
            return self._reject(exc.problem, "")
        except core_errors.ConfigError as exc:  # too large to read whole
            return self._reject(str(exc), "")
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self._status.digest:
            if self._status.source_rejected:
                self._back_to_the_config_in_use()
            return False
        if digest == self._status.rejected_digest:
            return False  # refused already: the same content gets the same answer
        try:
            loaded = deviceconfig.load(text, str(self._path))
            self.on_change(loaded.catalog)
        except core_errors.ConfigError as exc:
            return self._reject(str(exc), digest)
        except Exception as exc:  # MemoryError, RecursionError, a bug: the last good one serves
            problem = f"{self._path}: internal error while loading: {exc!r}"
            return self._reject(problem, digest, exc)
        self._accept(loaded, text)
        return True

    def _reject(self, problem: str, digest: str, unexpected: Exception | None = None) -> bool:
        current = self._status
        if (problem, digest) != (current.error, current.rejected_digest):
            self._stats.config_reloads.labels("failed").inc()
            traceback = {"exc_info": unexpected} if unexpected is not None else {}
            log.error(
                "device_config_rejected",
                source=current.source,
                error=problem,
                rejected=digest[:SHOWN_DIGEST],
                kept=current.digest[:SHOWN_DIGEST],
                **traceback,
            )
        self._status = ConfigStatus(current.source, current.loaded, current.digest, problem, digest)
        self._stats.config_ok.set(0)
        return False

    def _back_to_the_config_in_use(self) -> None:
        """The file holds the config in use again (a rejected change was undone)."""
        current = self._status
        self._status = ConfigStatus(current.source, current.loaded, current.digest)
        self._stats.config_ok.set(1)
        log.info(
            "device_config_rejection_cleared",
            source=current.source,
            digest=current.digest[:SHOWN_DIGEST],
        )
