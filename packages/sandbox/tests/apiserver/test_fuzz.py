"""Property test: no body or patch, however malformed, makes the emulator answer 5xx."""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

Json = dict[str, Any]

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "ok"},
    "spec": {"containers": [{"name": "c", "image": "i"}]},
}
PODS = "/api/v1/namespaces/default/pods"


_ANY_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)
_FIELDS = [
    ("metadata",),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "finalizers"),
    ("spec",),
    ("spec", "nodeName"),
    ("spec", "containers"),
    ("spec", "tolerations"),
    ("status",),
    ("status", "conditions"),
]


@example(field=("spec",), value=None, patch_type="application/merge-patch+json")
@example(field=("status",), value=None, patch_type="application/strategic-merge-patch+json")
@example(
    field=("spec", "containers"), value=[{"": None}], patch_type="application/merge-patch+json"
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    field=st.sampled_from(_FIELDS),
    value=_ANY_JSON,
    patch_type=st.sampled_from(
        ["application/merge-patch+json", "application/strategic-merge-patch+json"]
    ),
)
def test_no_body_or_patch_makes_the_server_fail(
    api: str, make_http: Any, field: tuple[str, ...], value: Any, patch_type: str
) -> None:
    http = make_http(api)
    body = json.loads(json.dumps(POD))
    body["metadata"] = {"name": f"fuzz-{uuid.uuid4().hex[:10]}"}
    node = body
    for key in field[:-1]:
        node = node.setdefault(key, {})
    node[field[-1]] = value
    status, _, answer = http.request("POST", PODS, body)
    assert status < 500, answer
    name = f"fuzz-{uuid.uuid4().hex[:10]}"
    assert http.request("POST", PODS, dict(POD, metadata={"name": name}))[0] == 201
    patch: Json = {}
    node = patch
    for key in field[:-1]:
        node = node.setdefault(key, {})
    node[field[-1]] = value
    status, _, answer = http.request("PATCH", f"{PODS}/{name}", patch, content_type=patch_type)
    assert status < 500, answer
    assert http.request("DELETE", f"{PODS}/{name}")[0] == 200
