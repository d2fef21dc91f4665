"""Fixtures: a real HTTP server on loopback that answers like the Kubernetes API, and kubeconfigs for it.

``Answers`` maps a request path to the status and body the server sends, so a test makes the
real ``kubernetes`` client meet exactly the answer it wants (a ``Status`` object, a body
that is not JSON, a reply that never comes) and checks what ``kubeapi`` makes of it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml


@dataclass
class Answer:
    """What the server sends for one path; ``delay`` seconds of silence first.

    ``cut`` announces more bytes than it sends and closes the connection mid-answer.
    """

    status: int
    body: bytes
    content_type: str = "application/json"
    delay: float = 0.0
    cut: bool = False


def status_body(code: int, reason: str, message: str) -> bytes:
    """A Kubernetes ``Status`` object, as the API server sends with every refusal."""
    document = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return json.dumps(document).encode()


@dataclass
class FakeApi:
    """The server's address and its answers by path (unknown paths get a 404 Status)."""

    url: str
    answers: dict[str, Answer] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            answer = api.answers.get(self.path.split("?", 1)[0].rstrip("/"))
            if answer is None:
                answer = Answer(404, status_body(404, "NotFound", f"{self.path} not found"))
            if answer.delay and api.stop.wait(answer.delay):
                return
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body) + (100 if answer.cut else 0)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test output is for the tests."""

    return Handler


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(FakeApi("")))
    api = FakeApi(f"http://127.0.0.1:{server.server_address[1]}")
    server.RequestHandlerClass = _handler(api)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield api
    finally:
        api.stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig at ``path`` whose current context talks to ``server`` without credentials."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@pytest.fixture
def kubeconfig(tmp_path: Path, fake_api: FakeApi) -> Path:
    """A kubeconfig for ``fake_api``."""
    return write_kubeconfig(tmp_path / "kubeconfig", fake_api.url)


class Kit:
    """The builders above, for test modules (which cannot import conftest)."""

    Answer = Answer
    status_body = staticmethod(status_body)
    write_kubeconfig = staticmethod(write_kubeconfig)


@pytest.fixture
def kit() -> type[Kit]:
    return Kit
