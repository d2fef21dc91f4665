"""Serving the app with uvicorn on up to three listeners, each behind its own ``intake.Intake``.

* the **extender** listener (``host``:``port``, loopback by default): every route. Plain
  HTTP, or HTTPS requiring a client certificate signed by ``extender_client_ca`` (mutual
  TLS, what kube-scheduler's ``tlsConfig`` can present);
* the **webhook** listener (``webhook_host``:``webhook_port``, HTTPS with ``tls_cert``),
  given a certificate: ``/mutate`` and ``/validate`` only;
* the **metrics** listener (``metrics_host``:``metrics_port``), given a port: ``/healthz``,
  ``/readyz`` and ``/metrics`` only, for the kubelet's probes and Prometheus.

``__main__`` calls ``serve`` (it handles SIGTERM/SIGINT itself, so the listeners stop
together); tests and benchmarks use ``running``, which serves an app in a background thread
and yields the listeners' URLs, extender first, then webhook, then metrics. The app's
lifespan (caches, informers, config polling) runs once, on the extender listener.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import fastapi
import structlog
import uvicorn

from vnpu_scheduler import intake, settings

log = structlog.get_logger(__name__)
KEEP_ALIVE_SECONDS = 120
"""How long an idle client connection is kept open: longer than the 90 s after which Go's HTTP
clients (kube-apiserver calling the webhooks, kube-scheduler calling the extender) close
theirs, so the client always closes first. With uvicorn's default of 5 s the server closed
idle connections while a client was sending its next POST on one: the client saw ``EOF``,
and Go does not retry a POST, so kube-apiserver refused a pod create (the webhook's failure
policy) or kube-scheduler failed a filter or bind."""


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture (the caller owns the signals)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on sockets whose protocol says
    # TCP, and without it every keep-alive answer waits ~40 ms for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.set_inheritable(True)
    return sock


@dataclass
class Listeners:
    """The uvicorn servers of one app and the sockets they serve."""

    servers: list[tuple[_Server, socket.socket]]

    @property
    def urls(self) -> list[str]:
        found = []
        for server, sock in self.servers:
            host, port = sock.getsockname()[:2]
            scheme = "https" if server.config.ssl_certfile else "http"
            shown = f"[{host}]" if ":" in host else host
            found.append(f"{scheme}://{shown}:{port}")
        return found

    def stop(self) -> None:
        for server, _ in self.servers:
            server.should_exit = True

    async def serve(self) -> None:
        try:
            await asyncio.gather(*(s.serve(sockets=[sock]) for s, sock in self.servers))
        finally:
            for _, sock in self.servers:
                sock.close()


def _config(app: intake.App, lifespan: Literal["on", "off"], **tls: Any) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        lifespan=lifespan,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        **tls,
    )


def listeners(app: fastapi.FastAPI, config: settings.Settings) -> Listeners:
    """Bind the sockets now (so port 0 resolves at once); the servers start in ``serve``.

    ``app.state.on_refusal`` (set by ``app.build``) hears of every request an intake refused.
    """
    heard: intake.Refused = getattr(app.state, "on_refusal", lambda _verb, _outcome, _message: None)
    tls: dict[str, Any] = {}
    if config.extender_tls:
        tls = {
            "ssl_certfile": str(config.extender_tls_cert),
            "ssl_keyfile": str(config.extender_tls_key),
            "ssl_ca_certs": str(config.extender_client_ca),
            "ssl_cert_reqs": ssl.CERT_REQUIRED,
        }
    extender = intake.Intake(app, config.max_body_bytes, None, heard)
    found = [(_Server(_config(extender, "on", **tls)), _listen(config.host, config.port))]
    if config.tls_cert is not None and config.tls_key is not None:
        webhook = intake.Intake(app, config.webhook_max_body_bytes, intake.WEBHOOK_ROUTES, heard)
        secure = _config(
            webhook, "off", ssl_certfile=str(config.tls_cert), ssl_keyfile=str(config.tls_key)
        )
        found.append((_Server(secure), _listen(config.webhook_host, config.webhook_port)))
    if config.metrics_port is not None:
        probes = intake.Intake(app, intake.PROBE_MAX_BODY, intake.PROBE_ROUTES, heard)
        found.append(
            (_Server(_config(probes, "off")), _listen(config.metrics_host, config.metrics_port))
        )
    return Listeners(found)


async def serve(app: fastapi.FastAPI, config: settings.Settings) -> None:
    """Serve until SIGTERM or SIGINT."""
    bound = listeners(app, config)
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, bound.stop)
    log.info("listening", urls=bound.urls)
    await bound.serve()


@contextlib.contextmanager
def running(app: fastapi.FastAPI, config: settings.Settings) -> Iterator[list[str]]:
    """Serve ``app`` in a background thread; yield the listeners' URLs (extender first)."""
    bound = listeners(app, config)
    thread = threading.Thread(target=lambda: asyncio.run(bound.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not all(server.started for server, _ in bound.servers):
        if not thread.is_alive() or time.monotonic() > deadline:
            bound.stop()
            raise RuntimeError("vnpu-scheduler did not start")
        time.sleep(0.01)
    try:
        yield bound.urls
    finally:
        bound.stop()
        thread.join(timeout=15)
