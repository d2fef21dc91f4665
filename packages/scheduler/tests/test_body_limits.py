"""Request bodies are bounded: too large is a 413 before the body is read, too deep is a 400.

The attacks go over raw sockets to a running scheduler, as an attacker would send them: a
``Content-Length`` of 100 MB (answered before any of it is sent), a chunked body that never
ends (answered as soon as it passes the limit), JSON nested 100,000 levels deep, and eight
large bodies at once to the real process, whose peak memory is read from ``/proc``.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

VERBS = ("filter", "prioritize", "bind", "mutate", "validate")
Json = dict[str, Any]


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _head(verb: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST /{verb} HTTP/1.1", "Host: vnpu", "Content-Type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _response(sock: socket.socket) -> tuple[int, dict[str, str], Any]:
    """One HTTP/1.1 response read off ``sock`` (status, lower-case headers, JSON body)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    length = int(headers["content-length"])
    while len(rest) < length:
        chunk = sock.recv(65536)
        assert chunk
        rest += chunk
    return status, headers, json.loads(rest[:length])


def _shape(verb: str, body: Any) -> str:
    """The message in ``verb``'s reply shape ('' for prioritize, which has no room for one)."""
    if verb == "prioritize":
        assert body == []
        return ""
    if verb in ("mutate", "validate"):
        response = body["response"]
        assert response["allowed"] is False
        message: str = response["status"]["message"]
        return message
    if verb == "filter":
        assert set(body) == {
            "Nodes",
            "NodeNames",
            "FailedNodes",
            "FailedAndUnresolvableNodes",
            "Error",
        }
    error: str = body["Error"]
    return error


@pytest.mark.parametrize("verb", VERBS)
def test_a_declared_length_over_the_limit_is_refused_before_the_body(
    scheduler: Any, verb: str
) -> None:
    with socket.create_connection(_address(scheduler.url), timeout=10) as sock:
        sock.sendall(_head(verb, {"Content-Length": str(100 * 2**20)}))  # and no body at all
        status, headers, body = _response(sock)
    assert status == 413
    assert headers["connection"] == "close"
    limit = scheduler.service.settings.max_body_bytes
    message = f"body of {100 * 2**20} bytes is larger than the limit of {limit} bytes"
    assert headers["vnpu-error"] == message
    assert _shape(verb, body) in (message, "")
    assert scheduler.sample("vnpu_scheduler_requests_total", verb=verb, outcome="too_large") == 1


def test_a_chunked_body_is_cut_off_at_the_limit(start_scheduler: Any) -> None:
    scheduler = start_scheduler(max_body_bytes=2**20)
    sent = 0
    with socket.create_connection(_address(scheduler.url), timeout=10) as sock:
        sock.sendall(_head("filter", {"Transfer-Encoding": "chunked"}))
        chunk = b"[" * 65536
        sock.setblocking(False)
        answer = b""
        deadline = time.monotonic() + 10
        while not answer and time.monotonic() < deadline:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                time.sleep(0.01)
            try:
                answer = sock.recv(65536)
            except BlockingIOError:
                continue
        sock.setblocking(True)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert 2**20 < sent < 8 * 2**20  # stopped soon after the limit, not at the end of the stream


@pytest.mark.parametrize("verb", VERBS)
def test_json_nested_100000_deep_is_a_400_in_the_verbs_shape(scheduler: Any, verb: str) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    answer = scheduler.post_raw(verb, deep)
    assert answer.status_code == 400
    assert answer.headers["vnpu-error"].startswith("(body): nested deeper than 64 levels")
    assert _shape(verb, answer.json()) in (answer.headers["vnpu-error"], "")
    # 65 levels inside a field nobody reads is still too deep; 60 are fine
    pod = {"metadata": {"name": "p"}, "spec": {}}
    for levels, status in ((65, 400), (60, 200)):
        pod["metadata"]["x"] = json.loads("[" * levels + "]" * levels)
        review = {"request": {"uid": "u", "object": pod}}
        body = review if verb in ("mutate", "validate") else {"Pod": pod, "NodeNames": []}
        if verb == "bind":
            continue
        assert scheduler.post(verb, body).status_code == status, (verb, levels)
    assert scheduler.http.get(f"{scheduler.url}/healthz").text == "ok"


