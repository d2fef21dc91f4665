"""`vnpu plan` with quotas: the workload's ResourceQuotas and the teams of --tenants."""

import io
import json
import textwrap
from pathlib import Path

import pytest

from vnpu_core import catalog, cli, plan, planfiles

CLUSTER = """\
nodes:
  - {name: duo, chip: 310P3, chips: 4, server: 300i-duo}
  - {name: mesh, chip: 910B3, chips: 8}
"""
WORKLOAD = """\
apiVersion: v1
kind: ResourceQuota
metadata: {name: npu, namespace: vision}
spec:
  hard:
    limits.huawei.com/Ascend310P-memory: "18432"
    cpu: "8"
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: detect, namespace: vision}
spec:
  replicas: 4
  template:
    spec:
      containers:
        - name: main
          resources:
            limits: {huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 6000}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 3
  template:
    spec:
      containers:
        - name: worker
          resources:
            limits: {huawei.com/Ascend910B3: 2}
"""
TENANTS = """\
teams:
  - name: nlp
    namespaces: [nlp]
    nominal: {Ascend910B3-chips: 2}
  - name: batch
    namespaces: [batch]
    nominal: {Ascend910B3-chips: 2}
    borrowingLimit: {Ascend910B3-chips: 0}
"""


def run(
    tmp_path: Path, *extra: str, tenants: str = TENANTS, workload: str = WORKLOAD
) -> tuple[int, str, str]:
    (tmp_path / "c.yaml").write_text(CLUSTER)
    (tmp_path / "w.yaml").write_text(workload)
    (tmp_path / "t.yaml").write_text(tenants)
    out, err = io.StringIO(), io.StringIO()
    argv = ["plan", "--cluster", str(tmp_path / "c.yaml"), "--workload", str(tmp_path / "w.yaml")]
    status = cli.main([*argv, *extra], out, err)
    return status, out.getvalue(), err.getvalue()


def test_quota_refusals_and_borrowing_are_reported(tmp_path: Path) -> None:
    status, out, err = run(tmp_path, "--tenants", str(tmp_path / "t.yaml"), "--namespace", "nlp")
    assert (status, err) == (0, "")
    assert "OVER QUOTA (2)" in out
    assert (
        "vision/detect-3  quota vision/npu limits.huawei.com/Ascend310P-memory: "
        "used 18432 + asked 6144 > limit 18432 MiB"
    ) in out
    assert (
        "nlp/train-2      team nlp Ascend910B3-chips: above its nominal 2 it borrows idle "
        "capacity only: cohort used 4 + asked 2 > nominal 4 chips of all teams"
    ) in out
    # train-1 borrowed batch's idle nominal: 2 chips above nlp's own.
    assert "nlp    Ascend910B3-chips      6        2      -     4         2    no" in out
    assert "vision/npu  limits.huawei.com/Ascend310P-memory  24576  18432  18432    no" in out
    assert "7: 5 placed, 0 rejected, 2 over quota" in out


def test_the_json_carries_the_quota_report(tmp_path: Path) -> None:
    status, out, _ = run(
        tmp_path, "--tenants", str(tmp_path / "t.yaml"), "--namespace", "nlp", "--json"
    )
    assert status == 0
    made = json.loads(out)
    assert made["summary"]["over_quota"] == 2
    refused = {(r["namespace"], r["pod"]): r for r in made["quota"]["refused"]}
    (limit,) = refused["vision", "detect-3"]["refusals"]
    assert (limit["rule"], limit["used"], limit["asked"], limit["limit"]) == (
        "resource-quota",
        18432,
        6144,
        18432,
    )
    assert refused["nlp", "train-2"]["refusals"][0]["rule"] == "no-idle-capacity"
    teams = {(t["team"], t["unit"]): t for t in made["quota"]["teams"]}
    assert teams["nlp", "Ascend910B3-chips"] == {
        "team": "nlp", "unit": "Ascend910B3-chips", "asked": 6, "nominal": 2, "limit": None,
        "used": 4, "borrowed": 2, "fits": False,
    }  # fmt: skip
    assert teams["batch", "Ascend910B3-chips"]["limit"] == 2
    (memory,) = made["quota"]["resource_quotas"]
    assert (memory["quota"], memory["asked"], memory["used"]) == ("vision/npu", 24576, 18432)


def test_without_quotas_the_output_is_unchanged(tmp_path: Path) -> None:
    workload = WORKLOAD.split("---\n", 1)[1]
    status, out, _ = run(tmp_path, workload=workload)
    assert status == 0
    assert "QUOTA" not in out
    assert "pods             7: 7 placed, 0 rejected\n" in out
    _, as_json, _ = run(tmp_path, "--json", workload=workload)
    made = json.loads(as_json)
    assert "quota" not in made
    assert "over_quota" not in made["summary"]


def test_resource_quotas_alone_turn_the_check_on(tmp_path: Path) -> None:
    status, out, _ = run(tmp_path)
    assert status == 0
    assert "OVER QUOTA (1)" in out
    assert "TEAMS" not in out
    assert "default/train" not in out  # pods keep their namespace: train is in default
    assert "7: 6 placed, 0 rejected, 1 over quota" in out


def test_a_config_map_file_is_read(tmp_path: Path) -> None:
    config_map = (
        "kind: ConfigMap\nmetadata: {name: tenants, namespace: vnpu}\ndata:\n  tenants.yaml: |\n"
    )
    config_map += textwrap.indent(TENANTS, "    ")
    status, out, _ = run(
        tmp_path, "--tenants", str(tmp_path / "t.yaml"), "--namespace", "nlp", tenants=config_map
    )
    assert status == 0
    assert "OVER QUOTA (2)" in out


@pytest.mark.parametrize(
    ("tenants", "workload", "message"),
    [
        (
            "teams:\n  - {name: a, namespaces: [a], weight: 0}\n",
            WORKLOAD,
            "t.yaml: teams[0].weight: must be a positive number (got 0)",
        ),
        (
            "kind: ConfigMap\ndata:\n  tenants.yaml: 'teams: [{name: a, namespaces: [a], nominal: {aicore: -1}}]'\n",
            WORKLOAD,
            't.yaml: data["tenants.yaml"] teams[0].nominal.aicore: must not be negative (got -1)',
        ),
        (
            TENANTS,
            WORKLOAD.replace('"18432"', '"18Gi"'),
            'w.yaml: documents[0] (line 1).spec.hard["limits.huawei.com/Ascend310P-memory"]: binary suffixes',
        ),
    ],
)  # fmt: skip
def test_bad_quota_inputs_name_file_path_and_value(
    tmp_path: Path, tenants: str, workload: str, message: str
) -> None:
    status, out, err = run(
        tmp_path, "--tenants", str(tmp_path / "t.yaml"), tenants=tenants, workload=workload
    )
    assert (status, out) == (2, "")
    assert message in err, err


def test_quota_objects_take_the_default_namespace() -> None:
    documents = [
        {
            "kind": "ResourceQuota",
            "metadata": {"name": "q"},
            "spec": {"hard": {"limits.vnpu.io/chips": 1}},
        },
        {"kind": "ResourceQuota", "metadata": {"name": "r", "namespace": "x"}, "spec": {}},
    ]
    workload = planfiles.read_workload(
        documents, "w.yaml", catalog.BUILTIN, default_namespace="team-a"
    )
    assert [q.label for q in workload.quotas] == ["team-a/q", "x/r"]
    assert workload.notes == ()
    assert plan.Plan.__dataclass_fields__["quota"].default is None
