"""Benchmark of the sandbox's Kubernetes API emulator: watch fan-out and patch throughput.

Starts ``vnpu-sandbox apiserver`` as a separate process on a free loopback port (so the
server does not share an interpreter lock with the clients), then measures:

1. watch fan-out: WATCHERS watch streams on ConfigMaps, WRITES creates spread over time;
   each event's delivery latency is the time from just before the create request was sent
   to the moment a watcher parsed the event (both read in this process);
2. patch throughput: merge patches of one pod's annotations over keep-alive connections,
   from 1 and 4 client threads, with and without watchers open on pods;
3. the in-process harness (``harness.serve()``, what other packages' tests use) driven by the
   official ``kubernetes`` client: request latency of reads and patches.

Bounded in requests and time (every phase stops at its count or after 60 s). Prints a
Markdown section for docs/benchmarks.md. Run: ``.venv/bin/python benchmarks/bench_apiserver.py``.
"""

from __future__ import annotations

import http.client
import json
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from vnpu_sandbox.apiserver import harness

WATCHERS = 50
WRITES = 400
WRITE_GAP_SECONDS = 0.002
PATCHES = 2000
HARNESS_REQUESTS = 500
PHASE_LIMIT_SECONDS = 60.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def request(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: object = None,
    content_type: str = "application/json",
) -> dict[str, object]:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": content_type} if data is not None else {}
    connection.request(method, path, body=data, headers=headers)
    response = connection.getresponse()
    payload = response.read()
    if response.status >= 300:
        raise RuntimeError(f"{method} {path}: {response.status} {payload[:200]!r}")
    result: dict[str, object] = json.loads(payload)
    return result


def start_server() -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vnpu_sandbox",
            "apiserver",
            "--port",
            str(port),
            "--event-window",
            "100000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            request(connection, "GET", "/version")
            connection.close()
            return process, port
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError("the emulator did not start")


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def watch_fan_out(port: int) -> dict[str, float]:
    setup = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    listed = request(setup, "GET", "/api/v1/namespaces/default/configmaps")
    metadata = listed["metadata"]
    assert isinstance(metadata, dict)
    start = metadata["resourceVersion"]
    latencies: list[list[float]] = [[] for _ in range(WATCHERS)]
    opened = threading.Barrier(WATCHERS + 1)

    def watcher(index: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PHASE_LIMIT_SECONDS)
        connection.request(
            "GET",
            f"/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={start}&timeoutSeconds={int(PHASE_LIMIT_SECONDS)}",
        )
        response = connection.getresponse()
        opened.wait()
        while len(latencies[index]) < WRITES:
            line = response.readline()
            if not line:
                break
            event = json.loads(line)
            sent = float(event["object"]["metadata"]["annotations"]["sent"])
            latencies[index].append(time.perf_counter() - sent)
        connection.close()

    threads = [threading.Thread(target=watcher, args=(i,), daemon=True) for i in range(WATCHERS)]
    for thread in threads:
        thread.start()
    opened.wait()
    began = time.perf_counter()
    for number in range(WRITES):
        body = {
            "metadata": {
                "name": f"fan-{number}",
                "annotations": {"sent": repr(time.perf_counter())},
            },
            "data": {"n": str(number)},
        }
        request(setup, "POST", "/api/v1/namespaces/default/configmaps", body)
        time.sleep(WRITE_GAP_SECONDS)
        if time.perf_counter() - began > PHASE_LIMIT_SECONDS:
            break
    for thread in threads:
        thread.join(PHASE_LIMIT_SECONDS)
    elapsed = time.perf_counter() - began
    setup.close()
    flat = [value for per in latencies for value in per]
    complete = sum(1 for per in latencies if len(per) == WRITES)
    return {
        "delivered": len(flat),
        "complete_watchers": complete,
        "seconds": elapsed,
        "events_per_second": len(flat) / elapsed,
        "p50_ms": 1000 * statistics.median(flat),
        "p99_ms": 1000 * percentile(flat, 0.99),
        "max_ms": 1000 * max(flat),
    }