def test_the_connection_stays_usable_after_a_bad_body(scheduler: Any) -> None:
    good = json.dumps({"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": ["n1"]})
    bad = json.dumps(
        {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": 5}}, "NodeNames": []}
    )
    with socket.create_connection(_address(scheduler.url), timeout=10) as sock:
        for text, status in ((bad, 400), (good, 200), (bad, 400)):
            payload = text.encode()
            sock.sendall(_head("filter", {"Content-Length": str(len(payload))}) + payload)
            got, headers, body = _response(sock)
            assert got == status
            assert headers.get("connection") != "close"
            if status == 400:
                assert body["Error"] == (
                    "Pod.spec.containers: must be an array, not a number (got 5)"
                )
            else:
                assert body["NodeNames"] == ["n1"]


# --- the real process under eight large bodies at once ------------------------------------------


def _peak_rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * 1024


@pytest.fixture
def process(kube: Any, tmp_path: Path) -> Iterator[tuple[int, str]]:
    log = tmp_path / "scheduler.log"
    command = [
        sys.executable, "-m", "vnpu_scheduler", "--kubeconfig", str(kube.kubeconfig),
        "--host", "127.0.0.1", "--port", "0", "--max-body-bytes", str(LIMIT),
    ]  # fmt: skip
    with log.open("wb") as out:
        handle = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = ""
        deadline = time.monotonic() + 20
        while not url:
            assert handle.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            for line in log.read_text().splitlines():
                if '"listening"' in line:
                    url = json.loads(line)["urls"][0]
            time.sleep(0.05)
        yield handle.pid, url
    finally:
        handle.terminate()
        handle.wait(timeout=10)


LIMIT = 16 * 2**20


def test_large_bodies_sent_at_once_are_read_one_after_another(process: tuple[int, str]) -> None:
    """Twelve clients send 14 MiB bodies at once, slowly (the last bytes come 0.4 s later).

    Read all at once they would be held together, 168 MiB of request bodies (the peak grew
    by about 230 MiB when tried without the budget); the listener's budget (one limit's
    worth of body in flight) reads them one after another, so the peak stays near the few
    copies of one body that reading and parsing it take (about 100 MiB). Eight bodies
    declared at 100 MB each are refused without a byte read.
    """
    pid, url = process
    address = _address(url)
    note = "x" * (14 * 2**20)
    text = '{"Pod": {"metadata": {"name": "p", "annotations": {"a": "%s"}}, "spec": {}}, "NodeNames": ["n1"]}'
    payload = (text % note).encode()
    del note
    before = _peak_rss_bytes(pid)

    def large(_: int) -> int:
        with socket.create_connection(address, timeout=25) as sock:
            sock.sendall(_head("filter", {"Content-Length": str(len(payload))}) + payload[:-1024])
            time.sleep(0.4)
            sock.sendall(payload[-1024:])
            status, _, _ = _response(sock)
            return status

    def huge(_: int) -> int:
        with socket.create_connection(address, timeout=25) as sock:
            sock.sendall(_head("filter", {"Content-Length": str(100 * 2**20)}) + b"{" * 65536)
            status, _, _ = _response(sock)
            return status

    with ThreadPoolExecutor(12) as pool:
        statuses = list(pool.map(huge, range(8))) + list(pool.map(large, range(12)))
    assert statuses == [413] * 8 + [200] * 12
    grown = _peak_rss_bytes(pid) - before
    assert grown < 150 * 2**20, f"peak memory grew by {grown / 2**20:.0f} MiB"
