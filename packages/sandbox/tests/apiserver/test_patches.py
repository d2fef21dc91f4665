"""JSON patch, merge patch and strategic merge patch (pure functions, table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from vnpu_sandbox.apiserver import patches

Json = dict[str, Any]

POD: Json = {
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["f1"]},
    "spec": {
        "containers": [
            {"name": "main", "image": "m:1", "env": [{"name": "A", "value": "1"}]},
            {"name": "side", "image": "s:1"},
        ],
        "tolerations": [{"key": "t1"}],
    },
    "status": {
        "conditions": [
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "True"},
        ]
    },
}


@pytest.mark.parametrize(
    ("patch", "check"),
    [
        (
            {"metadata": {"labels": {"b": "2"}}},
            lambda r: r["metadata"]["labels"] == {"a": "1", "b": "2"},
        ),
        ({"metadata": {"labels": {"a": None}}}, lambda r: r["metadata"]["labels"] == {}),
        (
            {"spec": {"containers": [{"name": "side", "image": "s:2"}]}},
            lambda r: (
                [(c["name"], c["image"]) for c in r["spec"]["containers"]]
                == [("main", "m:1"), ("side", "s:2")]
            ),
        ),
        (
            {"spec": {"containers": [{"name": "new", "image": "n:1"}]}},
            lambda r: [c["name"] for c in r["spec"]["containers"]] == ["main", "side", "new"],
        ),
        (
            {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}},
            lambda r: [c["name"] for c in r["spec"]["containers"]] == ["main"],
        ),
        (
            {"spec": {"containers": [{"name": "main", "env": [{"name": "B", "value": "2"}]}]}},
            lambda r: [e["name"] for e in r["spec"]["containers"][0]["env"]] == ["A", "B"],
        ),
        (
            {"spec": {"containers": [{"name": "only", "image": "o"}, {"$patch": "replace"}]}},
            lambda r: [c["name"] for c in r["spec"]["containers"]] == ["only"],
        ),
        (
            {"spec": {"tolerations": [{"key": "t2"}]}},
            lambda r: r["spec"]["tolerations"] == [{"key": "t2"}],
        ),
        (
            {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            lambda r: (
                {c["type"]: c["status"] for c in r["status"]["conditions"]}
                == {"Ready": "True", "PodScheduled": "True"}
            ),
        ),
        (
            {"metadata": {"finalizers": ["f2"]}},
            lambda r: r["metadata"]["finalizers"] == ["f1", "f2"],
        ),
        (
            {"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}},
            lambda r: r["metadata"]["finalizers"] == [],
        ),
        (
            {"metadata": {"$patch": "replace", "name": "p"}},
            lambda r: r["metadata"] == {"name": "p"},
        ),
        ({"spec": {"$patch": "delete"}}, lambda r: "spec" not in r),
        (
            {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "main"}]}},
            lambda r: [c["name"] for c in r["spec"]["containers"]] == ["side", "main"],
        ),
        (
            {"status": {"$retainKeys": ["phase"], "phase": "Running"}},
            lambda r: r["status"] == {"phase": "Running"},
        ),
    ],
)
def test_strategic_merge_follows_the_declared_strategies(patch: Json, check: Any) -> None:
    result = patches.strategic_merge_patch(POD, patch)
    assert check(result), result
    assert POD["metadata"]["labels"] == {"a": "1"}, "the original is never modified"


def test_strategic_merge_needs_the_merge_key() -> None:
    with pytest.raises(patches.PatchError) as caught:
        patches.strategic_merge_patch(POD, {"spec": {"containers": [{"image": "x"}]}})
    assert caught.value.bad_request
    assert "does not contain declared merge key: name" in str(caught.value)


def test_merge_patch_replaces_lists_and_deletes_nulls() -> None:
    result = patches.merge_patch(
        POD, {"spec": {"containers": [{"name": "x", "image": "y"}]}, "status": None}
    )
    assert result["spec"]["containers"] == [{"name": "x", "image": "y"}]
    assert "status" not in result
    assert result["spec"]["tolerations"] == [{"key": "t1"}]


@pytest.mark.parametrize(
    ("operations", "check"),
    [
        (
            [{"op": "add", "path": "/metadata/labels/b", "value": "2"}],
            lambda r: r["metadata"]["labels"]["b"] == "2",
        ),
        (
            [{"op": "add", "path": "/metadata/finalizers/-", "value": "f2"}],
            lambda r: r["metadata"]["finalizers"] == ["f1", "f2"],
        ),
        (
            [{"op": "add", "path": "/metadata/finalizers/0", "value": "f0"}],
            lambda r: r["metadata"]["finalizers"] == ["f0", "f1"],
        ),
        (
            [{"op": "remove", "path": "/metadata/finalizers/0"}],
            lambda r: r["metadata"]["finalizers"] == [],
        ),
        (
            [{"op": "replace", "path": "/spec/containers/1/image", "value": "s:9"}],
            lambda r: r["spec"]["containers"][1]["image"] == "s:9",
        ),
        (
            [{"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "1"}}],
            lambda r: r["metadata"]["annotations"] == {"a~b/c": "1"},
        ),
        (
            [
                {"op": "remove", "path": "/metadata/labels/a"},
                {"op": "test", "path": "/metadata/labels", "value": {}},
            ],
            lambda r: r["metadata"]["labels"] == {},
        ),
        (
            [{"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/name"}],
            lambda r: r["metadata"]["labels"]["name"] == "p",
        ),
        (
            [{"op": "move", "from": "/metadata/labels/a", "path": "/metadata/labels/z"}],
            lambda r: r["metadata"]["labels"] == {"z": "1"},
        ),
    ],
)
def test_json_patch_operations(operations: list[Json], check: Any) -> None:
    result = patches.json_patch(POD, operations)
    assert check(result), result


def test_json_patch_escapes_in_pointers() -> None:
    doc = {"metadata": {"annotations": {"a/b": "1", "c~d": "2"}}}
    result = patches.json_patch(
        doc,
        [
            {"op": "remove", "path": "/metadata/annotations/a~1b"},
            {"op": "replace", "path": "/metadata/annotations/c~0d", "value": "3"},
        ],
    )
    assert result == {"metadata": {"annotations": {"c~d": "3"}}}


@pytest.mark.parametrize(
    ("operations", "bad_request", "message"),
    [
        (
            {"op": "add"},
            True,
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        ),
        ([{"op": "jump", "path": "/a"}], True, "Unexpected kind: jump"),
        ([{"op": "add", "path": "/a"}], True, "operation 0 (add) is missing its value"),
        (
            [{"op": "replace", "path": "/metadata/nothing", "value": 1}],
            False,
            "replace operation does not apply: doc is missing key: /metadata/nothing",
        ),
        (
            [{"op": "remove", "path": "/spec/containers/7"}],
            False,
            "remove operation does not apply: doc is missing path: /spec/containers/7",
        ),
        (
            [{"op": "test", "path": "/metadata/name", "value": "q"}],
            False,
            "testing value /metadata/name failed: test failed",
        ),
        (
            [{"op": "add", "path": "/no/such/place", "value": 1}],
            False,
            "add operation does not apply: doc is missing path: /no/such/place",
        ),
    ],
)
def test_json_patch_errors(operations: Any, bad_request: bool, message: str) -> None:
    with pytest.raises(patches.PatchError) as caught:
        patches.json_patch(POD, operations)
    assert caught.value.bad_request is bad_request
    assert str(caught.value).startswith(message)
