"""The door of each listener: which paths it serves and how much body it reads, before the app.

``server`` wraps the app once per listener in an ``Intake`` (plain ASGI, in front of
FastAPI). The extender listener serves every route; the webhook listener only ``/mutate``
and ``/validate``; the metrics listener only ``/healthz``, ``/readyz`` and ``/metrics``. Any
other path is answered 404 without reading its body. The body is read here, whole, before
the app sees it:

* a ``Content-Length`` above ``max_body`` is answered 413 at once, nothing of it read;
* a chunked body is counted while it streams and answered 413 as soon as it passes
  ``max_body``;
* every body being read or served holds its size against the listener's ``Budget``
  (``max_body`` bytes in all), so large bodies sent at once are read one after another and
  the memory they take stays bounded; a request that gets no share within
  ``READ_SECONDS`` is answered 503;
* the body must have arrived ``READ_SECONDS`` after its share was granted, else 408.

A refusal has the shape of the verb's reply (``wire.refusal``), carries the reason in the
``vnpu-error`` header and closes the connection (the rest of the body is never read);
``on_refusal`` (the app's request log and counter) hears of each.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from vnpu_scheduler import wire

Message = MutableMapping[str, Any]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Refused = Callable[[str, str, str], None]  # verb, outcome, message

READ_SECONDS = 30.0
VERBS = {
    "/filter": "filter",
    "/prioritize": "prioritize",
    "/bind": "bind",
    "/mutate": "mutate",
    "/validate": "validate",
}
WEBHOOK_ROUTES = frozenset({"/mutate", "/validate"})
PROBE_ROUTES = frozenset({"/healthz", "/readyz", "/metrics"})
PROBE_MAX_BODY = 64 * 1024  # the probe routes read no body; this only bounds what is buffered


class Budget:
    """Bytes of request bodies one listener may hold at once; a request waits for its share."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._changed = asyncio.Condition()

    async def take(self, amount: int) -> int:
        """Wait until ``amount`` (at most ``total``) is free and hold it; the amount held."""
        amount = min(amount, self.total)
        async with self._changed:
            await self._changed.wait_for(lambda: self.used + amount <= self.total)
            self.used += amount
        return amount

    async def give(self, amount: int) -> None:
        async with self._changed:
            self.used -= amount
            self._changed.notify_all()


class _TooLarge(Exception):
    pass


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return bytes(value)
    return None


class Intake:
    """``app`` behind one listener's rules: served ``routes`` (None: all) and ``max_body``."""

    def __init__(
        self,
        app: App,
        max_body: int,
        routes: frozenset[str] | None = None,
        on_refusal: Refused = lambda _verb, _outcome, _message: None,
    ) -> None:
        self._app = app
        self._max_body = max_body
        self._routes = routes
        self._on_refusal = on_refusal
        self._budget: Budget | None = None  # made on first use, inside the serving loop

    @property
    def budget(self) -> Budget:
        if self._budget is None:
            self._budget = Budget(self._max_body)
        return self._budget

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)  # lifespan (and nothing else is served)
            return
        path = str(scope.get("path") or "")
        verb = VERBS.get(path, "")
        if self._routes is not None and path not in self._routes:
            await self._refuse(send, verb, 404, "not_served", f"{path} is not served here")
            return
        raw = _header(scope, b"content-length")
        length: int | None = None
        if raw is not None:
            try:
                length = int(raw)
            except ValueError:
                length = -1
            if length < 0:
                message = f"Content-Length {raw.decode(errors='replace')!r} is not a byte count"
                await self._refuse(send, verb, 400, "bad_request", message)
                return
            if length > self._max_body:
                message = (
                    f"body of {length} bytes is larger than the limit of {self._max_body} bytes"
                )
                await self._refuse(send, verb, 413, "too_large", message)
                return
        chunked = _header(scope, b"transfer-encoding") is not None
        wanted = length if length is not None else (self._max_body if chunked else 0)
        try:
            async with asyncio.timeout(READ_SECONDS):
                held = await self.budget.take(wanted)
        except TimeoutError:
            message = f"too many large bodies in flight; none freed in {READ_SECONDS:g} s"
            await self._refuse(send, verb, 503, "busy", message)
            return
        try:
            await self._serve(scope, receive, send, verb)
        finally:
            await self.budget.give(held)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, verb: str) -> None:
        try:
            async with asyncio.timeout(READ_SECONDS):
                body = await self._read(receive)
        except TimeoutError:
            message = f"the body did not arrive within {READ_SECONDS:g} s"
            await self._refuse(send, verb, 408, "timeout", message)
            return
        except _TooLarge:
            message = f"body is larger than the limit of {self._max_body} bytes"
            await self._refuse(send, verb, 413, "too_large", message)
            return
        if body is None:
            return  # the client went away
        given = False

        async def replay() -> Message:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None when the client disconnected first."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body") or b""
            size += len(chunk)
            if size > self._max_body:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    async def _refuse(self, send: Send, verb: str, status: int, outcome: str, text: str) -> None:
        self._on_refusal(verb, outcome, text)
        body = json.dumps(wire.refusal(verb, text, status)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (wire.ERROR_HEADER.encode(), wire.header_text(text).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
