"""The API emulator assembled: settings, the ASGI app, and running it under uvicorn.

``command`` (the ``vnpu-sandbox apiserver`` CLI) calls ``run``; ``harness`` builds an
``ApiServer`` and runs it on a background thread for tests and the sandbox. ``ApiServer``
wires the store, registry, admission chain, optional state file and the Starlette app whose
lifespan starts the state-file flusher and, on shutdown, ends every watch stream and
writes the state one last time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.routing import Route

from vnpu_sandbox.apiserver import admission, errors, persistence, registry, routes, store

log = logging.getLogger(__name__)

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@dataclass(frozen=True)
class Settings:
    """How to run the emulator. Times are in seconds."""

    host: str = "127.0.0.1"
    port: int = 0
    """TCP port; 0 picks a free one (the harness does)."""
    state_file: Path | None = None
    """Where objects and the revision counter persist; None keeps everything in memory."""
    event_window: int = 10_000
    """Events retained for watches and paged lists; older revisions answer 410 Expired."""
    watch_timeout: float = 1800.0
    """Duration of a watch whose client sets no ``timeoutSeconds`` (the real server's minimum)."""
    bookmark_interval: float = 60.0
    """Seconds between BOOKMARK events on watches that allow them."""
    watch_queue_limit: int = 10_000
    """Events a watcher may fall behind before the server closes its stream."""
    flush_interval: float = 0.1
    """Longest delay between a write and the state file's rewrite."""
    access_log: bool = False
    """Log one line per HTTP request (uvicorn's access log)."""


class ApiServer:
    """One emulator instance: its store and the ASGI app serving it."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store.Store(settings.event_window)
        self.registry = registry.Registry(self.store, clock)
        self.state: persistence.StateFile | None = None
        if settings.state_file is not None:
            self.state = persistence.StateFile(
                settings.state_file, self.store, settings.flush_interval
            )
            self.state.load()
        self.registry.bootstrap()
        if self.state is not None:
            self.state.flush()  # an unwritable state file fails here, before serving
        limits = routes.WatchLimits(
            settings.watch_timeout, settings.bookmark_interval, settings.watch_queue_limit
        )
        self.api = routes.Api(self.registry, admission.Admission(self.store), limits, clock)
        self.app = Starlette(
            routes=[Route("/{path:path}", self.api.handle, methods=METHODS)],
            lifespan=self._lifespan,
        )

    def close_watchers(self) -> None:
        """End every open watch stream (must run on the server's event loop)."""
        for subscriber in self.store.subscribers():
            close = getattr(subscriber, "close", None)
            if close is not None:
                close()

    async def _flush_forever(self, state: persistence.StateFile) -> None:
        while True:
            try:
                await state.flush_loop()
            except errors.StateFileError as exc:
                log.error("state_file_write_failed error=%s", exc)
                await asyncio.sleep(1.0)

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        flusher: asyncio.Task[None] | None = None
        if self.state is not None:
            self.store.on_commit.append(self.state.mark_dirty)
            flusher = asyncio.create_task(self._flush_forever(self.state))
        try:
            yield
        finally:
            self.close_watchers()
            if flusher is not None:
                flusher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await flusher
            if self.state is not None:
                self.state.flush()


class Uvicorn(uvicorn.Server):
    """uvicorn's server that ends watch streams as soon as it is asked to stop.

    Without this, a graceful shutdown would wait for every open watch to time out.
    """

    def __init__(self, config: uvicorn.Config, api_server: ApiServer) -> None:
        super().__init__(config)
        self.api_server = api_server
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[Any] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def request_stop(self) -> None:
        """Stop from any thread: close the watch streams on the loop, then exit."""
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.api_server.close_watchers)
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(self.api_server.close_watchers)
        super().handle_exit(sig, frame)


def uvicorn_config(api_server: ApiServer, *, quiet: bool) -> uvicorn.Config:
    settings = api_server.settings
    return uvicorn.Config(
        api_server.app,
        host=settings.host,
        port=settings.port,
        lifespan="on",
        access_log=settings.access_log,
        log_config=None if quiet else uvicorn.config.LOGGING_CONFIG,
        log_level="warning" if quiet else "info",
        timeout_graceful_shutdown=2,
    )


def run(settings: Settings) -> None:
    """Serve until interrupted (the CLI)."""
    api_server = ApiServer(settings)
    Uvicorn(uvicorn_config(api_server, quiet=False), api_server).run()
