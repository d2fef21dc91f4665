"""The webhook in DRA mode: the requests users write today, as the extended resources DRA serves.

One whole chip keeps ``huawei.com/<CW>`` (its DeviceClass serves it); a vNPU becomes its memory
tier's resource (or its pinned template's); several whole chips and soft slices become a pod
claim from a ResourceClaimTemplate the webhook makes in the namespace. kube-apiserver then takes
the patched pod as it takes any pod with extended resources or claims.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import kubernetes
import pytest

from vnpu_core import catalog, draclaims, draclasses, requests
from vnpu_scheduler import claimtemplates, cluster, dramode

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
    """The pod after the reply's JSON patch (add and remove of object members, appends)."""
    out = copy.deepcopy(pod)
    for op in json.loads(base64.b64decode(reply["patch"])) if "patch" in reply else []:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = out
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "remove":
            del target[parts[-1]]
        elif parts[-1] == "-":
            target.append(op["value"])
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


def test_one_whole_chip_keeps_its_resource_and_loses_the_memory(dra: Any, make: Any) -> None:
    pod = make.pod("whole", "Ascend910A", 1, 32768)
    reply = dra.post("mutate", _review(pod)).json()["response"]
    after = _patched(pod, reply)
    assert _limits(after) == {"huawei.com/Ascend910A": "1"}
    assert "resourceClaims" not in after["spec"]


def _template(kube: Any, name: str) -> Json:
    api = kubernetes.client.ResourceV1Api(kube.client)
    found: Json = kube.plain(api.read_namespaced_resource_claim_template(name, kube.namespace))
    return found


def test_several_whole_chips_become_a_claim_kept_to_one_ring(
    dra: Any, make: Any, kube: Any
) -> None:
    """huawei.com/Ascend910A: 4 becomes a pod claim from a template the webhook made in the
    pod's namespace: on a 910a-8 server the four chips share one ring (matchAttribute)."""
    pod = make.pod("four", "Ascend910A", 4, 32768)
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is True
    after = _patched(pod, reply)
    (claim,) = after["spec"]["resourceClaims"]
    assert claim["name"] == "npu-main"
    assert claim["resourceClaimTemplateName"].startswith("vnpu-ascend910a-4x-")
    resources = after["spec"]["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "npu-main"}]
    assert not any(name.startswith("huawei.com/") for name in resources["limits"])
    (warning,) = reply["warnings"]
    assert warning == (
        "container 'main': DRA mode: 4 whole chips of Ascend910A asked with "
        f"ResourceClaimTemplate {claim['resourceClaimTemplateName']} (pod claim 'npu-main')"
    )
    made = _template(kube, claim["resourceClaimTemplateName"])
    assert made["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "vnpu"}
    assert made["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["npu/ring"], "matchAttribute": "npu.vnpu.io/ring"}
    ]
    # kube-apiserver takes the patched pod, claim and all
    kube.add_pod(after)
    # a second pod asking the same reuses the template
    second = make.pod("four-again", "Ascend910A", 4, 32768)
    again = dra.post("mutate", _review(second)).json()["response"]
    assert again["allowed"] is True
    assert _patched(second, again)["spec"]["resourceClaims"] == [claim]


def test_a_count_no_layout_can_keep_together_is_refused(dra: Any, make: Any) -> None:
    pod = make.pod("dies", "Ascend910C", 4, 0)
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is False
    message = reply["status"]["message"]
    assert message.startswith("container 'main': 4 whole chips of Ascend910C: ")
    assert "whole die pairs" in message


def test_a_template_someone_else_made_under_vnpus_name_refuses_the_pod(
    dra: Any, make: Any, kube: Any
) -> None:
    model = catalog.BUILTIN.by_common_word("Ascend910A")
    assert model is not None
    claim = draclaims.whole_chips(model, 2)
    assert isinstance(claim, draclaims.Claim)
    forged = copy.deepcopy(claim.body)
    del forged["spec"]["spec"]["devices"]["constraints"]  # no ring rule
    api = kubernetes.client.ResourceV1Api(kube.client)
    api.create_namespaced_resource_claim_template(kube.namespace, forged)
    reply = dra.post("mutate", _review(make.pod("two", "Ascend910A", 2, 0))).json()["response"]
    assert reply["allowed"] is False
    assert reply["status"]["message"] == (
        f"ResourceClaimTemplate {kube.namespace}/{claim.name} exists with a spec vnpu did not "
        "write: delete it and vnpu makes it again with the next pod"
    )
    api.delete_namespaced_resource_claim_template(claim.name, kube.namespace)
    reply = dra.post("mutate", _review(make.pod("two", "Ascend910A", 2, 0))).json()["response"]
    assert reply["allowed"] is True
    assert _template(kube, claim.name)["spec"]["spec"]["devices"]["constraints"]


def test_a_dry_run_makes_no_template(dra: Any, make: Any, kube: Any) -> None:
    review = _review(make.pod("dry", "Ascend910A", 8, 0))
    review["request"]["dryRun"] = True
    reply = dra.post("mutate", review).json()["response"]
    assert reply["allowed"] is True
    name = _patched(review["request"]["object"], reply)["spec"]["resourceClaims"][0]
    api = kubernetes.client.ResourceV1Api(kube.client)
    listed = api.list_namespaced_resource_claim_template(kube.namespace).items
    assert listed == [], name


def test_a_pinned_template_asks_for_that_template(dra: Any, make: Any) -> None:
    pod = make.pod("pinned", "Ascend310P", 1, 4096, annotations={"vnpu.io/template": "vir02_1c"})
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert _limits(_patched(pod, reply)) == {"npu.vnpu.io/ascend310p-vir02-1c": "1"}


def test_a_soft_slice_becomes_a_claim_of_memory_and_core_share(
    dra: Any, make: Any, kube: Any
) -> None:
    pod = make.pod("soft", "Ascend310P", 1, 4096, annotations={"huawei.com/vnpu-mode": "hami-core"})
    pod["spec"]["containers"][0]["resources"]["limits"]["huawei.com/Ascend310P-core"] = "30"
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "npu-main"}]
    pod["spec"]["resourceClaims"] = [{"name": "npu-main", "resourceClaimName": "someone"}]
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is True, reply
    after = _patched(pod, reply)
    other, ours = after["spec"]["resourceClaims"]
    assert other == {"name": "npu-main", "resourceClaimName": "someone"}  # the user's own
    assert ours["resourceClaimTemplateName"].startswith("vnpu-ascend310p-soft-1x4096m-30c-")
    assert ours["name"] == "npu-1"  # npu-main was taken
    assert after["spec"]["containers"][0]["resources"]["claims"] == [
        {"name": "npu-main"},
        {"name": "npu-1"},
    ]
    assert _limits(after) == {}
    made = _template(kube, ours["resourceClaimTemplateName"])
    assert made["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {
        "requests": {"memory": "4Gi", "corePercent": "30"}
    }


