"""Pods vnpu will not place are told why and what to change: an admission warning, one Event.

The seed's cases: a pod asking Volcano's ``huawei.com/npu``, and a pod asking vnpu's
``huawei.com/Ascend310P`` that names ``schedulerName: volcano``. Without a word from vnpu both
sit Pending (the first with "Insufficient huawei.com/npu" at best, the second with nothing).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from vnpu_core import catalog
from vnpu_scheduler import notices

Json = dict[str, Any]
UNKNOWN = "asks for huawei.com/npu, which vnpu does not schedule"
ELSEWHERE = "spec.schedulerName is 'volcano': vnpu-scheduler does not place this pod"


def _volcano_npu(make: Any, name: str) -> Json:
    pod: Json = make.pod(name, "npu")  # huawei.com/npu: 1, as Volcano's Ascend plugin reads it
    return pod


def _volcano_scheduled(make: Any, name: str) -> Json:
    pod: Json = make.pod(name, "Ascend310P", memory=4096)
    pod["spec"]["schedulerName"] = "volcano"
    return pod


def _mutate(scheduler: Any, pod: Json) -> Json:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": "default", "object": pod},
    }
    reply: Json = scheduler.post("mutate", review).json()["response"]
    return reply


def test_what_each_pod_is_told(make: Any) -> None:
    models, ours = catalog.BUILTIN, "vnpu-scheduler"
    (unknown,) = notices.notices(_volcano_npu(make, "a"), models, ours)
    assert unknown.startswith(f"container 'main' {UNKNOWN}: vnpu reads huawei.com/<chip model>")
    assert "`vnpu convert`" in unknown
    (elsewhere,) = notices.notices(_volcano_scheduled(make, "b"), models, ours)
    assert elsewhere.startswith(ELSEWHERE)
    assert "remove spec.schedulerName and vnpu's webhook sets vnpu-scheduler" in elsewhere
    # Pods vnpu places, and pods without NPUs under any scheduler: nothing to say.
    assert notices.notices(make.pod("c", "Ascend310P", memory=4096), models, ours) == ()
    assert notices.notices(make.npu_pod("d", "Ascend910A"), models, ours) == ()
    plain = make.pod("e", containers=[{"name": "main", "image": "app"}])
    plain["spec"]["schedulerName"] = "volcano"
    assert notices.notices(plain, models, ours) == ()


def test_the_webhook_admits_them_with_a_warning_that_names_the_fix(
    scheduler: Any, make: Any
) -> None:
    for pod, said in (
        (_volcano_npu(make, "a"), UNKNOWN),
        (_volcano_scheduled(make, "b"), ELSEWHERE),
    ):
        reply = _mutate(scheduler, pod)
        assert reply["allowed"] is True
        (warning,) = reply["warnings"]
        assert said in warning
        patch = json.loads(base64.b64decode(reply["patch"])) if "patch" in reply else []
        assert not [op for op in patch if op["path"] == "/spec/schedulerName"]


def test_each_gets_one_event_however_many_replicas_see_it(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    first, second = start_scheduler(), start_scheduler()
    kube.add_pod(_volcano_npu(make, "npu-pod"))
    kube.add_pod(_volcano_scheduled(make, "volcano-pod"))
    kube.add_pod(make.npu_pod("ours"))
    for name, said in (("npu-pod", UNKNOWN), ("volcano-pod", ELSEWHERE)):

        def told(pod: str = name) -> list[Json]:
            return [e for e in kube.events(pod) if e["reason"] == notices.REASON]

        first.wait_for(lambda: bool(told()))
        (event,) = told()
        assert event["type"] == "Warning"
        assert said in event["message"]
        assert event["involvedObject"]["uid"] == kube.pod(name)["metadata"]["uid"]
    # Both replicas saw both pods and wrote what they had to write: still one Event each (the
    # second write met the first's name, 409), and none for the pod vnpu places.
    uids = {kube.pod(n)["metadata"]["uid"] for n in ("npu-pod", "volcano-pod")}
    for replica in (first, second):
        replica.wait_for(lambda r=replica: uids <= r.service._noticed)
        replica.wait_for(lambda r=replica: not r.service.events._pending)
    for name in ("npu-pod", "volcano-pod"):
        assert len([e for e in kube.events(name) if e["reason"] == notices.REASON]) == 1
    assert not [e for e in kube.events("ours") if e["reason"] == notices.REASON]
