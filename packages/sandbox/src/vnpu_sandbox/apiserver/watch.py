"""Watch streams: newline-delimited JSON events from a revision, filtered like the watch cache.

``routes`` calls ``open_stream`` for ``?watch=true`` and ``/watch/`` requests and sends the
returned async iterator as a chunked response. Semantics follow kube-apiserver:

- ``resourceVersion`` unset or ``"0"``: synthetic ``ADDED`` events for every matching object,
  then changes; a number: every change after it, replayed from the store's event window;
  a number older than the window: one ``ERROR`` event carrying a 410 ``Expired`` Status, then
  the stream ends (HTTP 200, as the real server does once the watch has started).
- Selectors apply to both sides of a change: an object that starts matching arrives as
  ``ADDED``, one that stops matching as ``DELETED`` (its previous state, the new revision).
- ``timeoutSeconds`` ends the stream cleanly; ``allowWatchBookmarks`` adds ``BOOKMARK`` events
  carrying only the current revision every ``bookmark_interval`` seconds.
- A watcher more than ``queue_limit`` events behind is closed, so a stuck client cannot
  grow the server's memory; clients re-list and watch again, as after any closed watch.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from vnpu_sandbox.apiserver import errors, resources, selectors, store

Json = dict[str, Any]
Render = Callable[[store.Event, str, Json], bytes]


def plain_line(event: store.Event, event_type: str, obj: Json) -> bytes:
    """The default rendering: the object itself (shared, serialized once per event)."""
    if obj is event.obj:
        return event.line(event_type)
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


class Watcher:
    """One open watch: a queue of rendered lines fed by the store on every commit."""

    def __init__(
        self,
        resource: resources.Resource,
        namespace: str | None,
        selector: selectors.Selector,
        render: Render,
        queue_limit: int,
    ) -> None:
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.render = render
        self.queue_limit = queue_limit
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.closed = False

    def _visible(self, obj: Json | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.selector.matches(obj)

    def classify(self, event: store.Event) -> tuple[str, Json] | None:
        """The event this watcher sees for a change, if any (type and object)."""
        if event.type == "DELETED":
            return ("DELETED", event.obj) if self._visible(event.obj) else None
        now = self._visible(event.obj)
        before = self._visible(event.old)
        if now:
            return ("MODIFIED" if before else "ADDED", event.obj)
        if before and event.old is not None:
            previous = copy.copy(event.old)
            previous["metadata"] = dict(event.old["metadata"], resourceVersion=str(event.revision))
            return ("DELETED", previous)
        return None

    def offer(self, event: store.Event) -> None:
        if self.closed:
            return
        seen = self.classify(event)
        if seen is None:
            return
        if self.queue.qsize() >= self.queue_limit:
            self.close()
            return
        self.queue.put_nowait(self.render(event, *seen))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


def error_line(error: errors.ApiError) -> bytes:
    return (
        json.dumps({"type": "ERROR", "object": error.status()}, separators=(",", ":")).encode()
        + b"\n"
    )


def bookmark_line(resource: resources.Resource, revision: int) -> bytes:
    obj = {
        "kind": resource.kind,
        "apiVersion": resource.api_version,
        "metadata": {"resourceVersion": str(revision)},
    }
    return json.dumps({"type": "BOOKMARK", "object": obj}, separators=(",", ":")).encode() + b"\n"


def open_stream(
    objects: store.Store,
    resource: resources.Resource,
    namespace: str | None,
    selector: selectors.Selector,
    resource_version: str,
    *,
    timeout: float,
    bookmark_interval: float | None,
    render: Render = plain_line,
    queue_limit: int = 10_000,
) -> AsyncIterator[bytes]:
    """The stream of a new watch; a malformed ``resource_version`` is a BadRequest now."""
    if resource_version not in ("", "0") and not resource_version.isdigit():
        raise errors.BadRequest(
            f'resourceVersion: Invalid value: "{resource_version}": must be a non-negative integer'
        )
    watcher = Watcher(resource, namespace, selector, render, queue_limit)
    return _stream(objects, watcher, resource_version, timeout, bookmark_interval)


def _start(objects: store.Store, watcher: Watcher, resource_version: str) -> list[bytes]:
    """The lines owed before live events, and the subscription: one step, no await between."""
    resource, initial = watcher.resource, []
    if resource_version in ("", "0"):
        for obj in objects.items(resource.key, watcher.namespace):
            if watcher.selector.matches(obj):
                event = store.Event(0, "ADDED", resource.key, obj, None)
                initial.append(watcher.render(event, "ADDED", obj))
    else:
        for event in objects.events_since(int(resource_version)):
            if event.key == resource.key and (seen := watcher.classify(event)) is not None:
                initial.append(watcher.render(event, *seen))
    objects.subscribe(resource.key, watcher)
    return initial


async def _stream(
    objects: store.Store,
    watcher: Watcher,
    resource_version: str,
    timeout: float,
    bookmark_interval: float | None,
) -> AsyncIterator[bytes]:
    # Subscribing inside the generator means a stream that is never iterated (the client
    # left before it started) never subscribes, so it cannot leak a watcher.
    try:
        initial = _start(objects, watcher, resource_version)
    except errors.Expired as exc:
        yield error_line(exc)
        return
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        if initial:
            yield b"".join(initial)
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            wait = min(remaining, bookmark_interval) if bookmark_interval else remaining
            try:
                line = await asyncio.wait_for(watcher.queue.get(), wait)
            except TimeoutError:
                if bookmark_interval and deadline - loop.time() > 0:
                    yield bookmark_line(watcher.resource, objects.revision)
                continue
            if line is None:
                return
            batch = [line]
            while not watcher.queue.empty():
                more = watcher.queue.get_nowait()
                if more is None:
                    yield b"".join(batch)
                    return
                batch.append(more)
            yield b"".join(batch)
    finally:
        watcher.closed = True
        objects.unsubscribe(watcher.resource.key, watcher)
