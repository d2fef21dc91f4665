"""Settings, the HTTP listener, and the ``vnpu-exporter`` command run as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
from prometheus_client.registry import Collector

from vnpu_core import protocol
from vnpu_exporter import errors, metrics, server, settings


def test_flags_environment_and_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VNPU_EXP_PORT", "9500")
    monkeypatch.setenv("VNPU_EXP_NODE_NAME", "from-env")
    config = settings.from_args(
        [
            "--backend",
            "sim",
            "--sim-dir",
            str(tmp_path),
            "--interval",
            "health=2",
            "--interval",
            "vnpus=30",
            "--npu-exporter-compat",
            "--no-pod-resources",
        ]
    )
    assert config.node_name == "from-env"
    assert config.port == 9500
    assert config.backend is settings.BackendKind.SIM
    assert config.intervals == {metrics.Group.HEALTH: 2.0, metrics.Group.VNPUS: 30.0}
    assert config.npu_exporter_compat is True
    assert config.pod_resources is False
    assert config.kubernetes is True
    assert settings.from_args(["--port", "9600"]).port == 9600  # a flag beats the environment


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--node-name", "n", "--port", "70000"], "port", "70000"),
        (["--node-name", "Bad_Name"], "node_name", "Bad_Name"),
        (["--node-name", "n", "--backend", "tpu"], "backend", "tpu"),
        (["--node-name", "n", "--backend", "sim"], "(settings)", None),
        (["--node-name", "n", "--interval", "bogus=5"], "intervals.bogus.[key]", "bogus"),
        (["--node-name", "n", "--interval", "health=0"], "intervals", None),
        (["--node-name", "n", "--stale-factor", "1"], "stale_factor", "1"),
        (["--node-name", "n", "--kubeconfig", "/no/such/file"], "kubeconfig", "/no/such/file"),
    ],
)
def test_bad_settings_name_the_field(argv: list[str], field: str, value: str | None) -> None:
    with pytest.raises(errors.SettingsError) as caught:
        settings.from_args(argv)
    assert caught.value.field.startswith(field.split(".", maxsplit=1)[0])
    if value is not None:
        assert value in str(caught.value)


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vnpu_exporter", *argv],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )


def test_main_exit_codes(tmp_path: Path) -> None:
    result = _run("--port", "1")
    assert result.returncode == 2
    assert "node_name" in result.stderr
    result = _run("--node-name", "n", "--backend", "sim", "--sim-dir", str(tmp_path))
    assert result.returncode == 2  # a directory without chips.yaml or state
    assert "--sim-dir" in result.stderr
    assert "state" in result.stderr
    missing = tmp_path / "libdcmi.so"
    missing.write_text("not a library")
    result = _run("--node-name", "n", "--dcmi-library", str(missing), "--no-kubernetes")
    assert result.returncode == 1
    assert "cannot open the NPU driver" in result.stderr
    assert str(missing) in result.stderr


class _Broken(Collector):
    def __init__(self) -> None:
        self.broken = True

    def collect(self) -> Iterator[Any]:
        if self.broken:
            raise RuntimeError("collector bug")
        return iter(())


@pytest.fixture
def served(kit: Any, node310: Any) -> Iterator[tuple[Any, server.MetricsServer, list[str]]]:
    exp = kit.Exporter(node310).refresh()
    stuck: list[str] = []
    listener = server.MetricsServer(exp.registry, exp.telemetry, lambda: stuck, "127.0.0.1", 0)
    listener.start()
    try:
        yield exp, listener, stuck
    finally:
        listener.stop()


def test_http_metrics_healthz_and_not_found(served: Any) -> None:
    exp, listener, stuck = served
    with httpx.Client(base_url=listener.url, timeout=5) as http:
        answer = http.get("/metrics")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert "vnpu_chip_info{" in answer.text
        open_metrics = http.get(
            "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
        )
        assert open_metrics.headers["content-type"].startswith("application/openmetrics-text")
        assert open_metrics.text.endswith("# EOF\n")
        assert http.get("/healthz").json() == {"status": "ok", "stuck_groups": []}
        stuck.append("health")
        answer = http.get("/healthz")
        assert (answer.status_code, answer.json()["stuck_groups"]) == (503, ["health"])
        assert http.get("/other").status_code == 404
    assert exp.value("vnpu_exporter_scrape_duration_seconds_count") == 2


def test_a_collector_bug_is_a_500_and_the_service_keeps_serving(served: Any) -> None:
    exp, listener, _ = served
    broken = _Broken()
    exp.registry.register(broken)
    with httpx.Client(base_url=listener.url, timeout=5) as http:
        assert http.get("/metrics").status_code == 500
        broken.broken = False
        assert http.get("/metrics").status_code == 200


def _pod(name: str, uuid: str, node: str) -> dict[str, Any]:
    annotations = {
        protocol.allocated_key("Ascend310P"): f"{uuid},Ascend310P,6144,0:;",
        protocol.runtime_key("Ascend310P"): json.dumps([{"UUID": uuid, "temp": "vir02"}]),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "app"}]},
    }


def test_the_command_serves_and_stops_on_sigterm(
    kit: Any, tmp_path: Path, kube_namespace: Any
) -> None:
    sim = kit.make_node(tmp_path / "sim", "310P3", 2)
    chip = sim.chips()[0]
    vnpu = sim.create_vnpu(0, "vir02")
    config = kube_namespace.kubeconfig
    client = kubernetes.config.new_client_from_config(config_file=str(config))
    kubernetes.client.CoreV1Api(client).create_namespaced_pod(
        kube_namespace.name, _pod("infer", chip.uuid, "node-a")
    )
    client.close()
    argv = [
        "--node-name",
        "node-a",
        "--backend",
        "sim",
        "--sim-dir",
        str(sim.sim_dir),
        "--kubeconfig",
        str(config),
        "--no-pod-resources",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
    ]
    env = {**os.environ, "VNPU_EXP_INTERVALS": json.dumps({"pods": 0.2})}
    with subprocess.Popen(
        [sys.executable, "-m", "vnpu_exporter", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            event = json.loads(line)
            assert event["event"] == "serving", line
            deadline = time.monotonic() + 10
            text = ""
            while time.monotonic() < deadline and "vnpu_allocation_info{" not in text:
                text = httpx.get(f"{event['url']}/metrics", timeout=5).text
                time.sleep(0.1)
            assert f'vnpu="{vnpu}"' in text
            assert 'pod="infer"' in text
        finally:
            process.send_signal(signal.SIGTERM)
            assert process.wait(10) == 0


def test_concurrent_scrapes_while_the_pods_change(kit: Any, node310: Any) -> None:
    chips = node310.chips()
    pods = kit.StaticPods(
        [kit.pod(f"p{i}", [[kit.Device(chips[i % 4], "vir01")]]) for i in range(8)]
    )
    exp = kit.Exporter(node310, pods).refresh()
    listener = server.MetricsServer(exp.registry, exp.telemetry, list, "127.0.0.1", 0)
    listener.start()
    failures: list[str] = []
    stop = threading.Event()

    def scrape() -> None:
        with httpx.Client(base_url=listener.url, timeout=10) as http:
            for _ in range(15):
                answer = http.get("/metrics")
                if answer.status_code != 200 or answer.text.count("vnpu_allocation_info{") != 8:
                    failures.append(
                        f"{answer.status_code} {answer.text.count('vnpu_allocation_info{')}"
                    )

    def churn() -> None:
        version = 0
        while not stop.is_set():
            version += 1
            for item in pods.items:
                item["metadata"]["resourceVersion"] = str(version)
            exp.sampler.refresh(metrics.Group.PODS)

    threads = [threading.Thread(target=scrape) for _ in range(4)]
    changer = threading.Thread(target=churn)
    changer.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stop.set()
    changer.join(10)
    listener.stop()
    assert failures == []
