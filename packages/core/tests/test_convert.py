"""`vnpu convert`: Volcano Jobs and PodGroups to Workload/PodGroup/batch Jobs, NPU names to
vnpu's, what is not carried over listed on stderr; in-process through ``cli.main`` and as
the installed console script."""

import io
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_core import catalog, cli, convert, resourcenames

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
JOB = EXAMPLES / "volcano" / "job.yaml"
PODS = EXAMPLES / "volcano" / "pods.yaml"
SCRIPT = Path(sys.executable).with_name("vnpu")
WORKLOAD_API = "scheduling.k8s.io/v1beta1"


def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cli.main(["convert", *argv], stdout=out, stderr=err, stdin=io.StringIO(stdin))
    return status, out.getvalue(), err.getvalue()


def converted(text: str, *flags: str) -> tuple[list[dict[str, Any]], list[str]]:
    """Convert manifests given on stdin; the output documents and the stderr lines."""
    status, out, err = run("-", *flags, stdin=textwrap.dedent(text))
    assert status == 0, err
    return list(yaml.safe_load_all(out)), err.splitlines()


def by_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def fields(lines: list[str], owner: str) -> set[str]:
    """The fields the stderr lines name for ``owner``."""
    prefix = f"{owner}: "
    return {line[len(prefix) :].split(": ", 1)[0] for line in lines if line.startswith(prefix)}


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


# --- Volcano Jobs -----------------------------------------------------------------------


def test_example_job_is_one_gang_of_four_indexed_workers() -> None:
    status, out, err = run(str(JOB), "--model", "910A")
    assert status == 0, err
    documents = list(yaml.safe_load_all(out))
    assert [(d["apiVersion"], d["kind"]) for d in documents] == [
        (WORKLOAD_API, "Workload"),
        (WORKLOAD_API, "PodGroup"),
        ("batch/v1", "Job"),
    ]
    workload, group, job = documents
    assert workload["metadata"] == {
        "name": "resnet",
        "namespace": "train",
        "labels": {"vnpu.io/volcano-job": "resnet"},
    }
    assert workload["spec"] == {
        "podGroupTemplates": [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 4}}}]
    }
    assert (group["metadata"]["name"], group["metadata"]["namespace"]) == ("resnet", "train")
    assert group["spec"] == {
        "workloadRef": {"workloadName": "resnet", "templateName": "gang"},
        "schedulingPolicy": {"gang": {"minCount": 4}},
    }
    assert job["metadata"]["name"] == "resnet-worker"
    assert job["metadata"]["namespace"] == "train"
    spec = job["spec"]
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (4, 4, "Indexed")
    pod = spec["template"]["spec"]
    assert pod["schedulingGroup"] == {"podGroupName": "resnet"}
    assert pod["schedulerName"] == "vnpu-scheduler"
    assert pod["restartPolicy"] == "OnFailure"
    (container,) = pod["containers"]
    assert container["resources"] == {
        "limits": {"huawei.com/Ascend910A": 1},
        "requests": {"huawei.com/Ascend910A": 1},
    }
    assert spec["template"]["metadata"]["labels"] == {
        "vnpu.io/volcano-job": "resnet",
        "vnpu.io/volcano-task": "worker",
    }


def test_example_job_lists_each_part_not_carried_over() -> None:
    _status, _out, err = run(str(JOB), "--model", "910A")
    lines = err.splitlines()
    assert fields(lines, "Job train/resnet") == {
        "spec.queue",
        "spec.maxRetry",
        "spec.plugins.ssh",
        "spec.plugins.svc",
        "spec.policies[0]",
    }
    assert len(lines) == 5
    assert (
        "Job train/resnet: spec.plugins.ssh: not converted (Volcano plugin); make a Secret" in err
    )
    assert (
        "spec.policies[0]: not converted (Volcano lifecycle policy: PodEvicted -> RestartJob)"
        in err
    )


MULTI_TASK = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: llm, labels: {team: nlp}, annotations: {owner: ana}}
spec:
  priorityClassName: high
  ttlSecondsAfterFinished: 600
  tasks:
    - name: master
      replicas: 1
      template:
        spec:
          containers: [{name: m, image: x, resources: {limits: {huawei.com/npu: 8}}}]
    - name: worker
      replicas: 3
      template:
        metadata: {labels: {role: worker}}
        spec:
          schedulerName: volcano
          priorityClassName: low
          containers: [{name: w, image: x, resources: {limits: {huawei.com/npu: 8}}}]
