"""The plugin's HTTP listener: ``/metrics`` for Prometheus and ``/healthz`` for the kubelet's probe.

``/metrics`` renders the plugin's own registry (``metrics``) in the text exposition
format. ``/healthz`` answers 200 ``ok`` while ``check`` returns no problem (the gRPC
server serves our socket and kubelet has accepted the registration), else 503 with the
problem. Anything else is 404. ``plugin`` starts it on ``--metrics-host``/``--metrics-port``
in a daemon thread; requests are served on their own threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from prometheus_client import CollectorRegistry, exposition

log = structlog.get_logger(__name__)


class MonitoringServer:
    """Serves ``registry`` and ``check`` (returns "" when healthy, else the problem)."""

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, check: Callable[[], str]
    ) -> None:
        registry_, check_ = registry, check

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body = exposition.generate_latest(registry_)
                    self._answer(HTTPStatus.OK, body, exposition.CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    problem = check_()
                    status = HTTPStatus.SERVICE_UNAVAILABLE if problem else HTTPStatus.OK
                    self._answer(status, (problem or "ok").encode() + b"\n", "text/plain")
                else:
                    self._answer(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

            def _answer(self, status: HTTPStatus, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # one line per scrape would drown the log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # how soon ``stop`` is noticed
            name="vnpu-dp-http",
            daemon=True,
        )
        self._thread.start()
        log.info("monitoring_serving", port=self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
