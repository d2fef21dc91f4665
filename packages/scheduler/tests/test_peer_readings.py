"""Requests HAMi and Volcano accept, read as they read them: the webhook's patch and
warnings, and the scheduler's event when it binds such a pod without the webhook."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

Json = dict[str, Any]
SOFT = {"huawei.com/vnpu-mode": "hami-core"}
SUPER_POD = """\
vnpus:
  configs:
  - commonWord: Ascend910C
    superPod: true
"""


def _review(pod: Json) -> Json:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": "default", "object": pod},
    }


def _mutate(scheduler: Any, pod: Json) -> tuple[Json, dict[str, str]]:
    """The reply and its patch as ``{path: value}``."""
    reply: Json = scheduler.post("mutate", _review(pod)).json()["response"]
    patch = json.loads(base64.b64decode(reply["patch"])) if "patch" in reply else []
    return reply, {op["path"]: op["value"] for op in patch}


LIMITS = "/spec/containers/0/resources/limits/huawei.com~1"
REQUESTS = "/spec/containers/0/resources/requests/huawei.com~1"


@pytest.mark.parametrize(
    ("memory", "annotations", "patched", "warning"),
    [
        # HAMi's webhook trims 0 to the first template that holds it: the smallest.
        ("0", {}, "3072", "huawei.com/Ascend310P-memory=0 rounds to the smallest template vir01"),
        # Soft mode: 0 is 100 % of the chip's memory, as HAMi's scheduler and Volcano read it.
        ("0", SOFT, "21527", "huawei.com/Ascend310P-memory=0 is read as no memory given"),
    ],
)
def test_memory_zero_is_admitted_and_rewritten(
    scheduler: Any, make: Any, memory: str, annotations: dict[str, str], patched: str, warning: str
) -> None:
    reply, patch = _mutate(scheduler, make.pod("zero", memory=memory, annotations=annotations))
    assert reply["allowed"] is True
    assert patch[LIMITS + "Ascend310P-memory"] == patched
    (said,) = reply["warnings"]
    assert said.startswith("container 'main': ")
    assert warning in said


def test_core_percent_above_100_is_clamped_in_the_pod_with_a_warning(
    scheduler: Any, make: Any
) -> None:
    pod = make.pod("greedy", memory=4096, annotations=SOFT)
    pod["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend310P-core"] = "150"
    reply, patch = _mutate(scheduler, pod)
    assert reply["allowed"] is True
    assert patch[LIMITS + "Ascend310P-core"] == "100"
    (said,) = reply["warnings"]
    assert "huawei.com/Ascend310P-core=150 is above 100%; read as 100" in said


def test_a_request_read_as_written_gets_no_warning(scheduler: Any, make: Any) -> None:
    reply, _ = _mutate(scheduler, make.pod("plain", memory=4000))
    assert reply["allowed"] is True
    assert "warnings" not in reply


def test_super_pod_one_die_becomes_a_die_pair_and_odd_counts_are_denied(
    start_scheduler: Any, make: Any, tmp_path: Path
) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text(SUPER_POD)
    scheduler = start_scheduler(device_config=config)
    pod = make.pod("pair", "Ascend910C", 1)
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"] = dict(resources["limits"])
    reply, patch = _mutate(scheduler, pod)
    assert reply["allowed"] is True
    assert patch[LIMITS + "Ascend910C"] == "2"
    assert patch[REQUESTS + "Ascend910C"] == "2"
    assert patch[LIMITS + "Ascend910C-memory"] == "65536"
    (said,) = reply["warnings"]
    assert "huawei.com/Ascend910C=1 takes a die pair in a super pod" in said
    odd = scheduler.post("mutate", _review(make.pod("odd", "Ascend910C", 3))).json()["response"]
    assert odd["allowed"] is False
    assert odd["status"]["message"] == (
        "container 'main': huawei.com/Ascend910C=3: must be 1 or an even number: "
        "a super pod (superPod: true) gives whole dies in pairs"
    )
    # A vNPU is cut from one die: not doubled.
    vnpu, patch = _mutate(scheduler, make.pod("vnpu", "Ascend910C", 1, 16000))
    assert LIMITS + "Ascend910C" not in patch
    assert patch[LIMITS + "Ascend910C-memory"] == "16384"
    assert "warnings" not in vnpu


def test_binding_memory_zero_without_the_webhook_takes_a_whole_chip_and_says_so(
    kube: Any, make: Any, scheduler: Any
) -> None:
    kube.add_node(make.node("n1"))
    pod = kube.add_pod(make.npu_pod("job", memory=0))
    body = {
        "PodName": "job",
        "PodNamespace": kube.namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": "n1",
    }
    assert scheduler.post("bind", body).json() == {"Error": ""}
    notes = kube.pod("job")["metadata"]["annotations"]
    assert notes["hami.io/Ascend310P-devices-allocated"] == "n1-Ascend310P-0,Ascend310P,21527,0:;"
    scheduler.wait_for(lambda: any(e["reason"] == "NPURequestAdjusted" for e in kube.events("job")))
    event = next(e for e in kube.events("job") if e["reason"] == "NPURequestAdjusted")
    assert event["type"] == "Warning"
    assert (
        "huawei.com/Ascend310P-memory=0 is read as no memory given: a whole chip"
        in event["message"]
    )


def test_a_blank_uuid_list_does_not_filter_out_every_chip(
    kube: Any, make: Any, scheduler: Any
) -> None:
    kube.add_node(make.node("n1"))
    annotations = {"hami.io/use-Ascend310P-uuid": " ", "hami.io/no-use-Ascend310P-uuid": ""}
    pod = kube.add_pod(make.npu_pod("job", memory=3000, annotations=annotations))
    body = {
        "PodName": "job",
        "PodNamespace": kube.namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": "n1",
    }
    assert scheduler.post("bind", body).json() == {"Error": ""}
    assert kube.pod("job")["spec"]["nodeName"] == "n1"


def test_memory_above_what_a_chip_gives_a_pod_is_never_cut_silently(
    kube: Any, make: Any, scheduler: Any
) -> None:
    """HAMi reads 22000 MiB on a 310P (21527 of its 24576 MiB go to a pod) as a whole chip of
    21527. vnpu gives the same chip, but leaves the figure the pod wrote and says so, at
    admission and in an event when it binds."""
    expected = (
        "container 'main': huawei.com/Ascend310P-memory=22000 is more than one Ascend310P gives "
        "a pod (21527 MiB of the chip's 24576 MiB): it gets a whole chip with 21527 MiB"
    )
    reply, patch = _mutate(scheduler, make.pod("big", memory="22000"))
    assert reply["allowed"] is True
    assert LIMITS + "Ascend310P-memory" not in patch, "never rewritten to less than asked"
    (said,) = reply["warnings"]
    assert said.startswith(expected)
    # At the chip's own share or below, a whole chip is exactly what was asked: no warning.
    fits, patch = _mutate(scheduler, make.pod("share", memory="21527"))
    assert "warnings" not in fits
    assert LIMITS + "Ascend310P-memory" not in patch

    kube.add_node(make.node("n1"))
    pod = kube.add_pod(make.npu_pod("big", memory=22000))
    body = {"PodName": "big", "PodNamespace": kube.namespace, "PodUID": pod["metadata"]["uid"]}
    assert scheduler.post("bind", {**body, "Node": "n1"}).json() == {"Error": ""}
    notes = kube.pod("big")["metadata"]["annotations"]
    assert notes["hami.io/Ascend310P-devices-allocated"] == "n1-Ascend310P-0,Ascend310P,21527,0:;"
    scheduler.wait_for(lambda: any(e["reason"] == "NPURequestAdjusted" for e in kube.events("big")))
    event = next(e for e in kube.events("big") if e["reason"] == "NPURequestAdjusted")
    assert event["type"] == "Warning"
    assert expected in event["message"]