"""


def test_tasks_share_one_pod_group_and_minimum_defaults_to_all_replicas() -> None:
    documents, lines = converted(MULTI_TASK, "--model", "910B3")
    (group,) = by_kind(documents, "PodGroup")
    (workload,) = by_kind(documents, "Workload")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert group["spec"]["priorityClassName"] == "high"
    assert workload["spec"]["podGroupTemplates"][0]["priorityClassName"] == "high"
    master, worker = by_kind(documents, "Job")
    assert master["spec"] == {
        "parallelism": 1,
        "completions": 1,
        "ttlSecondsAfterFinished": 600,
        "template": master["spec"]["template"],
    }  # one pod: no completion mode
    assert worker["spec"]["completionMode"] == "Indexed"
    assert worker["metadata"] == {
        "name": "llm-worker",
        "labels": {"team": "nlp", "vnpu.io/volcano-job": "llm", "vnpu.io/volcano-task": "worker"},
        "annotations": {"owner": "ana"},
    }
    for job in (master, worker):
        pod = job["spec"]["template"]["spec"]
        assert pod["schedulingGroup"] == {"podGroupName": "llm"}
        assert pod["schedulerName"] == "vnpu-scheduler"
        assert pod["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910B3": 8}
    assert master["spec"]["template"]["spec"]["priorityClassName"] == "high"
    assert worker["spec"]["template"]["spec"]["priorityClassName"] == "low"  # its own wins
    assert worker["spec"]["template"]["metadata"]["labels"]["role"] == "worker"
    assert fields(lines, "Job llm") == {
        "spec.tasks[0].template.spec.restartPolicy",
        "spec.tasks[1].template.spec.restartPolicy",
    }
    assert "not set: set to Never" in lines[0]
    assert master["spec"]["template"]["spec"]["restartPolicy"] == "Never"


EVERYTHING = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: big
  namespace: ml
  annotations: {volcano.sh/sla-waiting-time: 1h, keep: "yes"}
spec:
  minAvailable: 2
  volumes: [{mountPath: /data, volumeClaimName: data}]
  runningEstimate: 2h
  queue: research
  maxRetry: 5
  minSuccess: 2
  networkTopology: {mode: hard}
  plugins: {env: [], pytorch: ["--master=master"]}
  policies:
    - {exitCode: 3, action: AbortJob}
    - {events: [PodFailed, PodEvicted], action: RestartJob}
  somethingNew: 1
  tasks:
    - name: a
      replicas: 2
      minAvailable: 1
      policies: [{event: TaskCompleted, action: CompleteJob}]
      topologyPolicy: best-effort
      maxRetry: 2
      dependsOn: {name: [b]}
      template:
        metadata:
          annotations:
            scheduling.volcano.sh/queue-name: research
            volcano.sh/preemptable: "true"
            huawei.com/vnpu-mode: hami-core
        spec:
          restartPolicy: Always
          containers: [{name: c, image: x}]
    - name: b
      replicas: 1
      minAvailable: 1
      template:
        spec:
          restartPolicy: Never
          containers: [{name: c, image: x}]
"""


