"""The webhook in DRA mode: the requests users write today, as the extended resources DRA serves.

Whole chips keep ``huawei.com/<CW>`` (its DeviceClass serves it); a vNPU becomes its memory
tier's resource (or its pinned template's); a soft slice is refused, naming the class a claim
uses. kube-apiserver then takes the patched pod as it takes any pod with extended resources.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from vnpu_core import catalog, draclasses, requests
from vnpu_scheduler import dramode

Json = dict[str, Any]
P310 = catalog.BUILTIN.by_common_word("Ascend310P")
assert P310 is not None


def _review(pod: Json) -> Json:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "namespace": "default", "object": pod},
    }


def _patched(pod: Json, reply: Json) -> Json:
    """The pod after the reply's JSON patch (add and remove of object members)."""
    out = copy.deepcopy(pod)
    for op in json.loads(base64.b64decode(reply["patch"])) if "patch" in reply else []:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "remove":
            del target[parts[-1]]
        else:
            target[parts[-1]] = op["value"]
    return out


@pytest.fixture
def dra(start_scheduler: Any) -> Any:
    return start_scheduler(mode="dra")


def _limits(pod: Json) -> Json:
    result: Json = pod["spec"]["containers"][0]["resources"]["limits"]
    return result


def test_the_seed_pod_asks_for_its_memory_tier(dra: Any, make: Any) -> None:
    """The Volcano article's pod: huawei.com/Ascend310P: 1 with 4096 MiB, minus the scheduler
    name: a vir02 or vir02_1c (6144 MiB) from DRA, and a warning that says so."""
    pod = make.pod("seed", "Ascend310P", 1, 4096)
    pod["spec"]["containers"][0]["resources"]["requests"] = dict(_limits(pod))
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is True
    after = _patched(pod, reply)
    for section in ("limits", "requests"):
        assert after["spec"]["containers"][0]["resources"][section] == {
            "npu.vnpu.io/ascend310p-6144m": "1"
        }
    assert "schedulerName" not in after["spec"]  # kube-scheduler allocates in DRA mode
    (warning,) = reply["warnings"]
    assert warning == (
        "container 'main': DRA mode: huawei.com/Ascend310P and huawei.com/Ascend310P-memory are "
        "asked as npu.vnpu.io/ascend310p-6144m: 1 (DeviceClass ascend310p-6144m.npu.vnpu.io: vir02)"
    )


def test_whole_chips_keep_their_resource_and_lose_the_memory(dra: Any, make: Any) -> None:
    pod = make.pod("whole", "Ascend910A", 2, 32768)
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert _limits(_patched(pod, reply)) == {"huawei.com/Ascend910A": "2"}
    (warning,) = reply["warnings"]
    assert "without the server's ring or mesh rule yet" in warning


def test_a_pinned_template_asks_for_that_template(dra: Any, make: Any) -> None:
    pod = make.pod("pinned", "Ascend310P", 1, 4096, annotations={"vnpu.io/template": "vir02_1c"})
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert _limits(_patched(pod, reply)) == {"npu.vnpu.io/ascend310p-vir02-1c": "1"}


def test_a_soft_slice_is_refused_naming_the_class_a_claim_uses(dra: Any, make: Any) -> None:
    pod = make.pod("soft", "Ascend310P", 1, 4096, annotations={"huawei.com/vnpu-mode": "hami-core"})
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is False
    assert "ResourceClaim of DeviceClass ascend310p-soft.npu.vnpu.io" in reply["status"]["message"]


def test_every_resource_the_webhook_writes_has_a_class_of_the_same_name() -> None:
    for model in catalog.BUILTIN:
        for memory in draclasses.tiers(model):
            resource = draclasses.tier_resource(model, memory)
            assert draclasses.class_name(resource, model) == resource.split("/")[1] + ".npu.vnpu.io"
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "limits": {
                            "huawei.com/Ascend310P": "1",
                            "huawei.com/Ascend310P-memory": "3000",
                        }
                    },
                }
            ]
        }
    }
    request = requests.from_pod(pod, catalog.BUILTIN, admission=True)
    patch, _, denial = dramode.convert(pod["spec"], request)
    assert denial == ""
    assert {op["op"] for op in patch} == {"add", "remove"}


def test_a_pod_sent_to_another_scheduler_is_left_as_written(dra: Any, make: Any) -> None:
    pod = make.pod("elsewhere", "Ascend310P", 1, 4096)
    pod["spec"]["schedulerName"] = "volcano"
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is True
    assert "patch" not in reply
    (warning,) = reply["warnings"]
    assert warning.startswith("spec.schedulerName is 'volcano'")
