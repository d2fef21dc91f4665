"""The HTTP listener: ``/metrics`` (Prometheus text or OpenMetrics) and ``/healthz``.

``__main__`` starts one ``MetricsServer``; tests and the benchmark start it on port 0 and
read ``url``. Each request runs in its own thread (``ThreadingHTTPServer``): a scrape
renders the registry, whose ``collector`` reads cached readings only, so scrapes do not
wait on the driver. The whole answer (collection and rendering) is timed into
``vnpu_exporter_scrape_duration_seconds``. ``/healthz`` answers 200 while every refresh
group keeps finishing its reads, and 503 naming the groups stuck in a call longer than
their stale limit (a hung driver call that a restart may clear).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable

import structlog
from prometheus_client import CollectorRegistry

from vnpu_exporter import exposition, telemetry

log = structlog.get_logger(__name__)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _HttpServer
    disable_nagle_algorithm = True  # headers and body leave at once, no delayed-ACK stall
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._metrics()
        elif path == "/healthz":
            stuck = self.server.owner.stuck()
            body = json.dumps({"status": "stuck" if stuck else "ok", "stuck_groups": stuck})
            self._answer(503 if stuck else 200, "application/json", body.encode() + b"\n")
        else:
            self._answer(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

    def _metrics(self) -> None:
        owner = self.server.owner
        started = time.perf_counter()
        try:
            body, content_type = exposition.render(owner.registry, self.headers.get("Accept", ""))
        except Exception:  # a collector bug: answer 500, keep serving
            log.exception("scrape_failed")
            self._answer(
                500, "text/plain; charset=utf-8", b"scrape failed; see the exporter's log\n"
            )
            return
        owner.instruments.scrape_duration.observe(time.perf_counter() - started)
        self._answer(200, content_type, body)

    def _answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        log.debug("http_request", request=format % args)


class _HttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: MetricsServer


class MetricsServer:
    """Serves ``registry`` on ``host:port``; ``stuck()`` lists groups /healthz reports."""

    def __init__(
        self,
        registry: CollectorRegistry,
        instruments: telemetry.Telemetry,
        stuck: Callable[[], list[str]],
        host: str = "0.0.0.0",
        port: int = 9400,
    ) -> None:
        self.registry = registry
        self.instruments = instruments
        self.stuck = stuck
        self._http = _HttpServer((host, port), _Handler)
        self._http.owner = self
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._http.server_address[:2]
        return str(host), int(port)

    @property
    def url(self) -> str:
        host, port = self.address
        return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="vnpu-exporter-http", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        if self._thread is not None:
            self._thread.join(5)
