"""The optional ``--state`` file: every object and the revision counter, kept across restarts.

``server`` loads the file at start-up (``load``), runs ``flush_loop`` while serving and calls
``flush`` once more on shutdown. Writes are atomic: the JSON goes to ``<file>.tmp``, is
fsynced, then renamed over the file, so a crash leaves either the old or the new state,
never a torn one. Commits are coalesced: the file is rewritten at most every
``interval`` seconds while writes keep coming, so a crash (not a clean stop) can lose the
writes of that last interval. The event history is not kept: after a restart, watches from
an older revision get 410 Expired, as after a kube-apiserver restart.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from vnpu_sandbox.apiserver import errors, store

FORMAT = "vnpu-sandbox-apiserver-state/v1"


class StateFile:
    """One state file bound to one store."""

    def __init__(self, path: Path, objects: store.Store, interval: float = 0.1) -> None:
        self.path = path
        self.store = objects
        self.interval = interval
        self._dirty = asyncio.Event()
        self.writes = 0

    def load(self) -> bool:
        """Restore the store from the file; False if there is no file yet."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise errors.StateFileError(str(self.path), exc.strerror or str(exc)) from exc
        try:
            data: Any = json.loads(text)
        except ValueError as exc:
            raise errors.StateFileError(str(self.path), f"not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise errors.StateFileError(
                str(self.path), f'not a state file: "format" must be "{FORMAT}"'
            )
        revision, objects = data.get("resourceVersion"), data.get("objects")
        if not isinstance(revision, int) or revision < 0:
            raise errors.StateFileError(
                str(self.path), f"resourceVersion must be a non-negative integer, got {revision!r}"
            )
        if not isinstance(objects, list) or not all(isinstance(o, dict) for o in objects):
            raise errors.StateFileError(str(self.path), "objects must be a list of objects")
        try:
            self.store.load(revision, objects)
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.StateFileError(str(self.path), f"bad object: {exc}") from exc
        return True

    def mark_dirty(self) -> None:
        """Store commit hook: schedule a rewrite."""
        self._dirty.set()

    def _serialize(self) -> bytes:
        return json.dumps({"format": FORMAT, **self.store.dump()}, separators=(",", ":")).encode()

    def _write(self, data: bytes) -> None:
        temporary = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(temporary, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            raise errors.StateFileError(str(self.path), exc.strerror or str(exc)) from exc
        self.writes += 1

    def flush(self) -> None:
        """Write the current state now (used at shutdown)."""
        self._dirty.clear()
        self._write(self._serialize())

    async def flush_loop(self) -> None:
        """Rewrite the file after commits, at most once per ``interval``; runs until cancelled."""
        while True:
            await self._dirty.wait()
            await asyncio.sleep(self.interval)
            self._dirty.clear()
            data = self._serialize()  # on the loop thread: a consistent snapshot
            try:
                await asyncio.to_thread(self._write, data)
            except errors.StateFileError:
                self._dirty.set()  # keep the state owed, so the caller's retry writes it
                raise
