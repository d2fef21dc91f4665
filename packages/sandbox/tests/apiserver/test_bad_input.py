"""Bad requests get the real server's status code and Status, and the emulator keeps serving."""

from __future__ import annotations

import json
from typing import Any

import pytest

Json = dict[str, Any]

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "ok"},
    "spec": {"containers": [{"name": "c", "image": "i"}]},
}
PODS = "/api/v1/namespaces/default/pods"

CASES = [
    pytest.param(
        "POST",
        PODS,
        b'{"apiVersion": "v1", "kind": "Pod", "metadata": {',
        "application/json",
        400,
        "BadRequest",
        "the object provided is unrecognized (must be of type Pod): couldn't get version/kind; json parse error: ",
        id="malformed-json",
    ),
    pytest.param(
        "POST",
        PODS,
        b"[1, 2]",
        "application/json",
        400,
        "BadRequest",
        "the object provided is unrecognized (must be of type Pod): couldn't get version/kind; json parse error: json: cannot unmarshal array",
        id="json-array",
    ),
    pytest.param(
        "POST",
        PODS,
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}},
        "application/json",
        400,
        "BadRequest",
        'Node in version "v1" cannot be handled as a Pod: converting (v1.Node) to (v1.Pod): unknown conversion',
        id="wrong-kind",
    ),
    pytest.param(
        "POST",
        PODS,
        {"apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "n"}},
        "application/json",
        400,
        "BadRequest",
        'Pod in version "v1" cannot be handled as a Pod: no kind "Pod" is registered for version "apps/v1"',
        id="wrong-api-version",
    ),
    pytest.param(
        "POST",
        PODS,
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typed"}, "spec": "x"},
        "application/json",
        400,
        "BadRequest",
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field Pod.spec of type',
        id="wrongly-typed-spec",
    ),
    pytest.param(
        "POST",
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "typed"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": [1]}}]},
        },
        "application/json",
        400,
        "BadRequest",
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal array into Go struct field Pod.spec.containers.resources.limits of type',
        id="wrongly-typed-limits",
    ),
    pytest.param(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "typed"},
            "spec": {"unschedulable": "yes"},
        },
        "application/json",
        400,
        "BadRequest",
        'Node in version "v1" cannot be handled as a Node: json: cannot unmarshal string into Go struct field Node.spec.unschedulable of type bool',
        id="wrongly-typed-bool",
    ),
    pytest.param(
        "POST",
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "Bad_Name"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
        "application/json",
        422,
        "Invalid",
        'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of',
        id="invalid-name",
    ),
    pytest.param(
        "POST",
        PODS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "no-image"},
            "spec": {"containers": [{"name": "c"}]},
        },
        "application/json",
        422,
        "Invalid",
        'Pod "no-image" is invalid: spec.containers[0].image: Required value',
        id="missing-image",
    ),
    pytest.param(
        "POST",
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "null-item"},
            "status": {"addresses": [None]},
        },
        "application/json",
        400,
        "BadRequest",
        'Node in version "v1" cannot be handled as a Node: json: cannot unmarshal null into Go struct field Node.status.addresses of type',
        id="null-list-item",
    ),
    pytest.param(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {}},
        "application/json",
        422,
        "Invalid",
        'Namespace "" is invalid: metadata.name: Required value: name or generateName is required',
        id="namespace-without-name",
    ),
    pytest.param(
        "POST",
        "/api/v1/namespaces/nowhere/pods",
        POD,
        "application/json",
        404,
        "NotFound",
        'namespaces "nowhere" not found',
        id="missing-namespace",
    ),
    pytest.param(
        "POST",
        PODS,
        POD,
        "text/plain",
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml",
        id="unknown-body-type",
    ),
    pytest.param(
        "GET",
        PODS + "?labelSelector=a%20b",
        None,
        "application/json",
        400,
        "BadRequest",
        "found 'b', expected: in, notin, =, ==, !=, gt, lt",
        id="bad-label-selector",
    ),
    pytest.param(
        "GET",
        PODS + "?labelSelector=app%3D%25bad",
        None,
        "application/json",
        400,
        "BadRequest",
        'unable to parse requirement: values[0][app]: Invalid value: "%bad": a valid label must be an empty string',
        id="bad-label-value",
    ),
    pytest.param(
        "GET",
        PODS + "?fieldSelector=spec.foo%3Dbar",
        None,
        "application/json",
        400,
        "BadRequest",
        "field label not supported: spec.foo",
        id="unsupported-field",
    ),
    pytest.param(
        "GET",
        PODS + "?fieldSelector=nonsense",
        None,
        "application/json",
        400,
        "BadRequest",
        "invalid selector: 'nonsense'; can't understand 'nonsense'",
        id="unparsable-field-selector",
    ),
    pytest.param(
        "GET",
        "/api/v1/configmaps?fieldSelector=spec.nodeName%3Dx",
        None,
        "application/json",
        400,
        "BadRequest",
        "field label not supported: spec.nodeName",
        id="field-of-another-kind",
    ),
    pytest.param(
        "GET",
        PODS + "?resourceVersion=abc",
        None,
        "application/json",
        400,
        "BadRequest",
        'resourceVersion: Invalid value: "abc"',
        id="bad-resource-version",
    ),
    pytest.param(
        "GET",
        PODS + "?resourceVersion=999999999",
        None,
        "application/json",
        504,
        "Timeout",
        "Too large resource version: 999999999, current: ",
        id="future-resource-version",
    ),
    pytest.param(
        "GET",
        PODS + "?continue=not-a-token",
        None,
        "application/json",
        400,
        "BadRequest",
        "continue key is not valid",
        id="bad-continue",
    ),
    pytest.param(
        "GET",
        "/api/v1/namespaces/default/pods/missing",
        None,
        "application/json",
        404,
        "NotFound",
        'pods "missing" not found',
        id="missing-object",
    ),
    pytest.param(
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/missing",
        None,
        "application/json",
        404,
        "NotFound",
        'leases.coordination.k8s.io "missing" not found',
        id="missing-object-in-group",
    ),
    pytest.param(
        "PUT",
        PODS,
        POD,
        "application/json",
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        id="method-not-allowed",
    ),
    pytest.param(
        "POST",
        PODS + "?dryRun=Some",
        POD,
        "application/json",
        400,
        "BadRequest",
        'dryRun: Unsupported value: "Some": supported values: "All"',
        id="bad-dry-run",
    ),
    pytest.param(
        "POST",
        PODS,
        b"{" + b" " * (3 * 1024 * 1024) + b"}",
        "application/json",
        413,
        "RequestEntityTooLarge",
        "limit is 3145728",
        id="too-large",
    ),
]


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type", "code", "reason", "message"), CASES
)
def test_bad_request_gets_the_real_status_and_the_server_keeps_serving(
    raw: Any,
    method: str,
    path: str,
    body: Any,
    content_type: str,
    code: int,
    reason: str,
    message: str,
) -> None:
    status, headers, answer = raw.request(method, path, body, content_type=content_type)
    assert status == code, answer
    assert headers["content-type"].startswith("application/json")
    parsed = json.loads(answer)
    assert parsed["kind"] == "Status"
    assert parsed["apiVersion"] == "v1"
    assert parsed["status"] == "Failure"
    assert parsed["code"] == code
    assert parsed["reason"] == reason
    assert parsed["message"].startswith(message), parsed["message"]
    ok, listed = raw.json("GET", PODS)
    assert ok == 200
    assert listed["kind"] == "PodList"


