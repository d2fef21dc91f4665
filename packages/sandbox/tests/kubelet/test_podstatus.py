from __future__ import annotations

from typing import Any

import pytest

from vnpu_sandbox.kubelet import podstatus

SCHEDULED = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def _pod(**spec: Any) -> dict[str, Any]:
    base = {"containers": [{"name": "main", "image": "busybox"}]}
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
        "spec": {**base, **spec},
        "status": {"phase": "Pending", "conditions": [SCHEDULED]},
    }


def test_running_status_has_ips_ready_conditions_and_running_containers() -> None:
    pod = _pod(
        initContainers=[
            {"name": "prep", "image": "busybox"},
            {"name": "side", "image": "proxy", "restartPolicy": "Always"},
        ]
    )
    status = podstatus.running(pod, "127.0.0.1", "10.244.1.2", "2026-01-01T00:00:05Z")
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.244.1.2"
    assert status["podIPs"] == [{"ip": "10.244.1.2"}]
    assert status["hostIP"] == "127.0.0.1"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["PodScheduled"] == SCHEDULED
    for kind in ("Initialized", "Ready", "ContainersReady", "PodReadyToStartContainers"):
        assert conditions[kind]["status"] == "True"
    (main,) = status["containerStatuses"]
    assert main["state"]["running"]["startedAt"] == "2026-01-01T00:00:05Z"
    assert main["ready"] is True
    assert main["containerID"].startswith("containerd://")
    prep, side = status["initContainerStatuses"]
    assert prep["state"]["terminated"]["reason"] == "Completed"
    assert "running" in side["state"]
    assert status["qosClass"] == "BestEffort"


def test_host_network_pod_gets_the_node_ip() -> None:
    status = podstatus.running(_pod(hostNetwork=True), "127.0.0.1", "10.244.1.2", "t")
    assert status["podIP"] == "127.0.0.1"


def test_rejected_status_keeps_scheduler_conditions_and_prefixes_message() -> None:
    pod = _pod()
    pod["status"]["conditions"].append({"type": "Ready", "status": "False"})
    status = podstatus.rejected(
        pod, "UnexpectedAdmissionError", "Allocate failed due to x, which is unexpected"
    )
    assert status["phase"] == "Failed"
    assert status["reason"] == "UnexpectedAdmissionError"
    assert status["message"] == "Pod was rejected: Allocate failed due to x, which is unexpected"
    assert status["conditions"] == [SCHEDULED]


@pytest.mark.parametrize(
    ("code", "phase", "reason"), [(0, "Succeeded", "Completed"), (3, "Failed", "Error")]
)
def test_completed_status(code: int, phase: str, reason: str) -> None:
    status = podstatus.completed(_pod(), code, "2026-01-01T00:01:00Z")
    assert status["phase"] == phase
    (main,) = status["containerStatuses"]
    assert main["state"]["terminated"]["exitCode"] == code
    assert main["state"]["terminated"]["reason"] == reason
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "PodCompleted"


def test_start_failed_status_names_the_container() -> None:
    status = podstatus.start_failed(
        _pod(), "127.0.0.1", "main", "CreateContainerConfigError", "boom", "t"
    )
    assert status["phase"] == "Pending"
    (main,) = status["containerStatuses"]
    assert main["state"] == {"waiting": {"reason": "CreateContainerConfigError", "message": "boom"}}
    assert main["ready"] is False


def test_condition_transition_time_moves_only_on_change() -> None:
    old = [{"type": "Ready", "status": "True", "lastTransitionTime": "t0"}]
    same = podstatus.merge_conditions(old, [{"type": "Ready", "status": "True"}], "t1")
    changed = podstatus.merge_conditions(old, [{"type": "Ready", "status": "False"}], "t1")
    assert same[0]["lastTransitionTime"] == "t0"
    assert changed[0]["lastTransitionTime"] == "t1"


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({}, "BestEffort"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
        (
            {
                "limits": {"cpu": "1", "memory": "1Gi"},
                "requests": {"cpu": "1000m", "memory": "1Gi"},
            },
            "Guaranteed",
        ),
        ({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}, "Burstable"),
        ({"requests": {"memory": "1Gi"}}, "Burstable"),
        ({"limits": {"x.io/d": "1"}}, "BestEffort"),
    ],
)
def test_qos_class(resources: dict[str, Any], qos: str) -> None:
    pod = _pod(containers=[{"name": "main", "resources": resources}])
    assert podstatus.qos_class(pod) == qos