def test_every_field_not_carried_over_is_listed() -> None:
    documents, lines = converted(EVERYTHING)
    assert fields(lines, "Job ml/big") == {
        'metadata.annotations["volcano.sh/sla-waiting-time"]',
        "spec.volumes",
        "spec.runningEstimate",
        "spec.queue",
        "spec.maxRetry",
        "spec.minSuccess",
        "spec.networkTopology",
        "spec.plugins.env",
        "spec.plugins.pytorch",
        "spec.policies[0]",
        "spec.policies[1]",
        "spec.somethingNew",
        "spec.tasks[0].policies[0]",
        "spec.tasks[0].topologyPolicy",
        "spec.tasks[0].maxRetry",
        "spec.tasks[0].dependsOn",
        "spec.tasks[0].minAvailable",  # the gang (2 of 3) cannot say "1 of a and 1 of b"
        "spec.tasks[1].minAvailable",
        'spec.tasks[0].template.metadata.annotations["scheduling.volcano.sh/queue-name"]',
        'spec.tasks[0].template.metadata.annotations["volcano.sh/preemptable"]',
        "spec.tasks[0].template.spec.restartPolicy",
    }
    assert all(line.startswith("Job ml/big: ") for line in lines)
    assert len(lines) == len(set(lines)) == 21
    (group,) = by_kind(documents, "PodGroup")
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    a, b = by_kind(documents, "Job")
    assert a["metadata"]["annotations"] == {"keep": "yes"}
    pod_a = a["spec"]["template"]
    assert pod_a["metadata"]["annotations"] == {
        "huawei.com/vnpu-mode": "hami-core"
    }  # vnpu reads it
    assert pod_a["spec"]["restartPolicy"] == "Never"
    assert b["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert "unknown Volcano Job field" in next(line for line in lines if "somethingNew" in line)
    policies = [line for line in lines if "lifecycle policy" in line]
    assert [p.split("policy: ")[1].split(")")[0] for p in policies] == [
        "exit code 3 -> AbortJob",
        "PodFailed, PodEvicted -> RestartJob",
        "TaskCompleted -> CompleteJob",
    ]


def test_volcano_pod_group_and_the_pods_that_join_it() -> None:
    documents, lines = converted(
        """\
        apiVersion: scheduling.volcano.sh/v1beta1
        kind: PodGroup
        metadata: {name: infer, namespace: ml}
        spec: {minMember: 3, queue: gold, minResources: {cpu: 3}, priorityClassName: high}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web, namespace: ml}
        spec:
          replicas: 3
          template:
            metadata:
              annotations: {scheduling.k8s.io/group-name: infer, team: a}
            spec:
              schedulerName: volcano
              containers: [{name: c, image: x, resources: {limits: {huawei.com/Ascend310P: 1}}}]
        ---
        apiVersion: v1
        kind: Pod
        metadata: {name: stray, namespace: ml, annotations: {scheduling.volcano.sh/group-name: elsewhere}}
        spec:
          containers: [{name: c, image: x}]
        ---
        apiVersion: scheduling.volcano.sh/v1beta1
        kind: Queue
        metadata: {name: gold}
        spec: {weight: 1}
        """
    )
    kinds = [d["kind"] for d in documents]
    assert kinds == ["Workload", "PodGroup", "Deployment", "Pod"]  # the Queue is dropped
    group = documents[1]
    assert group["spec"] == {
        "workloadRef": {"workloadName": "infer", "templateName": "gang"},
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "priorityClassName": "high",
    }
    template = documents[2]["spec"]["template"]
    assert template["metadata"]["annotations"] == {"team": "a"}
    assert template["spec"]["schedulingGroup"] == {"podGroupName": "infer"}
    assert template["spec"]["schedulerName"] == "vnpu-scheduler"
    stray = documents[3]
    assert stray["spec"]["schedulingGroup"] == {"podGroupName": "elsewhere"}
    assert "annotations" not in stray["metadata"]
    assert "schedulerName" not in stray["spec"]  # no NPU, no foreign scheduler: left alone
    assert fields(lines, "PodGroup ml/infer") == {"spec.queue", "spec.minResources"}
    assert fields(lines, "Pod ml/stray") == {"spec.schedulingGroup.podGroupName"}
    assert "that PodGroup is not in this input" in next(line for line in lines if "stray" in line)
    assert fields(lines, "Queue gold") == {"kind"}
    assert len(lines) == 4


# --- resource names ---------------------------------------------------------------------


def choice(name: str) -> resourcenames.ModelChoice:
    models = {m.name: m for m in catalog.BUILTIN}
    return resourcenames.ModelChoice((models[name],), f"--model {name}", named=True)


@pytest.mark.parametrize(
    ("model", "given", "expected"),
    [
        ("910A", {"huawei.com/npu": 2}, {"huawei.com/Ascend910A": 2}),
        ("910A", {"huawei.com/Ascend910": "1"}, {"huawei.com/Ascend910A": "1"}),
        ("910B3", {"huawei.com/Ascend910": 8}, {"huawei.com/Ascend910B3": 8}),
        (
            "910B4",
            {"huawei.com/Ascend910B": 1, "huawei.com/Ascend910B-memory": 8192},
            {"huawei.com/Ascend910B4": 1, "huawei.com/Ascend910B4-memory": 8192},
        ),
        ("910B3", {"huawei.com/Ascend910B-core": 50}, {"huawei.com/Ascend910B3-core": 50}),
        # MindCluster dynamic vNPUs: AI cores -> one template's memory, or whole chips
        (
            "310P3",
            {"huawei.com/npu-core": 1},
            {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 3072},
        ),
        (
            "310P3",
            {"huawei.com/npu-core": "2"},
            {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 6144},
        ),
        (
            "310P3",
            {"huawei.com/npu-core": 3},
            {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 12288},
        ),
        ("310P3", {"huawei.com/npu-core": 16}, {"huawei.com/Ascend310P": 2}),
        # Huawei's static vNPU kinds: one vNPU of the template with those cores
        (
            "310P3",
            {"huawei.com/Ascend310P-2c": 1},
            {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 6144},
        ),
        (
            "310P3",
            {"huawei.com/Ascend310P-4c.3cpu": 1},
            {"huawei.com/Ascend310P": 1, "huawei.com/Ascend310P-memory": 12288},
        ),
        (
            "910A",
            {"huawei.com/Ascend910-4c": 1},
            {"huawei.com/Ascend910A": 1, "huawei.com/Ascend910A-memory": 4369},
        ),
        (
            "910B3",
            {"huawei.com/Ascend910-10c.3cpu.32g": 1},
            {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 32768},
        ),
        # vnpu's own names and other resources stay, in their order
        (
            "910A",
            {"cpu": 2, "huawei.com/Ascend310P": 1, "huawei.com/npu": 1, "memory": "1Gi"},
            {"cpu": 2, "huawei.com/Ascend310P": 1, "huawei.com/Ascend910A": 1, "memory": "1Gi"},
        ),
    ],
)
def test_translated_names(
    model: str, given: dict[str, object], expected: dict[str, object]
) -> None:
    renamed = resourcenames.translate(given, choice(model))
    assert renamed.problems == {}
    assert renamed.resources == expected
    assert list(renamed.resources) == list(expected)


@pytest.mark.parametrize(
    ("models", "given", "problem"),
    [
        ((), {"huawei.com/npu": 1}, "the chip model is not known: pass --model or --cluster"),
        (("310P3",), {"huawei.com/Ascend910": 1}, "--model 310P3 is not an Ascend910 chip"),
        (("910A",), {"huawei.com/Ascend910B": 1}, "--model 910A is not an Ascend910B chip"),
        (("910A",), {"huawei.com/Ascend310": 1}, "vnpu has no Ascend 310 model"),
        (("910A",), {"huawei.com/gpu": 1}, "unknown NPU resource"),
        (("310P3",), {"huawei.com/npu-core": 9}, "9 AI cores is more than one 310P3 vNPU has"),
        (("310P3",), {"huawei.com/npu-core": "1.5"}, "must be a whole number"),
        (("310P3",), {"huawei.com/Ascend310P-2c": 2}, "2 vNPUs in one container"),
        (("910B3",), {"huawei.com/Ascend910-4c": 1}, "910B3 has no template of this shape"),
        (
            ("910A",),
            {"huawei.com/Ascend910A": 1, "huawei.com/npu": 1},
            "it would become huawei.com/Ascend910A, which the container asks for already",
        ),
    ],
)
def test_names_kept_with_the_reason(
    models: tuple[str, ...], given: dict[str, object], problem: str
) -> None:
    picked = choice(models[0]) if models else resourcenames.ModelChoice()
    renamed = resourcenames.translate(given, picked)
    assert renamed.resources == given
    (reason,) = renamed.problems.values()
    assert problem in reason


def test_without_a_model_names_are_kept_and_listed() -> None:
    status, out, err = run(str(PODS))
    assert status == 0
    generic, volcano_pod = yaml.safe_load_all(out)
    assert generic["spec"]["containers"][0]["resources"]["limits"] == {"huawei.com/npu": 1}
    assert generic["spec"]["schedulerName"] == "vnpu-scheduler"  # an NPU pod all the same
    assert volcano_pod["spec"]["schedulerName"] == "vnpu-scheduler"
    assert volcano_pod["spec"]["containers"][0]["resources"]["limits"] == {
        "huawei.com/Ascend310P": 1
    }
    assert err.splitlines() == [
        'Pod generic: spec.containers[0].resources.limits["huawei.com/npu"]: not converted '
        "(the chip model is not known: pass --model or --cluster)"
    ]


def test_model_flag_translates_the_example_pods() -> None:
    status, out, err = run(str(PODS), "--model", "Ascend910B3")  # a common word works too
    assert (status, err) == (0, "")
    generic, volcano_pod = yaml.safe_load_all(out)
    assert generic["spec"]["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910B3": 1}
    assert volcano_pod["spec"]["containers"][0]["resources"]["limits"] == {
        "huawei.com/Ascend310P": 1
    }


def test_cluster_file_gives_the_model_when_one_fits(tmp_path: Path) -> None:
    one = write(tmp_path, "one.yaml", "nodes: [{name: a, chip: 910A, chips: 8, replicas: 2}]\n")
    status, out, err = run(str(JOB), "--cluster", one)
    assert status == 0
    assert "huawei.com/Ascend910A: 1" in out
    assert "huawei.com/Ascend910" not in out.replace("huawei.com/Ascend910A", "")
    assert "resources" not in err
    # A 310P3 edge and 910A trainers: the 910 name has one model, huawei.com/npu has two.
    mixed = write(
        tmp_path,
        "mixed.yaml",
        """\
        nodes:
          - {name: edge, chip: 310P3, chips: 8, replicas: 3}
          - {name: train, chip: 910A, chips: 8}
        """,
    )
    status, out, err = run(str(JOB), "--cluster", mixed)
    assert status == 0
    assert "huawei.com/Ascend910A: 1" in out
    status, out, err = run(str(PODS), "--cluster", mixed)
    assert status == 0
    assert "huawei.com/npu: 1" in out
    assert f"cluster file {mixed} has several chip models (310P3, 910A): pass --model" in err
    status, _out, err = run(str(JOB), "--cluster", str(EXAMPLES / "cluster.yaml"))
    assert status == 0
    assert "has several Ascend910 chip models (" in err


def test_pods_of_other_kinds_hami_keys_and_mindcluster_labels() -> None:
    documents, lines = converted(
        """\
        apiVersion: v1
        kind: List
        items:
          - apiVersion: batch/v1
            kind: CronJob
            metadata: {name: nightly}
            spec:
              schedule: "0 1 * * *"
              jobTemplate:
                spec:
                  template:
                    metadata:
                      labels: {vnpu-level: high, app: x}
                      annotations: {hami.io/use-Ascend910B-uuid: "u1,u2"}
                    spec:
                      schedulerName: hami-scheduler
                      restartPolicy: Never
                      containers: [{name: c, image: x, resources: {limits: {huawei.com/npu-core: 4}}}]
          - apiVersion: v1
            kind: Service
            metadata: {name: svc}
            spec: {clusterIP: None}
        ---
        apiVersion: apps/v1
        kind: StatefulSet
        metadata: {name: mine}
        spec:
          template:
            spec:
              schedulerName: my-scheduler
              containers: [{name: c, image: x, resources: {limits: {huawei.com/Ascend310P: 1}}}]
        """,
        "--model",
        "910B3",
    )
    cron, service, stateful = documents
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]
    assert pod["spec"]["schedulerName"] == "vnpu-scheduler"
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {
        "huawei.com/Ascend910B3": 1,
        "huawei.com/Ascend910B3-memory": 16384,
    }
    assert pod["metadata"]["annotations"] == {"hami.io/use-Ascend910B3-uuid": "u1,u2"}
    assert pod["metadata"]["labels"] == {"vnpu-level": "high", "app": "x"}
    assert service == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "svc"},
        "spec": {"clusterIP": "None"},
    }
    assert stateful["spec"]["template"]["spec"]["schedulerName"] == "my-scheduler"
    assert fields(lines, "CronJob nightly") == {
        'spec.jobTemplate.spec.template.metadata.labels["vnpu-level"]'
    }
    assert fields(lines, "StatefulSet mine") == {"spec.template.spec.schedulerName"}
    assert len(lines) == 2


