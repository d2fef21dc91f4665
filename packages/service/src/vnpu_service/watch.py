"""Kubernetes watches as the vnpu services follow them: one watch request, and the loop around it.

Each service's cluster adapter (``vnpu_scheduler.cluster``, ``vnpu_device_plugin.cluster``)
opens a watch with ``open_stream``: the list call it passes is sent with ``watch=true`` and
bookmarks allowed, and the answer is a ``Stream`` of its events, one JSON object per line,
read as it arrives; another thread may ``close`` it to end the blocked read at once.

``Reflector`` is the list-then-watch loop that ``vnpu_scheduler.informer`` (the cache's nodes,
pods and quotas) and ``vnpu_device_plugin.podwatch`` (the node's pods) run, each in a thread
of its own, over a ``Handler`` that does the listing, the watching and the applying:

* no revision to go on from: list (``Handler.relist``), then watch from the list's revision;
* ADDED and MODIFIED go to ``upsert``, DELETED to ``remove``; every event moves the revision
  on, a BOOKMARK too;
* a watch the API ends (its timeout) is opened again from the last revision;
* 410 Expired, as the answer or as an ERROR event in the stream: the revision is older than
  the API keeps, so list again;
* another failure (``failures``: ``kubeapi.ApiError`` unless the caller names more): back off
  (``FIRST_BACKOFF`` doubling to ``MAX_BACKOFF`` seconds) and watch again from the revision;
* any other exception (a bug): back off and list again, so the loop never ends for good;
* ``stop`` closes the open stream: the loop returns at once.

What happened is reported to the handler (``opened``, ``ended``, ``expired``, ``failed``,
``crashed``): logs and metrics stay the service's own. ``failed`` and ``crashed`` are called
while the exception is being handled, so ``log.exception`` there shows its traceback.

Errors are ``vnpu_service.kubeapi``'s: a refusal or outage is the ``kubeapi.translate`` of the
client's exception; an ERROR event is the ``status_error`` of its ``Status`` (code 410:
``Expired``); a line that is not JSON is ``Unavailable`` with reason ``BadResponse`` (one that
is JSON but not an object is passed over, as is an event whose ``object`` is not one). This
module imports neither the Kubernetes client nor urllib3: it reads the answer it is given.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from vnpu_service import kubeapi

Json = dict[str, Any]

FIRST_BACKOFF = 0.2  # seconds before watching again after a failure, doubling
MAX_BACKOFF = 5.0


class Stream(Protocol):
    """One watch's events (``{"type": ..., "object": ...}``); ``close`` ends it from any thread."""

    def __iter__(self) -> Iterator[Json]: ...

    def close(self) -> None: ...


def open_stream(
    list_call: Callable[..., Any],
    what: str,
    revision: str,
    timeout: int,
    request_timeout: tuple[float, float],
    **query: str,
) -> Stream:
    """A watch through ``list_call`` (a client ``list_*`` method) from ``revision``.

    The API ends it after ``timeout`` seconds; ``request_timeout`` is the client's (connect,
    read) timeout in seconds. ``query`` goes to ``list_call`` as it is (``field_selector``).
    A refusal or outage raises the ``ApiError`` that ``kubeapi.translate`` gives for ``what``.
    """
    try:
        response = list_call(
            **query,
            watch=True,
            resource_version=revision,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout,
            _preload_content=False,
            _request_timeout=request_timeout,
        )
    except kubeapi.FAILURES as exc:
        raise kubeapi.translate(exc, what) from exc
    return _Response(response, what)


class _Response:
    """A watch answer read as it arrives, one event per line; see ``Stream``."""

    def __init__(self, response: Any, what: str) -> None:
        self._response = response
        self._what = what
        self._closing = threading.Event()
        self._ended = threading.Event()

    def __iter__(self) -> Iterator[Json]:
        pending = bytearray()
        try:
            for chunk in self._response.stream(amt=None, decode_content=True):
                pending += chunk
                start = 0
                while (end := pending.find(b"\n", start)) >= 0:
                    line = bytes(pending[start:end]).strip()
                    start = end + 1
                    if line:
                        event = json.loads(line)
                        if isinstance(event, dict):
                            yield event
                del pending[:start]
        except kubeapi.FAILURES as exc:
            if not self._closing.is_set():
                raise kubeapi.translate(exc, self._what) from exc
        except ValueError as exc:
            raise kubeapi.Unavailable(0, "BadResponse", f"{self._what}: {exc}") from exc
        finally:
            self._ended.set()
            if self._closing.is_set():
                self._response.close()  # its socket was shut down: it cannot go back to the pool
            else:
                self._response.release_conn()

    def close(self) -> None:
        """End the stream from any thread: the blocked read returns at once."""
        if self._ended.is_set() or self._closing.is_set():
            return
        self._closing.set()
        try:
            self._response.shutdown()
        except (AttributeError, OSError):
            self._response.close()