def test_unknown_paths_get_the_plain_404_of_the_real_server(raw: Any) -> None:
    for path in (
        "/api/v1/widgets",
        "/apis/example.com/v1/things",
        "/api/v1/pods/by-name",
        "/openapi/v2",
        "/nothing",
    ):
        status, headers, body = raw.request("GET", path)
        assert (status, body) == (404, b"404 page not found"), path
        assert headers["content-type"].startswith("text/plain")
    assert raw.json("GET", "/api/v1/namespaces")[0] == 200


def test_invalid_objects_name_every_bad_field_in_causes(raw: Any) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "two-errors", "labels": {"ok": "no spaces allowed"}},
        "spec": {"containers": [{"image": "i"}]},
    }
    status, parsed = raw.json("POST", PODS, body)
    assert status == 422
    assert parsed["message"].startswith(
        'Pod "two-errors" is invalid: [metadata.labels: Invalid value: "no spaces allowed"'
    )
    assert parsed["details"]["name"] == "two-errors"
    assert parsed["details"]["kind"] == "Pod"
    fields = [(c["field"], c["reason"]) for c in parsed["details"]["causes"]]
    assert fields == [
        ("metadata.labels", "FieldValueInvalid"),
        ("spec.containers[0].name", "FieldValueRequired"),
    ]


