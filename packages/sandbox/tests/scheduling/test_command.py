"""``vnpu-sandbox scheduler`` as a process: bad configuration, JSON log lines, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from .conftest import Cluster, wait_for

COMMAND = [sys.executable, "-m", "vnpu_sandbox", "scheduler"]


def write_config(path: Path, **extender: object) -> Path:
    document = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler"}],
        "extenders": [{"urlPrefix": "http://127.0.0.1:9", "filterVerb": "filter", **extender}]
        if extender
        else [],
    }
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    return path


def test_a_bad_configuration_stops_at_start_naming_the_field(tmp_path: Path) -> None:
    path = write_config(tmp_path / "bad.yaml", prioritizeVerb="prioritize", weight=0)
    done = subprocess.run(
        [*COMMAND, "--config", str(path), "--server", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"vnpu-sandbox scheduler: --config {path}: extenders[0].weight: "
        "must have a positive weight applied to it (got 0)"
    )


def test_bad_flags_exit_2(tmp_path: Path) -> None:
    path = write_config(tmp_path / "ok.yaml")
    done = subprocess.run(
        [*COMMAND, "--config", str(path), "--server", "http://x", "--bind-workers", "0"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 2
    assert "--bind-workers: '0' must be at least 1" in done.stderr


def test_schedules_logs_json_and_stops_on_sigterm(tmp_path: Path, cluster: Cluster) -> None:
    cluster.add_node("n1")
    path = write_config(tmp_path / "ok.yaml")
    log_path = tmp_path / "scheduler.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*COMMAND, "--config", str(path), "--server", cluster.url, "--seed", "1"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            cluster.add_pod("p", requests={"cpu": "100m"})
            assert wait_for(lambda: cluster.node_of("p"), "the pod to be bound", timeout=20) == "n1"
            wait_for(lambda: "pod_bound" in log_path.read_text(), "the bind to be logged")
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=15) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    events = [line["event"] for line in lines]
    assert events[0] == "scheduler_starting"
    assert events[-1] == "scheduler_stopped"
    attempt = next(line for line in lines if line["event"] == "scheduling_attempt")
    assert attempt["pod"] == "default/p"
    assert attempt["node"] == "n1"
    assert attempt["outcome"] == "scheduled"
    assert isinstance(attempt["duration_seconds"], float)
    assert {"timestamp", "level", "logger"} <= set(attempt)
