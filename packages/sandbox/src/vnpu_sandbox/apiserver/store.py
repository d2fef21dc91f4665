"""Object storage with a cluster-wide revision and a bounded event history (etcd plus watch cache).

``registry`` is the only writer: ``add``, ``modify`` and ``remove`` each take the next
revision (the objects' ``metadata.resourceVersion``, monotonically increasing across all
resources, like etcd's revision), record an ``Event`` and hand it to the subscribers
(``watch`` streams, the ``persistence`` flusher). The last ``window`` events are kept:
a watch or a paged list from a revision at or after ``floor`` is served exactly from
them; an older one is ``Expired`` (410), as kube-apiserver answers past its watch cache.

Everything here runs on the server's event loop thread, so no locking is needed; stored
objects are never mutated in place after ``add``/``modify`` (writers build new dicts), so
readers and events can share them.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vnpu_sandbox.apiserver import errors, resources

Json = dict[str, Any]
Key = tuple[str, str]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(slots=True)
class Event:
    """One committed change: the object after it (for DELETED: its last state) and before."""

    revision: int
    type: EventType
    key: Key
    obj: Json
    old: Json | None
    lines: dict[str, bytes] = field(default_factory=dict)

    def line(self, event_type: str) -> bytes:
        """The watch-stream line for this event, serialized once and shared by all watchers."""
        cached = self.lines.get(event_type)
        if cached is None:
            cached = (
                json.dumps({"type": event_type, "object": self.obj}, separators=(",", ":")).encode()
                + b"\n"
            )
            self.lines[event_type] = cached
        return cached


class Subscriber(Protocol):
    def offer(self, event: Event) -> None: ...


def object_key(obj: Json) -> tuple[str, str]:
    metadata = obj["metadata"]
    return (str(metadata.get("namespace", "")), str(metadata["name"]))


class Store:
    """All objects by resource, the revision counter and the retained event window."""

    def __init__(self, window: int = 10_000) -> None:
        if window < 1:
            raise ValueError(f"event window must be at least 1, got {window}")
        self.revision = 0
        self.floor = 0
        self.window = window
        self.history: deque[Event] = deque()
        self._objects: dict[Key, dict[tuple[str, str], Json]] = {
            r.key: {} for r in resources.RESOURCES
        }
        self._subscribers: dict[Key, set[Subscriber]] = {r.key: set() for r in resources.RESOURCES}
        self.on_commit: list[Callable[[], None]] = []

    # --- reads ------------------------------------------------------------------------

    def get(self, key: Key, namespace: str, name: str) -> Json | None:
        return self._objects[key].get((namespace, name))

    def items(self, key: Key, namespace: str | None = None) -> list[Json]:
        """Objects of one resource (one namespace, or all), sorted by namespace then name."""
        objects = self._objects[key]
        keys = sorted(k for k in objects if namespace is None or k[0] == namespace)
        return [objects[k] for k in keys]

    def count(self, key: Key, namespace: str) -> int:
        return sum(1 for k in self._objects[key] if k[0] == namespace)

    def check_revision(self, revision: int) -> None:
        """Raise ``Expired`` unless every event after ``revision`` is still retained."""
        if revision < self.floor:
            raise errors.Expired(f"too old resource version: {revision} ({self.floor})")

    def events_since(self, revision: int) -> list[Event]:
        self.check_revision(revision)
        return [event for event in self.history if event.revision > revision]

    def snapshot(self, key: Key, namespace: str | None, revision: int) -> list[Json]:
        """The objects of one resource as they were at ``revision`` (undoing later events)."""
        later = self.events_since(revision)
        state = {object_key(o): o for o in self.items(key, namespace)}
        for event in reversed(later):
            if event.key != key:
                continue
            where = object_key(event.obj)
            if namespace is not None and where[0] != namespace:
                continue
            if event.type == "ADDED":
                state.pop(where, None)
            elif event.old is not None:
                state[where] = event.old
        return [state[k] for k in sorted(state)]

    # --- writes -----------------------------------------------------------------------

    def _commit(self, event_type: EventType, key: Key, obj: Json, old: Json | None) -> Event:
        event = Event(self.revision, event_type, key, obj, old)
        self.history.append(event)
        while len(self.history) > self.window:
            self.floor = self.history.popleft().revision
        for subscriber in list(self._subscribers[key]):
            subscriber.offer(event)
        for callback in self.on_commit:
            callback()
        return event

    def _stamp(self, obj: Json) -> None:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)

    def add(self, resource: resources.Resource, obj: Json) -> Json:
        """Store a new object under the next revision; raises ``AlreadyExists``."""
        where = object_key(obj)
        if where in self._objects[resource.key]:
            raise errors.AlreadyExists(resource.group, resource.plural, where[1])
        self._stamp(obj)
        self._objects[resource.key][where] = obj
        self._commit("ADDED", resource.key, obj, None)
        return obj

    def modify(self, resource: resources.Resource, old: Json, new: Json) -> Json:
        """Replace ``old`` (the stored object) by ``new`` under the next revision."""
        self._stamp(new)
        self._objects[resource.key][object_key(new)] = new
        self._commit("MODIFIED", resource.key, new, old)
        return new

    def remove(self, resource: resources.Resource, old: Json, last: Json | None = None) -> Json:
        """Delete the stored ``old``; the DELETED event carries ``last`` (default: ``old``).

        ``last`` is the object's final state when an update removed its last finalizer.
        The carried object gets the deletion revision, as etcd's delete revision.
        """
        source = last if last is not None else old
        gone = dict(source)
        gone["metadata"] = dict(source["metadata"])
        self._stamp(gone)
        del self._objects[resource.key][object_key(old)]
        self._commit("DELETED", resource.key, gone, old)
        return gone

    # --- subscribers and persistence ----------------------------------------------------

    def subscribe(self, key: Key, subscriber: Subscriber) -> None:
        self._subscribers[key].add(subscriber)

    def unsubscribe(self, key: Key, subscriber: Subscriber) -> None:
        self._subscribers[key].discard(subscriber)

    def subscribers(self) -> Iterable[Subscriber]:
        for group in self._subscribers.values():
            yield from list(group)

    def dump(self) -> Json:
        """Everything persistence keeps: the revision counter and every object."""
        objects = [o for per in self._objects.values() for o in per.values()]
        return {"resourceVersion": self.revision, "objects": objects}

    def load(self, revision: int, objects: Iterable[Json]) -> None:
        """Restore a dump; the event history starts empty, so older revisions are Expired."""
        for obj in objects:
            resource = resources.by_kind(str(obj.get("apiVersion")), str(obj.get("kind")))
            if resource is None:
                raise ValueError(f"unknown object kind {obj.get('apiVersion')}/{obj.get('kind')}")
            self._objects[resource.key][object_key(obj)] = obj
        self.revision = revision
        self.floor = revision
        self.history.clear()
