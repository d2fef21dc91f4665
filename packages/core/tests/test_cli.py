"""`vnpu plan` end to end: in-process through ``cli.main`` and as the installed console script."""

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vnpu_core import cli

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SCRIPT = Path(sys.executable).with_name("vnpu")

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 2, server: 300i-duo, replicas: 2}
  - {name: mesh, chip: Ascend910B3, chips: 8}
"""
WORKLOAD = """\
# comments and empty documents are fine
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: chat, namespace: ml}
spec:
  replicas: 3
  template:
    spec:
      containers:
        - name: llm
          resources:
            limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 5000}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 2
  template:
    spec:
      initContainers:
        - {name: fetch, image: busybox}
      containers:
        - name: worker
          resources:
            limits: {huawei.com/Ascend910B3: 4}
---
kind: ConfigMap
metadata: {name: settings}
---
kind: Pod
metadata: {name: too-big}
spec:
  containers:
    - name: main
      resources:
        limits: {huawei.com/Ascend910B3: 9}
---
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(list(argv), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    return write(tmp_path, "cluster.yaml", CLUSTER), write(tmp_path, "workload.yaml", WORKLOAD)


def test_json_output_schema(files: tuple[str, str]) -> None:
    cluster, workload = files
    status, out, err = run("plan", "--cluster", cluster, "--workload", workload, "--json")
    assert (status, err) == (0, "")
    result = json.loads(out)
    assert set(result) == {"policy", "placed", "rejected", "summary", "nodes", "notes"}
    assert result["policy"] == "best-fit"
    placed = {p["pod"]: p for p in result["placed"]}
    assert list(placed) == ["chat-0", "chat-1", "chat-2", "train-0", "train-1"]
    chat = placed["chat-0"]
    assert (chat["namespace"], chat["node"]) == ("ml", "duo-0")
    assert chat["containers"] == [
        {
            "name": "llm",
            "init": False,
            "devices": [
                {
                    "chip": 0,
                    "uuid": "duo-0-Ascend310P-0",
                    "template": "vir02",
                    "memory_mib": 6144,
                    "cores": 0,
                    "kind": "vnpu",
                }
            ],
        }
    ]
    fetch, worker = placed["train-1"]["containers"]
    assert (fetch["name"], fetch["init"], fetch["devices"]) == ("fetch", True, [])
    assert [d["chip"] for d in worker["devices"]] == [4, 5, 6, 7]
    assert {d["template"] for d in worker["devices"]} == {None}
    assert {d["kind"] for d in worker["devices"]} == {"whole"}
    (rejected,) = result["rejected"]
    assert rejected["pod"] == "too-big"
    assert rejected["reason"] == "too-many-chips"
    assert rejected["message"].startswith("0/3 nodes are available: 2 Ascend910B3: node has no")
    assert result["summary"] == {
        "pods": 6,
        "placed": 5,
        "rejected": 1,
        "chips_used": 9,
        "chips_total": 12,
        "whole_chip_chips": 11,
        "whole_chip_pods": 5,
        "whole_chip_nodes": 3,
        "whole_chip_extra_nodes": 0,
    }
    assert [n["name"] for n in result["nodes"]] == ["duo-0", "duo-1", "mesh"]
    assert result["nodes"][2]["whole_chips"] == 8
    assert result["notes"] == [
        "nodes[1] mesh: no server given; assumed 910b-8 for 8 910B3 chips",
        "documents[2] (line 29): ConfigMap settings skipped (the planner reads Pod, Deployment, ReplicaSet, StatefulSet, Job and List)",
    ]


def test_memory_written_as_a_kubernetes_quantity_plans_like_the_plain_number(
    tmp_path: Path,
) -> None:
    # 3e3 and 3k are strings to YAML, 3.0e+3 is a float: all three are 3000 MiB (vir01).
    workload = "".join(
        f"---\nkind: Pod\nmetadata: {{name: p{i}}}\nspec:\n  containers:\n    - name: main\n"
        f"      resources:\n        limits: {{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: {form}}}\n"
        for i, form in enumerate(["3000", "3k", "3e3", "3.0e+3"])
    )
    c = write(tmp_path, "cluster.yaml", CLUSTER)
    w = write(tmp_path, "workload.yaml", workload)
    status, out, err = run("plan", "--cluster", c, "--workload", w, "--json")
    assert (status, err) == (0, "")
    placed = json.loads(out)["placed"]
    templates = [p["containers"][0]["devices"][0]["template"] for p in placed]
    assert templates == ["vir01"] * 4


def test_table_output(files: tuple[str, str]) -> None:
    cluster, workload = files
    status, out, _ = run("plan", "--cluster", cluster, "--workload", workload)
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "vnpu plan: 3 nodes, 6 pods, policy best-fit"
    assert "PLACED (5)" in lines
    assert "REJECTED (1)" in lines
    # Columns line up under their headers.
    header = lines[lines.index("PLACED (5)") + 1]
    row = next(line for line in lines if line.startswith("train-1"))
    assert row[header.index("NODE") :].startswith("mesh")
    assert row[header.index("CHIPS") :].startswith("4-7")
    assert row[header.index("DEVICES") :] == "4 whole chips"
    assert "  chips used       9 of 12 (3 idle)" in lines
    assert (
        "  without sharing  11 whole chips for 5 pods on 3 nodes; 1 fit no node even when it is empty"
        in lines
    )
    assert any(line.startswith("  - nodes[1] mesh: no server given") for line in lines)


PINNED = """\
kind: Deployment
metadata: {name: chat}
spec:
  replicas: 3
  template:
    metadata:
      annotations: {vnpu.io/template: vir04}
    spec:
      containers:
        - name: llm
          resources:
            limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 12288}
---
kind: Pod
metadata: {name: free}
spec:
  containers:
    - name: main
      resources:
        limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 12288}
"""


def test_the_pinned_template_is_shown_and_honoured(tmp_path: Path) -> None:
    cluster = write(tmp_path, "cluster.yaml", "nodes: [{name: duo, chip: 310P3, chips: 2}]")
    workload = write(tmp_path, "workload.yaml", PINNED)
    status, out, _ = run("plan", "--cluster", cluster, "--workload", workload)
    assert status == 0
    lines = out.splitlines()
    start = lines.index("PLACED (3)") + 1
    header, placed_rows = lines[start], lines[start + 1 : start + 4]
    rows = {line.split()[0]: line[header.index("DEVICES") :] for line in placed_rows}
    # The unpinned pod takes vir04_3c beside a replica; no replica does.
    assert rows == {"chat-0": "vir04 (pinned)", "chat-1": "vir04 (pinned)", "free": "vir04_3c"}
    rejected = next(line for line in lines if line.startswith("chat-2"))
    assert rejected.endswith("vir04 is pinned by vnpu.io/template, vir04_3c would fit chip 0.")
    _, out, _ = run("plan", "--cluster", cluster, "--workload", workload, "--json")
    placed = {p["pod"]: p for p in json.loads(out)["placed"]}
    assert {name: p["pinned_template"] for name, p in placed.items()} == {
        "chat-0": "vir04",
        "chat-1": "vir04",
        "free": None,
    }


def test_policy_flag_changes_placement(files: tuple[str, str]) -> None:
    cluster, workload = files
    nodes = {}
    for policy in ("best-fit", "spread"):
        _, out, _ = run(
            "plan", "--cluster", cluster, "--workload", workload, "--json", "--policy", policy
        )
        result = json.loads(out)
        assert result["policy"] == policy
        nodes[policy] = [p["node"] for p in result["placed"] if p["pod"].startswith("chat")]
    assert nodes == {"best-fit": ["duo-0", "duo-0", "duo-0"], "spread": ["duo-0", "duo-1", "duo-0"]}


@pytest.mark.parametrize(
    ("cluster", "workload", "expected"),
    [
        (
            "nodes: [{name: a, chip: 310P9, chips: 2}]",
            WORKLOAD,
            "cluster.yaml: nodes[0].chip: unknown chip model; use one of 310P3, 910A, 910B1, 910B2, 910B3, 910B4, 910B4-1, 910C, 910C-24 (got '310P9')",
        ),
        (
            "nodes: [{name: a, chip: 310P3, chips: -2}]",
            WORKLOAD,
            "cluster.yaml: nodes[0].chips: must be an integer from 1 to 64 (got -2)",
        ),
        (
            "nodes: [{name: a, chip: 910B3, chips: 8, server: torus}]",
            WORKLOAD,
            "cluster.yaml: nodes[0].server: unknown server kind; use one of 910a-8, 910a-4, 910b-8, 910b-16, a3-pairs, 300i-duo, pcie (got 'torus')",
        ),
        (
            "nodes:\n  - name: a\n    chip: [310P3\n",
            WORKLOAD,
            "cluster.yaml: line 4, column 1: YAML syntax error: while parsing a flow sequence, expected ',' or ']', but got '<stream end>' (got '')",
        ),
        (
            "nodes:\n  - {name: a, chip: 310P3, chips: 2}\nnodes: []\n",
            WORKLOAD,
            "cluster.yaml: line 3, column 1: YAML syntax error: key 'nodes' is given twice (got 'nodes: []')",
        ),
        (
            "nodes: [{name: a, chip: 310P3, chips: 2}]\n---\nnodes: []\n",
            WORKLOAD,
            "cluster.yaml: line 2, column 1: YAML syntax error: expected a single document in the stream, but found another document (got '---')",
        ),
        (
            CLUSTER,
            "kind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n    - name: main\n      resources:\n        limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 4Gi}\n",
            "workload.yaml: documents[0] (line 1).spec.containers[0].resources.limits[\"huawei.com/Ascend310P-memory\"]: pod p container main: write MiB as a plain integer, e.g. 4096 (got '4Gi')",
        ),
        (
            CLUSTER,
            "---\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: many, template: {}}\n",
            "workload.yaml: documents[0] (line 2).spec.replicas: must be an integer from 0 to 1000 (got 'many')",
        ),
        (
            CLUSTER,
            "kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: main, resources: {limits: {huawei.com/Ascend310P: two}}}]}\n",
            "workload.yaml: documents[0] (line 1).spec.containers[0].resources.limits[\"huawei.com/Ascend310P\"]: pod p container main: must be a plain integer (got 'two')",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tmp_path: Path, cluster: str, workload: str, expected: str
) -> None:
    c = write(tmp_path, "cluster.yaml", cluster)
    w = write(tmp_path, "workload.yaml", workload)
    status, out, err = run("plan", "--cluster", c, "--workload", w)
    assert (status, out) == (2, "")
    assert err == f"vnpu plan: {tmp_path}/{expected}\n"


def test_missing_file_and_non_utf8(tmp_path: Path) -> None:
    w = write(tmp_path, "workload.yaml", WORKLOAD)
    missing = str(tmp_path / "nope.yaml")
    status, _, err = run("plan", "--cluster", missing, "--workload", w)
    assert status == 2
    assert (
        err
        == f"vnpu plan: {missing}: (file): cannot be read: No such file or directory (got '{missing}')\n"
    )
    binary = tmp_path / "cluster.yaml"
    binary.write_bytes(b"nodes: \xff\n")
    status, _, err = run("plan", "--cluster", str(binary), "--workload", w)
    assert status == 2
    assert err == f"vnpu plan: {binary}: byte 7: is not UTF-8 (got b'\\xff')\n"


def test_long_values_are_shortened_to_keep_one_line(tmp_path: Path) -> None:
    c = write(tmp_path, "cluster.yaml", "- " + "\n- ".join(f"item{i}" for i in range(50)))
    w = write(tmp_path, "workload.yaml", WORKLOAD)
    status, _, err = run("plan", "--cluster", c, "--workload", w)
    assert status == 2
    assert err.count("\n") == 1
    assert err.endswith("...)\n")
    assert "nodes: the file must be a mapping with a nodes: list" in err


def test_usage_errors() -> None:
    status, _, err = run()
    assert status == 2
    assert "plan" in err
    with pytest.raises(SystemExit) as caught:
        run("plan", "--workload", "w.yaml")
    assert caught.value.code == 2
    with pytest.raises(SystemExit) as caught:
        run("plan", "--cluster", "c", "--workload", "w", "--policy", "fastest")
    assert caught.value.code == 2


def test_device_config_sets_default_mode_and_adds_notes(tmp_path: Path) -> None:
    c = write(tmp_path, "cluster.yaml", "nodes: [{name: b4, chip: 910B4, chips: 8}]")
    w = write(
        tmp_path,
        "workload.yaml",
        """\
        kind: Pod
        metadata: {name: p, annotations: {huawei.com/vnpu-mode: hami-core}}
        spec:
          containers:
            - name: main
              resources:
                limits: {huawei.com/Ascend910B4: 1, huawei.com/Ascend910B4-memory: 4096}
        """,
    )
    config = write(tmp_path, "device-config.yaml", "vnpus:\n  hamiVnpuCore: true\n  configs: []\n")
    status, out, err = run(
        "plan", "--cluster", c, "--workload", w, "--device-config", config, "--json"
    )
    assert (status, err) == (0, "")
    result = json.loads(out)
    assert result["nodes"][0]["mode"] == "soft"
    assert [p["pod"] for p in result["placed"]] == ["p"]
    assert any(n.startswith(f"device config: {config}: vnpus.configs") for n in result["notes"])
    # Without the config the node is hard and the soft pod has nowhere to go.
    _, out, _ = run("plan", "--cluster", c, "--workload", w, "--json")
    assert json.loads(out)["rejected"][0]["reason"] == "mode-mismatch"


def test_bad_device_config_exits_2(tmp_path: Path) -> None:
    c = write(tmp_path, "cluster.yaml", CLUSTER)
    w = write(tmp_path, "workload.yaml", WORKLOAD)
    config = write(tmp_path, "device-config.yaml", "vnpus: 5\n")
    status, _, err = run("plan", "--cluster", c, "--workload", w, "--device-config", config)
    assert status == 2
    assert err.startswith(f"vnpu plan: {config}: vnpus: ")
    assert err.endswith("(got 5)\n")


# --- the installed console script -----------------------------------------------------------


def script(*argv: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"the vnpu console script is not installed next to {sys.executable}"
    return subprocess.run(
        [str(SCRIPT), *argv], capture_output=True, text=True, timeout=25, check=False
    )


def test_script_plans_the_examples() -> None:
    done = script(
        "plan",
        "--cluster",
        str(EXAMPLES / "cluster.yaml"),
        "--workload",
        str(EXAMPLES / "workload.yaml"),
        "--json",
    )
    assert (done.returncode, done.stderr) == (0, "")
    result = json.loads(done.stdout)
    rejected = {r["pod"]: r for r in result["rejected"]}
    assert set(rejected) == {"allreduce-bench-3card", "llama-70b-16card"}
    assert "3 chips is not an allowed count" in rejected["allreduce-bench-3card"]["message"]
    assert "asked 16 chips, node has 8 usable of 8" in rejected["llama-70b-16card"]["message"]
    summary = result["summary"]
    assert summary["placed"] == summary["pods"] - 2 > 40
    assert summary["whole_chip_chips"] > summary["chips_used"]
    kinds = {d["kind"] for p in result["placed"] for c in p["containers"] for d in c["devices"]}
    assert kinds == {"vnpu", "whole", "soft"}


def test_script_reports_bad_input_on_one_line(tmp_path: Path) -> None:
    c = write(tmp_path, "cluster.yaml", "nodes: [{name: a, chip: 310P3, chips: 0}]")
    done = script("plan", "--cluster", c, "--workload", str(EXAMPLES / "workload.yaml"))
    assert done.returncode == 2
    assert done.stdout == ""
    assert (
        done.stderr == f"vnpu plan: {c}: nodes[0].chips: must be an integer from 1 to 64 (got 0)\n"
    )


def test_script_version() -> None:
    done = script("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("vnpu ")
