"""Fuzzing every verb over HTTP: whatever JSON arrives, the answer is a 200 or a 400 in the verb's shape.

Two kinds of bodies go to a running scheduler for each of ``/filter``, ``/prioritize``,
``/bind``, ``/mutate`` and ``/validate``:

* a body shaped like the real thing (the ``ExtenderArgs`` kube-scheduler sends, with a full
  v1.Pod and, for ``Nodes``, whole v1.Node objects; ``ExtenderBindingArgs``; an
  admission.k8s.io/v1 ``AdmissionReview`` as the API server sends it) with one to three of
  its values, anywhere in it, replaced by random JSON of another type;
* random JSON, and random bytes.

Never a 500; always the reply type the caller decodes (``ExtenderFilterResult``,
``HostPriorityList``, ``ExtenderBindingResult``, ``AdmissionReview``); a 400 names a JSON
path in its message. Nothing exists in the cluster by those names, so nothing is written.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vnpu_scheduler import wire

Json = dict[str, Any]
Path = tuple[str | int, ...]

POD: Json = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "fuzz",
        "namespace": "default",
        "uid": "3c1e0d0e-9c1b-4a8e-bb1e-2f6a1d0c9e11",
        "resourceVersion": "4711",
        "creationTimestamp": "2026-08-18T09:55:36Z",
        "labels": {"app": "infer"},
        "annotations": {
            "hami.io/gpu-scheduler-policy": "binpack",
            "hami.io/use-Ascend310P-uuid": "a,b",
        },
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}],
    },
    "spec": {
        "schedulerName": "vnpu-scheduler",
        "nodeSelector": {"zone": "a"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "zone", "operator": "In", "values": ["a", "b"]}
                            ],
                            "matchFields": [
                                {"key": "metadata.name", "operator": "NotIn", "values": ["x"]}
                            ],
                        }
                    ]
                }
            }
        },
        "tolerations": [
            {"key": "npu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 30}
        ],
        "initContainers": [
            {
                "name": "setup",
                "image": "busybox",
                "restartPolicy": "Always",
                "resources": {"limits": {"huawei.com/Ascend310P": "1"}},
            }
        ],
        "containers": [
            {
                "name": "main",
                "image": "ascend/app",
                "securityContext": {"privileged": False},
                "resources": {
                    "limits": {
                        "huawei.com/Ascend310P": "1",
                        "huawei.com/Ascend310P-memory": "4000",
                        "cpu": "2",
                    },
                    "requests": {"huawei.com/Ascend310P": 1, "memory": "1Gi"},
                },
            }
        ],
        "restartPolicy": "Always",
        "priority": 0,
    },
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
}

NODE: Json = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "n1",
        "resourceVersion": "42",
        "labels": {"zone": "a", "kubernetes.io/hostname": "n1"},
        "annotations": {
            "hami.io/node-register-Ascend310P": (
                '[{"id":"n1-0","count":7,"devmem":21527,"devcore":8,'
                '"type":"Ascend310P","health":true}]'
            ),
            "hami.io/node-handshake-Ascend310P": "Reported_2026.08.18 09:55:36",
            "hami.io/mutex.lock": "2026-08-18T09:55:36Z,default,other",
        },
    },
    "spec": {
        "taints": [{"key": "npu", "value": "only", "effect": "NoSchedule"}],
        "unschedulable": False,
    },
    "status": {
        "capacity": {"huawei.com/Ascend310P": "7", "cpu": "96"},
        "allocatable": {"huawei.com/Ascend310P": "7", "cpu": "96"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}

TEMPLATES: dict[str, list[Json]] = {
    "filter": [
        {"Pod": POD, "Nodes": None, "NodeNames": ["n1", "n2"]},
        {"Pod": POD, "Nodes": {"metadata": {}, "items": [NODE, NODE]}, "NodeNames": None},
    ],
    "bind": [
        {
            "PodName": "fuzz",
            "PodNamespace": "default",
            "PodUID": "3c1e0d0e-9c1b-4a8e-bb1e-2f6a1d0c9e11",
            "Node": "n1",
        }
    ],
    "mutate": [
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "admin", "groups": ["system:authenticated"]},
                "object": POD,
                "oldObject": None,
                "dryRun": False,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
    ],
}
TEMPLATES["prioritize"] = TEMPLATES["filter"]
TEMPLATES["validate"] = TEMPLATES["mutate"]
VERBS = ("filter", "prioritize", "bind", "mutate", "validate")
ROOTS = {
    "filter": ("Pod", "Nodes", "NodeNames", "(body)"),
    "bind": ("PodName", "PodNamespace", "PodUID", "Node", "(body)"),
    "mutate": ("request", "apiVersion", "kind", "(body)"),
}
ROOTS["prioritize"] = ROOTS["filter"]
ROOTS["validate"] = ROOTS["mutate"]

# Each test stops sending after this many seconds (the rest of its examples pass unsent), so
# a loaded machine cannot push it past the per-test timeout.
BUDGET_SECONDS = 12.0
FUZZ = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=8,
)


def _paths(value: object, prefix: Path = ()) -> list[Path]:
    found: list[Path] = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(_paths(child, (*prefix, index)))
    return found


def _child(target: object, step: str | int) -> tuple[bool, Any]:
    """(found, value) of member or index ``step`` of ``target``."""
    if isinstance(target, dict) and step in target:
        return True, target[step]
    if isinstance(target, list) and isinstance(step, int) and step < len(target):
        return True, target[step]
    return False, None


def _replace(document: Json, path: Path, value: object) -> None:
    target: Any = document
    for step in path[:-1]:
        found, target = _child(target, step)
        if not found:
            return  # an earlier replacement removed this path
    last = path[-1]
    if _child(target, last)[0] or (isinstance(target, dict) and isinstance(last, str)):
        target[last] = value


@st.composite
def _mutated(draw: st.DrawFn, verb: str) -> Json:
    document = copy.deepcopy(draw(st.sampled_from(TEMPLATES[verb])))
    paths = _paths(document)
    for path in draw(st.lists(st.sampled_from(paths), min_size=1, max_size=3)):
        _replace(document, path, draw(JSON_VALUES))
    return document


def _check(verb: str, answer: Any) -> None:
    assert answer.status_code in (200, 400), (answer.status_code, answer.text[:300])
    body = answer.json()
    message = ""
    if verb == "filter":
        assert set(body) == {
            "Nodes",
            "NodeNames",
            "FailedNodes",
            "FailedAndUnresolvableNodes",
            "Error",
        }
        assert isinstance(body["Error"], str)
        assert isinstance(body["FailedNodes"], dict)
        message = body["Error"]
    elif verb == "prioritize":
        assert isinstance(body, list)
        for entry in body:
            assert set(entry) == {"Host", "Score"}
            assert 0 <= entry["Score"] <= 10
        if answer.status_code == 400:
            assert body == []
    elif verb == "bind":
        assert set(body) == {"Error"}
        message = body["Error"]
    else:
        assert body["apiVersion"] == "admission.k8s.io/v1"
        assert body["kind"] == "AdmissionReview"
        response = body["response"]
        assert isinstance(response["uid"], str)
        assert isinstance(response["allowed"], bool)
        if not response["allowed"]:
            message = response["status"]["message"]
    if answer.status_code == 400:
        told = answer.headers["vnpu-error"]
        assert told.startswith(ROOTS[verb]), told
        if message:
            assert wire.header_text(message) == told


@pytest.mark.parametrize("verb", VERBS)
def test_valid_shapes_with_wrong_typed_values(scheduler: Any, verb: str) -> None:
    until = time.monotonic() + BUDGET_SECONDS

    @FUZZ
    @given(document=_mutated(verb))
    def run(document: Json) -> None:
        if time.monotonic() < until:
            _check(verb, scheduler.post(verb, document))

    run()


@pytest.mark.parametrize("verb", VERBS)
def test_random_json_and_bytes(scheduler: Any, verb: str) -> None:
    until = time.monotonic() + BUDGET_SECONDS

    @FUZZ
    @given(
        body=st.one_of(
            JSON_VALUES.map(lambda v: json.dumps(v).encode()),
            st.dictionaries(st.sampled_from(ROOTS[verb]), JSON_VALUES).map(
                lambda v: json.dumps(v).encode()
            ),
            st.binary(max_size=64),
        )
    )
    def run(body: bytes) -> None:
        if time.monotonic() < until:
            _check(verb, scheduler.post_raw(verb, body))

    run()