class Handler(Protocol):
    """What a ``Reflector`` lists, watches and applies, and whom it tells what happened."""

    def relist(self) -> str:
        """List everything (again), replacing what was known; the revision of the list."""
        ...

    def watch_from(self, revision: str) -> Stream:
        """Open a watch from ``revision`` (``open_stream``)."""
        ...

    def upsert(self, obj: Json) -> None:
        """An object was ADDED or MODIFIED."""
        ...

    def remove(self, obj: Json) -> None:
        """An object was DELETED."""
        ...

    def opened(self) -> None:
        """A watch is open (after any failure, the first one that opened again)."""
        ...

    def ended(self) -> None:
        """The API ended a watch (its timeout, or it closed the stream); it is opened again."""
        ...

    def expired(self) -> None:
        """410 Expired: the revision is older than the API keeps; it is listed again."""
        ...

    def failed(self, error: Exception, retry_in: float) -> None:
        """One of the ``failures``; watched again from the same revision after ``retry_in`` s."""
        ...

    def crashed(self, error: Exception, retry_in: float) -> None:
        """Any other exception; listed again after ``retry_in`` seconds."""
        ...


class Reflector:
    """Lists and watches through ``handler`` until ``stop``; ``run`` is the loop, in its own thread.

    ``failures`` are the exceptions that mean "watch again after a pause" (``kubeapi.ApiError``
    and whatever else the handler may raise for a passing reason); ``stopping`` is the event
    ``stop`` sets, the caller's when it has other threads to end with it.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        failures: tuple[type[Exception], ...] = (kubeapi.ApiError,),
        stopping: threading.Event | None = None,
        first_backoff: float = FIRST_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        self._handler = handler
        self._failures = failures
        self._stopping = stopping if stopping is not None else threading.Event()
        self._first_backoff = first_backoff
        self._max_backoff = max_backoff
        self._stream: Stream | None = None
        self._guard = threading.Lock()
        self.watching = threading.Event()  # set while a watch is open (tests wait for it)

    def run(self, revision: str = "") -> None:
        """Watch from ``revision`` (list first when ""), until ``stop``."""
        delay = self._first_backoff
        while not self._stopping.is_set():
            try:
                if not revision:
                    revision = self._handler.relist()
                revision = self._follow(revision)
                delay = self._first_backoff
            except kubeapi.Expired:
                self._handler.expired()
                revision = ""
            except self._failures as exc:
                if self._stopping.is_set():
                    return
                self._handler.failed(exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, self._max_backoff)
            except Exception as exc:  # a bug must not end the loop for good: list again
                self._handler.crashed(exc, delay)
                revision = ""
                self._stopping.wait(delay)
                delay = min(delay * 2, self._max_backoff)
            finally:
                self.watching.clear()

    def stop(self) -> None:
        """End the loop: no new watch, and the open one closed (``run`` returns at once)."""
        self._stopping.set()
        with self._guard:
            stream = self._stream
        if stream is not None:
            stream.close()

    def _follow(self, revision: str) -> str:
        """Apply events until the stream ends; the revision to go on from."""
        stream = self._handler.watch_from(revision)
        with self._guard:
            self._stream = stream
        if self._stopping.is_set():
            stream.close()
        self._handler.opened()
        self.watching.set()
        try:
            for event in stream:
                kind, obj = event.get("type"), event.get("object")
                if not isinstance(obj, dict):
                    continue
                if kind == "ERROR":
                    raise status_error(obj)
                revision = str((obj.get("metadata") or {}).get("resourceVersion") or revision)
                if kind in ("ADDED", "MODIFIED"):
                    self._handler.upsert(obj)
                elif kind == "DELETED":
                    self._handler.remove(obj)
        finally:
            with self._guard:
                self._stream = None
        if not self._stopping.is_set():
            self._handler.ended()
        return revision


def status_error(status: Json) -> kubeapi.ApiError:
    """The error a watch's ERROR event stands for, from its ``Status`` object.

    Code 410 is ``Expired`` (reason ``Expired``: list again); any other code is the class
    ``kubeapi.error_for`` gives it, with the ``Status``'s reason and message.
    """
    code = int(status.get("code") or 0)
    message = str(status.get("message") or "")
    if code == 410:
        return kubeapi.Expired(410, "Expired", message)
    return kubeapi.error_for(code, str(status.get("reason") or ""), message)
