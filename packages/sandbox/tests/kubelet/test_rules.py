"""Pure rules of the simulated kubelet: resource names, quantities, admission order, gRPC error text."""

from __future__ import annotations

import grpc
import pytest

from vnpu_sandbox.kubelet import admission, errors, resourcename


@pytest.mark.parametrize(
    "name",
    ["huawei.com/Ascend910", "huawei.com/Ascend310P-memory", "example.com/a.b_c-d", "a.b/x"],
)
def test_extended_resource_names_accepted(name: str) -> None:
    assert resourcename.extended_resource_problem(name) is None


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("Ascend910", "no vendor domain"),
        ("cpu", "no vendor domain"),
        ("kubernetes.io/npu", "reserved"),
        ("requests.huawei.com/npu", "must not start with"),
        ("Huawei.com/npu", "lowercase DNS subdomain"),
        ("huawei.com/npu/x", "more than one"),
        ("huawei.com/-npu", "the type must be"),
        ("huawei.com/" + "n" * 64, "the type must be"),
        ("huawei.com/", "the type must be"),
    ],
)
def test_bad_resource_names_say_why(name: str, problem: str) -> None:
    found = resourcename.extended_resource_problem(name)
    assert found is not None
    assert problem in found


@pytest.mark.parametrize(
    ("value", "count"),
    [("2", 2), (3, 3), ("1k", 1000), ("1Ki", 1024), ("1500m", 2), ("0", 0), ("1e1", 10)],
)
def test_device_count_rounds_up_like_the_kubelet(value: object, count: int) -> None:
    assert resourcename.device_count(value) == count


@pytest.mark.parametrize("value", ["two", "", "1x", "-1"])
def test_device_count_refuses_non_quantities(value: str) -> None:
    with pytest.raises(ValueError, match=repr(value.strip()) if value else "is not a quantity"):
        resourcename.device_count(value)


def test_admission_order_is_creation_time_then_name() -> None:
    def pod(name: str, created: str, namespace: str = "default") -> dict[str, object]:
        return {"metadata": {"name": name, "namespace": namespace, "creationTimestamp": created}}

    pods = [
        pod("zeta", "2026-01-01T00:00:01Z"),
        pod("beta", "2026-01-01T00:00:02Z"),
        pod("alpha", "2026-01-01T00:00:02Z"),
        pod("alpha", "2026-01-01T00:00:02Z", "a-namespace"),
        pod("omega", "2026-01-01T00:00:00Z"),
    ]
    ordered = sorted(pods, key=admission.admission_order)
    names = [(p["metadata"]["name"], p["metadata"]["namespace"]) for p in ordered]  # type: ignore[index]
    assert names == [
        ("omega", "default"),
        ("zeta", "default"),
        ("alpha", "a-namespace"),
        ("alpha", "default"),
        ("beta", "default"),
    ]


def test_pod_request_reads_limits_init_first_and_names_bad_limits() -> None:
    pod = {
        "metadata": {"uid": "u1"},
        "spec": {
            "initContainers": [
                {"name": "prep", "resources": {"limits": {"x.io/d": "1"}}},
                {"name": "side", "restartPolicy": "Always", "resources": {}},
            ],
            "containers": [
                {"name": "main", "resources": {"limits": {"x.io/d": "2", "cpu": "500m"}}}
            ],
        },
    }
    request = admission.pod_request(pod)
    assert [(c.name, c.init, c.restartable) for c in request.containers] == [
        ("prep", True, False),
        ("side", True, True),
        ("main", False, False),
    ]
    assert request.containers[2].limits == {"x.io/d": 2, "cpu": 1}

    pod["spec"]["containers"][0]["resources"]["limits"]["x.io/d"] = "lots"  # type: ignore[index]
    with pytest.raises(errors.AdmissionError) as info:
        admission.pod_request(pod)
    assert (
        str(info.value) == "spec.containers[0].resources.limits[x.io/d]: 'lots' is not a quantity"
    )


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (grpc.StatusCode.UNKNOWN, "Unknown"),
        (grpc.StatusCode.INVALID_ARGUMENT, "InvalidArgument"),
        (grpc.StatusCode.CANCELLED, "Canceled"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "DeadlineExceeded"),
        (grpc.StatusCode.UNAVAILABLE, "Unavailable"),
    ],
)
def test_grpc_codes_render_like_grpc_go(code: grpc.StatusCode, name: str) -> None:
    assert errors.go_code_name(code) == name


def test_plugin_call_error_text_and_rejection_message() -> None:
    error = errors.PluginCallError("x.io/d", "Allocate", grpc.StatusCode.INTERNAL, "chip 3 is gone")
    assert error.rpc_text == "rpc error: code = Internal desc = chip 3 is gone"
    rejected = admission.rejection(error)
    assert rejected.reason == "UnexpectedAdmissionError"
    assert rejected.message == (
        "Allocate failed due to rpc error: code = Internal desc = chip 3 is gone, which is unexpected"
    )


def test_api_error_says_what_can_be_retried() -> None:
    assert errors.ApiError("patch", "pod a/b", 0, "refused").temporary
    assert errors.ApiError("patch", "pod a/b", 503, "busy").temporary
    assert not errors.ApiError("patch", "pod a/b", 422, "invalid").temporary
    assert errors.ApiError("get", "node n", 404, "not found").not_found
