"""The admission webhook over TLS, called by kube-apiserver's admission chain on pod CREATE."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import trustme

Json = dict[str, Any]


def _configuration(kind: str, name: str, url: str, ca_pem: bytes) -> Json:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": f"{name}.vnpu.io",
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                    }
                ],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
            }
        ],
    }


@dataclass
class Webhooked:
    """The scheduler serving both webhook configurations, once kube-apiserver calls them."""

    scheduler: Any
    before: dict[tuple[str, str], float] = field(default_factory=dict)

    def count(self, verb: str, outcome: str) -> float:
        """Requests of ``verb`` the scheduler answered with ``outcome``."""
        found = self.scheduler.sample("vnpu_scheduler_requests_total", verb=verb, outcome=outcome)
        return float(found)

    def calls(self, verb: str, outcome: str) -> float:
        """Those since both configurations took effect."""
        return self.count(verb, outcome) - self.before.get((verb, outcome), 0.0)


def _in_effect(kube: Any, make: Any, hooked: Webhooked) -> tuple[bool, bool]:
    """Whether a pod CREATE goes through the mutating and the validating webhook. kube-
    apiserver reads webhook configurations through informers, so one made (or deleted) a
    moment ago may not be called (or still be); a dry run asks without storing anything."""
    validated = hooked.count("validate", "ok")
    probe = make.pod("probe", memory=4000)
    stored = kube.core.create_namespaced_pod(kube.namespace, probe, dry_run="All")
    mutated = stored.spec.scheduler_name == "vnpu-scheduler"
    return mutated, hooked.count("validate", "ok") > validated


def _until_in_effect(kube: Any, make: Any, hooked: Webhooked, wanted: bool) -> None:
    """Wait until both webhooks are called (``wanted``) or neither is."""
    what = "came into effect" if wanted else "went out of effect"
    deadline = time.monotonic() + 10
    while _in_effect(kube, make, hooked) != (wanted, wanted):
        assert time.monotonic() < deadline, f"the webhook configurations never {what}"
        time.sleep(0.02)


@pytest.fixture
def webhooked(kube: Any, make: Any, start_scheduler: Any, tmp_path: Path) -> Iterator[Webhooked]:
    """A scheduler whose webhooks kube-apiserver calls on pod CREATE. When the test ends
    they are taken out of effect before the scheduler stops, so no later test's pod meets a
    configuration pointing at a scheduler that is gone."""
    authority = trustme.CA()
    certificate = authority.issue_cert("127.0.0.1")
    cert_file, key_file = tmp_path / "tls.crt", tmp_path / "tls.key"
    certificate.private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    certificate.private_key_pem.write_to_path(str(key_file))
    scheduler = start_scheduler(tls_cert=cert_file, tls_key=key_file)
    secure = scheduler.urls[1]
    assert secure.startswith("https://127.0.0.1:")
    ca = authority.cert_pem.bytes()
    admission = kubernetes.client.AdmissionregistrationV1Api(kube.client)
    admission.create_mutating_webhook_configuration(
        _configuration("MutatingWebhookConfiguration", "vnpu-mutate", f"{secure}/mutate", ca)
    )
    admission.create_validating_webhook_configuration(
        _configuration("ValidatingWebhookConfiguration", "vnpu-validate", f"{secure}/validate", ca)
    )
    hooked = Webhooked(scheduler)
    _until_in_effect(kube, make, hooked, True)
    hooked.before = {
        (verb, outcome): hooked.count(verb, outcome)
        for verb in ("mutate", "validate")
        for outcome in ("ok", "denied")
    }
    yield hooked
    admission.delete_mutating_webhook_configuration("vnpu-mutate")
    admission.delete_validating_webhook_configuration("vnpu-validate")
    _until_in_effect(kube, make, hooked, False)


def _limits(pod: Json) -> Json:
    result: Json = pod["spec"]["containers"][0]["resources"]["limits"]
    return result


def test_rounds_memory_and_routes_to_the_scheduler(kube: Any, make: Any, webhooked: Any) -> None:
    pod = make.pod("vnpu", memory=4000)
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"] = dict(resources["limits"])
    stored = kube.add_pod(pod)
    assert stored["spec"]["schedulerName"] == "vnpu-scheduler"
    assert _limits(stored)["huawei.com/Ascend310P-memory"] == "6144"
    requests = stored["spec"]["containers"][0]["resources"]["requests"]
    assert requests["huawei.com/Ascend310P-memory"] == "6144"
    whole = kube.add_pod(make.pod("whole", count=2))
    assert _limits(whole)["huawei.com/Ascend310P-memory"] == "21527"
    assert whole["spec"]["schedulerName"] == "vnpu-scheduler"
    assert webhooked.calls("mutate", "ok") == 2
    assert webhooked.calls("validate", "ok") == 2


def test_rounded_pod_is_left_alone_the_second_time(kube: Any, make: Any, webhooked: Any) -> None:
    pod = make.pod("exact", memory=6144)
    pod["spec"]["schedulerName"] = "vnpu-scheduler"
    stored = kube.add_pod(pod)
    assert _limits(stored)["huawei.com/Ascend310P-memory"] == "6144"


def test_leaves_other_pods_untouched(kube: Any, make: Any, webhooked: Any) -> None:
    plain = kube.add_pod(make.pod("web", count=None))
    assert plain["spec"]["schedulerName"] == "default-scheduler"
    other = make.pod("volcano-job", memory=4000)
    other["spec"]["schedulerName"] = "volcano"
    stored = kube.add_pod(other)
    assert stored["spec"]["schedulerName"] == "volcano"
    # Not rounded (that would be 6144); the API stores 4000 in its canonical form, 4k.
    assert _limits(stored)["huawei.com/Ascend310P-memory"] == "4k"
    ignored = make.pod("ignored", memory="4Gi", annotations={"hami.io/webhook": "ignore"})
    assert _limits(kube.add_pod(ignored))["huawei.com/Ascend310P-memory"] == "4Gi"


@pytest.mark.parametrize("memory", ["3000", "3k", "3e3", "3000000m", 3000])
def test_memory_in_any_decimal_form_rounds_like_the_plain_number(
    kube: Any, make: Any, webhooked: Any, memory: object
) -> None:
    # The API hands the webhook 3000 as 3k; either way it is 3000 MiB, rounded to vir01.
    stored = kube.add_pod(make.pod("forms", memory=memory))
    assert _limits(stored)["huawei.com/Ascend310P-memory"] == "3072"
    assert stored["spec"]["schedulerName"] == "vnpu-scheduler"


def test_soft_memory_kept_raw_reads_back_in_canonical_form(
    kube: Any, make: Any, webhooked: Any
) -> None:
    soft = make.pod("soft", memory=4000, annotations={"huawei.com/vnpu-mode": "hami-core"})
    stored = kube.add_pod(soft)
    assert _limits(stored)["huawei.com/Ascend310P-memory"] == "4k"
    assert stored["spec"]["schedulerName"] == "vnpu-scheduler"


@pytest.mark.parametrize(
    ("memory", "seen"),
    [("4096Mi", "4Gi"), ("4Gi", "4Gi"), ("1500m", "1500m"), ("2.5", "2500m")],
)
def test_binary_units_and_fractions_are_denied_as_the_api_stored_them(
    kube: Any, make: Any, webhooked: Any, memory: str, seen: str
) -> None:
    with pytest.raises(kubernetes.client.exceptions.ApiException) as denied:
        kube.add_pod(make.pod("units", memory=memory))
    assert denied.value.status == 400
    message = json.loads(denied.value.body)["message"]
    assert message == (
        "admission webhook \"vnpu-mutate.vnpu.io\" denied the request: container 'main': "
        f"huawei.com/Ascend310P-memory={seen}: write MiB as a plain integer, e.g. 4096"
    )
    assert kube.core.list_namespaced_pod(kube.namespace).items == []


@pytest.mark.parametrize(
    ("pod_changes", "message"),
    [
        (
            {"memory": "4Gi"},
            "container 'main': huawei.com/Ascend310P-memory=4Gi: write MiB as a plain integer, e.g. 4096",
        ),
        (
            {"memory": 30000},
            "container 'main': huawei.com/Ascend310P-memory=30000: is larger than one Ascend310P chip (24576 MiB)",
        ),
        (
            {"memory": 4000, "count": 2},
            "container 'main': huawei.com/Ascend310P-memory=4000: vNPU templates are single-chip",
        ),
        ({"node": "n1"}, "spec.nodeName is preset to 'n1': a pod that requests NPUs"),
        ({"privileged": True}, "container 'main': securityContext.privileged=true with NPUs"),
    ],
)
def test_denies_with_the_container_resource_and_value(
    kube: Any, make: Any, webhooked: Any, pod_changes: Json, message: str
) -> None:
    pod = make.pod("bad", count=pod_changes.get("count", 1), memory=pod_changes.get("memory", 4000))
    if "node" in pod_changes:
        pod["spec"]["nodeName"] = pod_changes["node"]
    if pod_changes.get("privileged"):
        pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(kubernetes.client.exceptions.ApiException) as denied:
        kube.add_pod(pod)
    assert denied.value.status == 400
    status = json.loads(denied.value.body)
    assert status["reason"] == "BadRequest"
    prefix = 'admission webhook "vnpu-mutate.vnpu.io" denied the request: '
    assert status["message"].startswith(prefix + message)
    assert kube.core.list_namespaced_pod(kube.namespace).items == []
    assert webhooked.calls("mutate", "denied") == 1


PIN = "vnpu.io/template"
PIN_FIELD = "metadata.annotations[vnpu.io/template]"
VALID_310P = (
    "valid templates for Ascend310P (MiB/AI cores/AI CPUs): vir01 3072/1/1, vir02 6144/2/2, "
    "vir02_1c 6144/2/1, vir04 12288/4/4, vir04_3c 12288/4/3"
)


def test_a_pinned_template_is_admitted_with_its_memory(
    kube: Any, make: Any, webhooked: Any
) -> None:
    pod = make.pod("pinned", memory=4000, annotations={PIN: "vir04_3c"})
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"] = dict(resources["limits"])
    stored = kube.add_pod(pod)
    # 4000 MiB alone would be vir02 (6144); the pin rounds it to vir04_3c's 12288.
    assert _limits(stored)["huawei.com/Ascend310P-memory"] == "12288"
    requests = stored["spec"]["containers"][0]["resources"]["requests"]
    assert requests["huawei.com/Ascend310P-memory"] == "12288"
    assert stored["metadata"]["annotations"][PIN] == "vir04_3c"  # kubectl describe shows it
    assert stored["spec"]["schedulerName"] == "vnpu-scheduler"
    assert webhooked.calls("validate", "ok") == 1


@pytest.mark.parametrize(
    ("annotations", "count", "memory", "message"),
    [
        ({PIN: "vir09"}, 1, 4000, f"{PIN_FIELD}=vir09: unknown template; {VALID_310P}"),
        (
            {PIN: "vir10_3c_32g"},
            1,
            4000,
            f"{PIN_FIELD}=vir10_3c_32g: a template of Ascend910B3, Ascend910B4-1, Ascend910C, "
            f"not of Ascend310P, which the pod asks for; {VALID_310P}",
        ),
        (
            {PIN: "vir02"},
            1,
            9000,
            f"{PIN_FIELD}=vir02: container 'main': vir02 has 6144 MiB, less than "
            "huawei.com/Ascend310P-memory=9000 asks; valid templates for Ascend310P with at least "
            "9000 MiB (MiB/AI cores/AI CPUs): vir04 12288/4/4, vir04_3c 12288/4/3",
        ),
        (
            {PIN: "vir04"},
            2,
            None,
            f"{PIN_FIELD}=vir04: container 'main': huawei.com/Ascend310P=2 asks for whole chips; "
            "vir04 is one vNPU on one chip: ask for huawei.com/Ascend310P: 1",
        ),
        (
            {PIN: "vir04"},
            1,
            None,
            f"{PIN_FIELD}=vir04: container 'main': asks for a whole chip (no "
            "huawei.com/Ascend310P-memory); vir04 is one vNPU: set huawei.com/Ascend310P-memory "
            "to at most 12288",
        ),
        (
            {PIN: "vir04", "huawei.com/vnpu-mode": "hami-core"},
            1,
            4000,
            f"{PIN_FIELD}=vir04: a pinned template is a hard vNPU and the pod asks for soft "
            "slices (huawei.com/vnpu-mode: hami-core): drop one of the two",
        ),
    ],
)
def test_a_pin_that_cannot_serve_the_pod_is_denied_naming_field_value_and_templates(
    kube: Any,
    make: Any,
    webhooked: Any,
    annotations: dict[str, str],
    count: int,
    memory: int | None,
    message: str,
) -> None:
    with pytest.raises(kubernetes.client.exceptions.ApiException) as denied:
        kube.add_pod(make.pod("pinned", count=count, memory=memory, annotations=annotations))
    assert denied.value.status == 400
    prefix = 'admission webhook "vnpu-mutate.vnpu.io" denied the request: '
    assert json.loads(denied.value.body)["message"] == prefix + message
    assert kube.core.list_namespaced_pod(kube.namespace).items == []
    assert webhooked.calls("mutate", "denied") == 1


def test_patch_for_init_and_regular_containers(scheduler: Any) -> None:
    """/mutate over plain HTTP: each container's memory is rounded where its count is named."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "two", "namespace": "default"},
        "spec": {
            "initContainers": [
                {
                    "name": "prep",
                    "resources": {
                        "limits": {
                            "huawei.com/Ascend310P": "1",
                            "huawei.com/Ascend310P-memory": "2000",
                        },
                        "requests": {
                            "huawei.com/Ascend310P": "1",
                            "huawei.com/Ascend310P-memory": "2000",
                        },
                    },
                }
            ],
            "containers": [
                {"name": "plain", "resources": {}},
                {"name": "main", "resources": {"limits": {"huawei.com/Ascend310P": "2"}}},
            ],
        },
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u2", "operation": "CREATE", "namespace": "default", "object": pod},
    }
    reply = scheduler.post("mutate", review).json()["response"]
    assert reply["allowed"] is True
    assert reply["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(reply["patch"]))
    assert patch == [
        {"op": "add", "path": "/spec/schedulerName", "value": "vnpu-scheduler"},
        {
            "op": "add",
            "path": "/spec/initContainers/0/resources/limits/huawei.com~1Ascend310P-memory",
            "value": "3072",
        },
        {
            "op": "add",
            "path": "/spec/initContainers/0/resources/requests/huawei.com~1Ascend310P-memory",
            "value": "3072",
        },
        {
            "op": "add",
            "path": "/spec/containers/1/resources/limits/huawei.com~1Ascend310P-memory",
            "value": "21527",
        },
    ]
    validated = scheduler.post("validate", review).json()["response"]
    assert validated == {"uid": "u2", "allowed": True}