# --- input that cannot be read ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("kind: [Job\n", "line 2, column 1", "YAML syntax error"),
        ("- 1\n- 2\n", "document 1 (line 1): (document)", "must be a mapping"),
        ("apiVersion: v1\nmetadata: {name: p}\n", "document 1 (line 1): kind", "is required"),
        (
            "---\nkind: ConfigMap\napiVersion: v1\n---\n"
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec: {minAvailable: 1}\n",
            "document 2 (line 5): spec.tasks",
            "is required",
        ),
        (
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
            "spec: {tasks: [{name: w, template: {spec: {containers: [{name: c}]}}}]}\n",
            "document 1 (line 1): spec.tasks[0].replicas",
            "is required",
        ),
        (
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
            "spec: {minAvailable: 3, tasks: [{name: w, replicas: 2, template: {spec: {containers: [{name: c}]}}}]}\n",
            "document 1 (line 1): spec.minAvailable",
            "must be from 1 to the tasks' 2 pods",
        ),
        (
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
            "spec: {tasks: [{name: w, replicas: 2, template: {spec: {}}}]}\n",
            "document 1 (line 1): spec.tasks[0].template.spec.containers",
            "is required",
        ),
        (
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
            "spec: {tasks: [{name: w, replicas: 1, template: {spec: {containers: [{name: c}]}}},"
            " {name: w, replicas: 1, template: {spec: {containers: [{name: c}]}}}]}\n",
            "document 1 (line 1): spec.tasks[1].name",
            "names another task too",
        ),
        (
            "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\n"
            "spec: {tasks: [{name: Worker_1, replicas: 1, template: {spec: {containers: [{name: c}]}}}]}\n",
            "document 1 (line 1): spec.tasks[0].name",
            "must be a DNS label",
        ),
        (
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: PodGroup\nmetadata: {generateName: g-}\n",
            "document 1 (line 1): metadata.name",
            "is required",
        ),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 1}\n",
            "document 1 (line 1): spec.template",
            "is required",
        ),
        (
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: p}\n"
            "  spec: {containers: [{name: c, resources: {limits: [1]}}]}\n",
            "document 1 (line 1): items[0].spec.containers[0].resources.limits",
            "must be a mapping",
        ),
    ],
)
def test_bad_input_names_file_document_and_field(
    tmp_path: Path, text: str, where: str, problem: str
) -> None:
    path = write(tmp_path, "in.yaml", text)
    status, out, err = run(path)
    assert (status, out) == (2, "")
    assert err.startswith(f"vnpu convert: {path}: {where}: ")
    assert problem in err
    assert len(err.splitlines()) == 1


