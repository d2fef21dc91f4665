"""Run the API emulator inside another program: for tests, benchmarks and the sandbox.

Two entry points, used by every package whose tests talk to Kubernetes::

    from vnpu_sandbox.apiserver import harness

    with harness.serve() as url:                     # http://127.0.0.1:<free port>
        kubeconfig = harness.write_kubeconfig(tmp_path / "kubeconfig", url)
        kubernetes.config.load_kube_config(str(kubeconfig))
        ...                                          # or: kubectl --kubeconfig <file> get pods

``serve`` starts the emulator on a free loopback port in a daemon thread, waits until it
accepts connections, yields its base URL and stops it (closing watch streams) on exit;
its keyword arguments are the ``server.Settings`` fields. ``write_kubeconfig`` writes a
kubeconfig whose current context points at that URL without credentials.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from vnpu_sandbox.apiserver import server

CONTEXT = "vnpu-sandbox"


@contextlib.contextmanager
def serve(*, start_timeout: float = 10.0, **settings: Any) -> Iterator[str]:
    """Start an emulator on 127.0.0.1 (free port) in a background thread; yield its URL."""
    options = server.Settings(**settings)
    api_server = server.ApiServer(options)  # reads the state file first: fails before binding
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP,
    # and without it every keep-alive request waits ~40 ms for a delayed ACK.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((options.host, options.port))
        listener.listen(128)
    except OSError:
        listener.close()
        raise
    host, port = listener.getsockname()[:2]
    runner = server.Uvicorn(server.uvicorn_config(api_server, quiet=True), api_server)
    thread = threading.Thread(
        target=lambda: runner.run(sockets=[listener]), name=f"vnpu-apiserver-{port}", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not runner.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            runner.request_stop()
            thread.join(timeout=10)
            listener.close()
            raise RuntimeError(f"the API emulator did not start on {host}:{port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{port}"
    finally:
        runner.request_stop()
        thread.join(timeout=10)
        listener.close()


def kubeconfig(url: str, namespace: str = "default") -> dict[str, Any]:
    """A kubeconfig document whose current context is the emulator at ``url``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": url}}],
        "users": [{"name": CONTEXT, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_kubeconfig(path: Path | str, url: str, namespace: str = "default") -> Path:
    """Write ``kubeconfig(url, namespace)`` to ``path`` and return the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(kubeconfig(url, namespace), sort_keys=False), encoding="utf-8")
    return target