def test_bad_patches_get_400_or_422(raw: Any, unique: Any) -> None:
    name = unique("patch-target")
    status, _ = raw.json("POST", PODS, dict(POD, metadata={"name": name}))
    assert status == 201
    path = f"{PODS}/{name}"
    status, parsed = raw.json(
        "PATCH", path, b"{not json", content_type="application/merge-patch+json"
    )
    assert (status, parsed["reason"]) == (400, "BadRequest")
    assert parsed["message"].startswith("error decoding patch: ")
    status, parsed = raw.json(
        "PATCH", path, {"op": "add"}, content_type="application/json-patch+json"
    )
    assert (status, parsed["message"]) == (
        400,
        "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
    )
    test_fails = [{"op": "test", "path": "/metadata/labels/x", "value": "y"}]
    status, parsed = raw.json("PATCH", path, test_fails, content_type="application/json-patch+json")
    assert (status, parsed["reason"]) == (422, "Invalid")
    assert parsed["message"] == "the server rejected our request due to an error in our request"
    assert "/metadata/labels/x" in parsed["details"]["causes"][0]["message"]
    status, parsed = raw.json(
        "PATCH", path, {"metadata": {}}, content_type="application/apply-patch+yaml"
    )
    assert (status, parsed["reason"]) == (415, "UnsupportedMediaType")
    assert parsed["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json"
    )
    status, parsed = raw.json(
        "PATCH", path, {"spec": {"nodeName": "sneaky"}}, content_type="application/merge-patch+json"
    )
    assert (status, parsed["reason"]) == (422, "Invalid")
    assert parsed["message"].startswith(
        f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change fields other than'
    )
    assert "spec.nodeName" in parsed["message"]
    status, parsed = raw.json(
        "PATCH", path, {"spec": {"containers": "none"}}, content_type="application/merge-patch+json"
    )
    assert (status, parsed["reason"]) == (400, "BadRequest")
    assert "cannot unmarshal string into Go struct field Pod.spec.containers" in parsed["message"]
    status, got = raw.json("GET", path)
    assert status == 200
    assert "nodeName" not in got["spec"]


def test_only_json_and_tables_are_served(raw: Any) -> None:
    status, _, body = raw.request(
        "GET", PODS, headers={"Accept": "application/vnd.kubernetes.protobuf"}
    )
    parsed = json.loads(body)
    assert (status, parsed["reason"]) == (406, "NotAcceptable")
    status, _, body = raw.request(
        "GET", PODS, headers={"Accept": "application/vnd.kubernetes.protobuf, application/json"}
    )
    assert status == 200
    assert json.loads(body)["kind"] == "PodList"


def test_a_create_carrying_a_resource_version_is_refused(raw: Any) -> None:
    body = dict(POD, metadata={"name": "with-rv", "resourceVersion": "5"})
    status, parsed = raw.json("POST", PODS, body)
    assert (status, parsed["reason"], parsed["message"]) == (
        400,
        "BadRequest",
        "resourceVersion should not be set on objects to be created",
    )


def test_names_and_namespaces_in_bodies_must_match_the_url(raw: Any, unique: Any) -> None:
    name = unique("match")
    assert raw.json("POST", PODS, dict(POD, metadata={"name": name}))[0] == 201
    status, parsed = raw.json("PUT", f"{PODS}/{name}", dict(POD, metadata={"name": "other"}))
    assert (status, parsed["message"]) == (
        400,
        f"the name of the object (other) does not match the name on the URL ({name})",
    )
    status, parsed = raw.json(
        "POST", PODS, dict(POD, metadata={"name": unique("x"), "namespace": "kube-system"})
    )
    assert (status, parsed["message"]) == (
        400,
        "the namespace of the provided object does not match the namespace sent on the request",
    )


def test_builtin_namespaces_cannot_be_deleted(raw: Any) -> None:
    status, parsed = raw.json("DELETE", "/api/v1/namespaces/default")
    assert (status, parsed["reason"]) == (403, "Forbidden")
    assert (
        parsed["message"] == 'namespaces "default" is forbidden: this namespace may not be deleted'
    )