def test_bad_flags_and_unreadable_files(tmp_path: Path) -> None:
    status, _out, err = run(str(JOB), "--model", "H100")
    assert status == 2
    assert err.startswith("vnpu convert: --model: unknown chip model; use one of 310P3, 910A")
    status, _out, err = run(str(tmp_path / "missing.yaml"))
    assert status == 2
    assert "missing.yaml: cannot be read: No such file or directory" in err
    bad_cluster = write(tmp_path, "c.yaml", "nodes: [{name: a, chip: H100, chips: 1}]\n")
    status, _out, err = run(str(JOB), "--cluster", bad_cluster)
    assert status == 2
    assert f"{bad_cluster}: nodes[0].chip: unknown chip model" in err
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"kind: \xff\n")
    status, _out, err = run(str(binary))
    assert status == 2
    assert "byte 6: is not UTF-8" in err


def test_output_writes_shared_values_out() -> None:
    shared = {"gang": {"minCount": 2}}
    text = convert.to_yaml([{"a": shared, "b": shared}])
    assert text == "---\na:\n  gang:\n    minCount: 2\nb:\n  gang:\n    minCount: 2\n"  # no &id/*id


def test_empty_input_and_empty_documents() -> None:
    assert run("-", stdin="") == (0, "", "")
    documents, lines = converted(
        "# nothing\n---\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"
    )
    assert documents == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}]
    assert lines == []


# --- the console script -----------------------------------------------------------------


def test_console_script_end_to_end() -> None:
    done = subprocess.run(
        [str(SCRIPT), "convert", str(JOB), "--model", "910A"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    documents = list(yaml.safe_load_all(done.stdout))
    assert [d["kind"] for d in documents] == ["Workload", "PodGroup", "Job"]
    assert documents[1]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    assert "Job train/resnet: spec.plugins.svc: not converted (Volcano plugin)" in done.stderr

    piped = subprocess.run(
        [str(SCRIPT), "convert", "-", "--scheduler-name", "npu-sched"],
        input=PODS.read_text(encoding="utf-8"),
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert piped.returncode == 0
    pods = list(yaml.safe_load_all(piped.stdout))
    assert [p["spec"]["schedulerName"] for p in pods] == ["npu-sched", "npu-sched"]
    assert len(piped.stderr.splitlines()) == 1  # huawei.com/npu without a model

    bad = subprocess.run(
        [str(SCRIPT), "convert", "-"],
        input="apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec: {}\n",
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == (
        "vnpu convert: <stdin>: document 1 (line 1): spec.tasks: is required (got None)\n"
    )
