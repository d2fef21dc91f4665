"""CDI device names resolved with spec files, as a container runtime would apply them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vnpu_sandbox.kubelet import cdi

SPEC: dict[str, Any] = {
    "cdiVersion": "0.6.0",
    "kind": "huawei.com/npu",
    "containerEdits": {"env": ["ASCEND_RUNTIME_OPTIONS=NODRV"]},
    "devices": [
        {
            "name": "0",
            "containerEdits": {
                "env": ["ASCEND_VISIBLE_DEVICES=0"],
                "deviceNodes": [{"path": "/dev/davinci0"}],
            },
        },
        {"name": "1", "containerEdits": {"env": ["ASCEND_VISIBLE_DEVICES=0,1"]}},
    ],
}


@pytest.mark.parametrize(
    ("names", "env", "nodes", "unresolved"),
    [
        ([], {}, (), ()),
        (
            ["huawei.com/npu=0"],
            {"ASCEND_RUNTIME_OPTIONS": "NODRV", "ASCEND_VISIBLE_DEVICES": "0"},
            ("/dev/davinci0",),
            (),
        ),
        (
            ["huawei.com/npu=0", "huawei.com/npu=1"],
            {"ASCEND_RUNTIME_OPTIONS": "NODRV", "ASCEND_VISIBLE_DEVICES": "0,1"},
            ("/dev/davinci0",),
            (),
        ),
        (["huawei.com/npu=9", "bad"], {}, (), ("huawei.com/npu=9", "bad")),
        (["other.com/x=0"], {}, (), ("other.com/x=0",)),
    ],
)
def test_resolve(
    names: list[str], env: dict[str, str], nodes: tuple[str, ...], unresolved: tuple[str, ...]
) -> None:
    resolved = cdi.resolve(names, [SPEC])
    assert resolved == cdi.Resolution(env, nodes, unresolved)


def test_specs_are_read_from_json_and_yaml(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(SPEC))
    (tmp_path / "b.yaml").write_text(
        "cdiVersion: 0.6.0\nkind: example.com/gpu\ndevices:\n"
        "- name: g0\n  containerEdits:\n    env: [GPU=0]\n"
    )
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "notes.txt").write_text("ignored")
    specs = cdi.read_specs(tmp_path)
    assert [s["kind"] for s in specs] == ["huawei.com/npu", "example.com/gpu"]
    assert cdi.resolve(["example.com/gpu=g0"], specs).env == {"GPU": "0"}
    assert cdi.read_specs(tmp_path / "missing") == []
    assert cdi.read_specs(None) == []