def test_a_template_another_replica_made_is_taken_as_it_reads_back(kube: Any) -> None:
    """kube-apiserver keeps 4096Mi as 4Gi: a replica that did not make the template (or made
    it before a restart) reads it back and still finds vnpu's spec in it."""
    model = catalog.BUILTIN.by_common_word("Ascend310P")
    assert model is not None
    claim = draclaims.soft_slices(model, 1, 4096, 30)
    api = cluster.KubeCluster(kube.client)
    assert claimtemplates.Templates(api).ensure(kube.namespace, [claim]) == ""
    assert claimtemplates.Templates(api).ensure(kube.namespace, [claim]) == ""
    other = draclaims.soft_slices(model, 1, 4096, 40)
    forged = copy.deepcopy(other.body)
    forged["metadata"]["name"] = (name := draclaims.soft_slices(model, 1, 8192, 30).name)
    kubernetes.client.ResourceV1Api(kube.client).create_namespaced_resource_claim_template(
        kube.namespace, forged
    )
    refused = claimtemplates.Templates(api).ensure(
        kube.namespace, [draclaims.soft_slices(model, 1, 8192, 30)]
    )
    assert refused.startswith(f"ResourceClaimTemplate {kube.namespace}/{name} exists with a spec")


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
    converted = dramode.convert(pod["spec"], request)
    assert converted.denial == ""
    assert converted.claims == ()
    assert {op["op"] for op in converted.patch} == {"add", "remove"}


def test_a_pod_written_for_classic_mode_goes_to_the_default_scheduler(dra: Any, make: Any) -> None:
    pod = make.pod("classic", "Ascend310P", 1, 4096)
    pod["spec"]["schedulerName"] = "vnpu-scheduler"
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is True
    after = _patched(pod, reply)
    assert "schedulerName" not in after["spec"]
    assert _limits(after) == {"npu.vnpu.io/ascend310p-6144m": "1"}
    assert reply["warnings"][-1] == (
        "spec.schedulerName 'vnpu-scheduler' removed: in DRA mode the cluster's kube-scheduler "
        "allocates NPUs (default-scheduler)"
    )


def test_a_pod_sent_to_another_scheduler_is_left_as_written(dra: Any, make: Any) -> None:
    pod = make.pod("elsewhere", "Ascend310P", 1, 4096)
    pod["spec"]["schedulerName"] = "volcano"
    reply = dra.post("mutate", _review(pod)).json()["response"]
    assert reply["allowed"] is True
    assert "patch" not in reply
    (warning,) = reply["warnings"]
    assert warning.startswith("spec.schedulerName is 'volcano'")