def patch_throughput(port: int, clients: int, watchers: int) -> dict[str, float]:
    setup = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    name = f"patched-{clients}-{watchers}"
    pod = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    request(setup, "POST", "/api/v1/namespaces/default/pods", pod)
    stop = threading.Event()

    def watch_pods() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=PHASE_LIMIT_SECONDS)
        connection.request(
            "GET",
            f"/api/v1/namespaces/default/pods?watch=true&timeoutSeconds={int(PHASE_LIMIT_SECONDS)}",
        )
        response = connection.getresponse()
        while not stop.is_set() and response.readline():
            pass
        connection.close()

    watch_threads = [threading.Thread(target=watch_pods, daemon=True) for _ in range(watchers)]
    for thread in watch_threads:
        thread.start()
    time.sleep(0.2)
    per_client = PATCHES // clients
    durations: list[float] = []

    def patcher(client: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for number in range(per_client):
            begin = time.perf_counter()
            body = {"metadata": {"annotations": {f"client-{client}": str(number)}}}
            request(
                connection,
                "PATCH",
                f"/api/v1/namespaces/default/pods/{name}",
                body,
                "application/merge-patch+json",
            )
            durations.append(time.perf_counter() - begin)
            if time.perf_counter() - began > PHASE_LIMIT_SECONDS:
                break
        connection.close()

    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(patcher, range(clients)))
    elapsed = time.perf_counter() - began
    stop.set()
    request(setup, "DELETE", f"/api/v1/namespaces/default/pods/{name}")
    setup.close()
    return {
        "patches": len(durations),
        "per_second": len(durations) / elapsed,
        "p50_ms": 1000 * statistics.median(durations),
        "p99_ms": 1000 * percentile(durations, 0.99),
    }


def harness_latency() -> dict[str, float]:
    """Per-request latency of the kubernetes client against an in-process emulator."""
    results: dict[str, float] = {}
    with harness.serve() as url, tempfile.TemporaryDirectory() as directory:
        path = harness.write_kubeconfig(Path(directory) / "kubeconfig", url)
        api_client = k8s_config.new_client_from_config(config_file=str(path))
        core = k8s.CoreV1Api(api_client)
        core.create_namespaced_config_map("default", {"metadata": {"name": "timed"}})
        calls = {
            "read": lambda n: core.read_namespaced_config_map("timed", "default"),
            "patch": lambda n: core.patch_namespaced_config_map(
                "timed", "default", {"data": {"n": str(n)}}
            ),
        }
        for name, call in calls.items():
            durations = []
            for number in range(HARNESS_REQUESTS):
                begin = time.perf_counter()
                call(number)
                durations.append(time.perf_counter() - begin)
            results[f"{name}_p50_ms"] = 1000 * statistics.median(durations)
            results[f"{name}_p99_ms"] = 1000 * percentile(durations, 0.99)
        api_client.close()
    return results


def main() -> None:
    process, port = start_server()
    try:
        fan = watch_fan_out(port)
        patch_rows = [(c, w, patch_throughput(port, c, w)) for c, w in ((1, 0), (4, 0), (1, 10))]
    finally:
        process.terminate()
        process.wait(timeout=10)
    in_process = harness_latency()
    print("## API emulator (vnpu-sandbox apiserver)\n")
    print(
        f"Python {platform.python_version()}, {platform.machine()}; server in its own process, clients in this one.\n"
    )
    print(
        f"### Watch fan-out: {WATCHERS} watchers, {WRITES} creates ({WRITE_GAP_SECONDS * 1000:.0f} ms apart)\n"
    )
    print("| events delivered | complete watchers | events/s delivered | latency p50 | p99 | max |")
    print("|---|---|---|---|---|---|")
    print(
        f"| {fan['delivered']:.0f} | {fan['complete_watchers']:.0f}/{WATCHERS} | {fan['events_per_second']:.0f} | "
        f"{fan['p50_ms']:.1f} ms | {fan['p99_ms']:.1f} ms | {fan['max_ms']:.1f} ms |"
    )
    print(f"\n### Merge-patch throughput ({PATCHES} patches of one pod's annotations)\n")
    print("| client threads | watchers on pods | patches/s | latency p50 | p99 |")
    print("|---|---|---|---|---|")
    for clients, watchers, row in patch_rows:
        print(
            f"| {clients} | {watchers} | {row['per_second']:.0f} | {row['p50_ms']:.2f} ms | {row['p99_ms']:.2f} ms |"
        )

    print(
        f"\n### In-process harness, kubernetes client, {HARNESS_REQUESTS} sequential requests each\n"
    )
    print("| request | latency p50 | p99 |")
    print("|---|---|---|")
    for name in ("read", "patch"):
        print(
            f"| {name} | {in_process[name + '_p50_ms']:.2f} ms | {in_process[name + '_p99_ms']:.2f} ms |"
        )


if __name__ == "__main__":
    main()
