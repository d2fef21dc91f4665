"""``vnpu-sandbox demo``'s flags and manifests per mode, and DRA mode's reading of claims."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_sandbox import cli
from vnpu_sandbox.platform import claims, clusterfile, demo, layout, processes

ROOT = Path(__file__).resolve().parents[4]
NODES = [
    clusterfile.NodeSpec("duo", "310P3", "Ascend310P", 2, "300i-duo", False),
    clusterfile.NodeSpec("train", "910A", "Ascend910A", 8, "910a-8", False),
]


def _args(*words: str) -> Any:
    return cli.parser("demo").parse_args(["demo", *words])


@pytest.mark.parametrize(
    ("words", "mode", "manifests"),
    [
        ((), "classic", Path("examples/demo")),
        (("--mode", "dra"), "dra", Path("examples/demo-dra")),
        (("--mode", "classic"), "classic", Path("examples/demo")),
        (("--mode", "dra", "--manifests", "mine"), "dra", Path("mine")),
        (("--manifests", "mine"), "classic", Path("mine")),
    ],
)
def test_the_mode_chooses_the_manifests_unless_they_are_given(
    words: tuple[str, ...], mode: str, manifests: Path
) -> None:
    args = _args(*words)
    assert args.mode == mode
    assert demo.manifests(args) == manifests


def test_an_unknown_mode_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _args("--mode", "soft")
    assert exited.value.code == 2
    assert "invalid choice: 'soft'" in capsys.readouterr().err


def _documents(directory: Path) -> list[dict[str, Any]]:
    found = []
    for path in sorted(directory.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return found


def _limits(document: dict[str, Any]) -> dict[str, Any]:
    spec = document["spec"]
    pod = spec["template"]["spec"] if document["kind"] == "Deployment" else spec
    merged: dict[str, Any] = {}
    for container in pod["containers"]:
        merged.update(container["resources"]["limits"])
    return merged


def test_the_dra_scenario_asks_for_no_soft_slice_and_has_what_the_scale_step_scales() -> None:
    documents = _documents(ROOT / demo.MANIFESTS["dra"])
    workloads = [d for d in documents if d["kind"] in ("Deployment", "Pod")]
    assert len(workloads) >= 8
    for workload in workloads:
        limits = _limits(workload)
        assert not [k for k in limits if k.endswith("-core")], workload["metadata"]["name"]
        template = workload["spec"].get("template", {}).get("metadata", {})
        assert "huawei.com/vnpu-mode" not in template.get("annotations", {})
    names = {
        f"{d['metadata'].get('namespace', 'default')}/{d['metadata']['name']}" for d in workloads
    }
    for scale in demo.SCALES:
        assert scale.partition("=")[0] in names
    pinned = [d for d in workloads if "vnpu.io/template" in str(d)]
    assert pinned, "the DRA scenario pins a template"
    assert any(_limits(d).get("huawei.com/Ascend910A", 0) > 1 for d in workloads)


def _record(directory: Path, *names: str) -> None:
    record = layout.Record(
        api_url="https://127.0.0.1:1",
        kubeconfig=str(directory / "kubeconfig"),
        cluster_file="cluster.yaml",
        nodes=NODES,
        processes=[processes.Process(n, 1, 1, ("x",), "log") for n in names],
        ready=True,
    )
    layout.write(layout.Layout.at(directory), record)


@pytest.mark.parametrize(
    ("agents", "asked", "running"),
    [
        (("device-plugin-duo", "exporter-duo"), "dra", "classic"),
        (("dra-driver-duo", "exporter-duo"), "classic", "dra"),
    ],
)
def test_a_sandbox_of_the_other_mode_is_refused_naming_both(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    agents: tuple[str, ...],
    asked: str,
    running: str,
) -> None:
    _record(tmp_path, "kube-apiserver", *agents)
    assert demo.run(_args("--dir", str(tmp_path), "--mode", asked)) == 2
    err = capsys.readouterr().err
    assert f"runs {running} mode, not {asked}" in err
    assert f"vnpu-sandbox up --mode {asked}" in err


def _claim(
    uid: str, pods: list[str], *devices: tuple[str, str], driver: str = "npu.vnpu.io"
) -> dict[str, Any]:
    results = [{"driver": driver, "pool": pool, "device": d} for pool, d in devices]
    return {
        "metadata": {"uid": uid},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": p, "uid": p} for p in pods],
        },
    }


def _pod(uid: str, node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": f"pod-{uid}", "namespace": "ns", "uid": uid},
        "spec": {"nodeName": node},
        "status": {"phase": "Running" if node else "Pending"},
    }


CLAIMS = [
    _claim("c1", ["p1"], ("duo", "chip-1-vir02-1-0"), ("duo", "chip-1-vir01-0")),
    _claim("c2", ["p2"], ("train", "chip-4-whole"), ("train", "chip-5-whole")),
    _claim("c3", ["p3", "p4"], ("duo", "chip-0-vir04-3c-0")),  # one claim, two pods
    _claim("c4", ["p5"], ("duo", "chip-1-vir01-1")),
    _claim("gpu", ["p1"], ("duo", "chip-0-whole"), driver="gpu.example.com"),
    _claim("unallocated", []),
]


def test_each_pod_holds_the_devices_of_its_claims() -> None:
    held = claims.held(CLAIMS, NODES)
    assert sorted(held) == ["p1", "p2", "p3", "p4", "p5"]
    # vir02-1-0 is no template of the 310P: only vir01 is read.
    assert [(h.phy, h.kind, h.template) for h in held["p1"]] == [(1, "template", "vir01")]
    assert [(h.node, h.phy, h.kind) for h in held["p2"]] == [
        ("train", 4, "whole"),
        ("train", 5, "whole"),
    ]
    row = claims.placement(_pod("p2", "train"), held)
    assert (row.node, row.phase, row.holds) == (
        "train",
        "Running",
        ("chip 4: whole chip", "chip 5: whole chip"),
    )
    assert claims.placement(_pod("p3", "duo"), held).holds == ("chip 0: vir04_3c",)
    assert claims.placement(_pod("p9"), held).holds == ()


def test_a_shared_claim_counts_once_and_the_use_per_model_adds_up() -> None:
    devices = claims.distinct(claims.held(CLAIMS, NODES))
    assert len(devices) == 5  # vir01, 2 whole, vir04_3c, vir01: c3 held once for two pods
    assert claims.templates(devices) == {"vir01": 2, "vir04_3c": 1}
    use = claims.model_use(devices, NODES)
    duo, train = use["Ascend310P"], use["Ascend910A"]
    assert (duo.chips, duo.chips_used, duo.vnpus, duo.whole_chips) == (2, 2, 3, 0)
    assert duo.memory_allocated_mib == 3072 + 3072 + 12288
    assert duo.memory_mib == 2 * 24576
    assert (train.chips, train.chips_used, train.vnpus, train.whole_chips) == (8, 2, 0, 2)
    assert train.memory_allocated_mib == 2 * 32768


def test_a_soft_slice_holds_the_memory_and_cores_it_consumed() -> None:
    soft = [clusterfile.NodeSpec("b4", "910B4", "Ascend910B4", 1, "pcie", True)]
    claim = _claim("s", ["p"], ("b4", "chip-0-soft"))
    claim["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] = {
        "memory": "8Gi",
        "corePercent": "25",
    }
    held = claims.held([claim], soft)
    assert claims.placement(_pod("p", "b4"), held).holds == (
        "chip 0: soft slice 8192 MiB, 25% cores",
    )
    (use,) = claims.model_use(claims.distinct(held), soft).values()
    assert (use.soft_slices, use.memory_allocated_mib) == (1, 8192)


def _template(name: str, namespace: str, count: int) -> dict[str, Any]:
    choice = {"name": "any", "deviceClassName": "ascend910b3.npu.vnpu.io", "count": count}
    requests = [{"name": "npu", "firstAvailable": [choice]}]
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }


def test_a_refused_pod_says_what_it_asked_of_the_driver() -> None:
    vir16 = {"npu.vnpu.io/ascend910a-vir16": "1", "cpu": "2"}
    pod = {
        "metadata": {"name": "big", "namespace": "ns"},
        "spec": {
            "containers": [
                {"name": "a", "resources": {"limits": vir16}},
                {"name": "b", "resources": {"claims": [{"name": "npu-b"}]}},
            ],
            "resourceClaims": [
                {"name": "npu-b", "resourceClaimTemplateName": "sixteen"},
                {"name": "shared", "resourceClaimName": "team-claim"},
            ],
        },
    }
    templates = [_template("sixteen", "other", 8), _template("sixteen", "ns", 16)]
    assert claims.asks(pod, templates) == [
        "npu.vnpu.io/ascend910a-vir16: 1",
        "a claim from ResourceClaimTemplate sixteen: 16 x ascend910b3.npu.vnpu.io",
        "claim team-claim",
    ]
    assert claims.asks(pod, [])[1] == "a claim from ResourceClaimTemplate sixteen"


def test_a_claim_kept_to_a_ring_says_so_once_per_distinct_choice() -> None:
    ring = {"name": "ring", "deviceClassName": "ascend910a.npu.vnpu.io", "count": 4}
    anywhere = {**ring, "name": "any"}
    template = {
        "metadata": {"name": "four", "namespace": "ns"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [{"name": "npu", "firstAvailable": [ring, anywhere, anywhere]}],
                    "constraints": [
                        {"matchAttribute": "npu.vnpu.io/ring", "requests": ["npu/ring"]}
                    ],
                }
            }
        },
    }
    pod = {
        "metadata": {"name": "finetune", "namespace": "ns"},
        "spec": {
            "containers": [],
            "resourceClaims": [{"name": "n", "resourceClaimTemplateName": "four"}],
        },
    }
    assert claims.asks(pod, [template]) == [
        "a claim from ResourceClaimTemplate four: 4 x ascend910a.npu.vnpu.io in one ring"
        " or 4 x ascend910a.npu.vnpu.io"
    ]


def _made(name: str, replica_set: str | None, digest: str, tier: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "docs"}
    if replica_set is not None:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": replica_set}]
        meta["labels"] = {"pod-template-hash": digest}
    limits = {f"npu.vnpu.io/ascend310p-{tier}": "1"}
    return {"metadata": meta, "spec": {"containers": [{"resources": {"limits": limits}}]}}


def test_each_workload_is_named_once_with_what_its_pods_ask() -> None:
    pods = [
        _made("ocr-66b6-a", "ocr-66b6", "66b6", "3072m"),
        _made("ocr-66b6-b", "ocr-66b6", "66b6", "3072m"),
        _made("chat-7b-5fd9-c", "chat-7b-5fd9", "5fd9", "12288m"),
        _made("solo", None, "", "6144m"),
        {"metadata": {"name": "idle", "namespace": "docs"}, "spec": {"containers": [{}]}},
    ]
    assert claims.asked(pods, []) == {
        "docs/chat-7b": "npu.vnpu.io/ascend310p-12288m: 1",
        "docs/idle": "no NPU",
        "docs/ocr": "npu.vnpu.io/ascend310p-3072m: 1",
        "docs/solo": "npu.vnpu.io/ascend310p-6144m: 1",
    }


@pytest.mark.parametrize(
    ("generation", "observed", "wanted", "made", "complete"),
    [
        (2, 2, 16, 16, True),
        (2, 2, 16, 8, False),  # the ReplicaSet is still creating pods
        (3, 2, 16, 16, False),  # scaled again, not yet seen by its controller
        (2, 2, 2, 6, False),  # scaled down, pods not yet deleted
    ],
)
def test_a_deployment_is_complete_once_its_controller_made_what_its_latest_spec_asks(
    generation: int, observed: int, wanted: int, made: int, complete: bool
) -> None:
    deployment = {
        "metadata": {"name": "ocr", "generation": generation},
        "spec": {"replicas": wanted},
        "status": {"observedGeneration": observed, "replicas": made},
    }
    assert demo._complete(deployment) is complete
