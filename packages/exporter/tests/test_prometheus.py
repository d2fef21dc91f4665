"""A real Prometheus scraping the exporter, the device plugin and the scheduler of a simulated node.

One platform per module: the session's kube-apiserver (two namespaces of the module's own,
``ml`` and ``capped`` by role) and a simulated kubelet in this process; the
``vnpu-device-plugin``, ``vnpu-scheduler`` and ``vnpu-exporter`` commands as real processes on
a simulated 310P node; Prometheus (Debian's package) on loopback scraping all three every
second with vnpu's alert rules loaded. The test plays kube-scheduler (``/filter`` then
``/bind``), the kubelet admits the pods through the device plugin, which creates the vNPUs
and records them in its ledger; the scheduler reads a team of ``ml`` and two ResourceQuotas,
one of which holds a pod back. Then every dashboard query must parse and return data, the
rules must evaluate, and ``promtool check metrics`` must accept the exporter's live answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import kubernetes
import pytest
import yaml

from vnpu_exporter import dashboards, grafana
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import control
from vnpu_sandbox.kubelet import apiclient, kubelet, nodestatus
from vnpu_sandbox.platform import components

pytestmark = pytest.mark.needs_prometheus

NODE = "n1"
WORD = "Ascend310P"
ALERTS = Path(__file__).resolve().parents[3] / "deploy" / "alerts" / "vnpu-alerts.yaml"
ML = "prometheus-ml"
"""``ml`` above: the team's namespace, whose pods are placed."""
CAPPED = "prometheus-capped"
"""``capped`` above: a namespace whose ResourceQuota has no room for its pod."""
NOT_READY = "node.kubernetes.io/not-ready"


def _wait(what: str, check: Callable[[], Any], timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, OSError, ValueError, KeyError):
            last = check()
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def _lift_not_ready(core: kubernetes.client.CoreV1Api, name: str) -> bool:
    """Once node ``name`` reports Ready, lift the ``not-ready`` NoSchedule taint kube-apiserver
    gave it at creation, as kube-controller-manager's node lifecycle controller would (none
    runs here). True when the node is Ready and no longer has the taint."""
    node = core.read_node(name)
    conditions = (node.status.conditions if node.status else None) or []
    if not any(c.type == "Ready" and c.status == "True" for c in conditions):
        return False
    taints = node.spec.taints or []
    kept = [t for t in taints if t.key != NOT_READY]
    if len(kept) == len(taints):
        return True
    body = {
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": core.api_client.sanitize_for_serialization(kept) or None},
    }
    try:
        core.patch_node(name, body, _content_type="application/merge-patch+json")
    except kubernetes.client.ApiException as exc:
        if exc.status != 409:  # the node changed meanwhile: look again
            raise
        return False
    return True


@dataclass
class Platform:
    root: Path
    core: kubernetes.client.CoreV1Api
    ports: dict[str, int]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.ports[name]}"

    def start(self, name: str, argv: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.processes[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def dump_stacks(self) -> None:
        """Ask every vnpu service still running for its threads' stacks (SIGUSR1,
        ``vnpu_service.logs``); each writes them to its log before this returns."""
        for name, process in self.processes.items():
            log = self.root / f"{name}.log"
            if name == "prometheus" or process.poll() is not None:
                continue
            process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 5
            while "most recent call first" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.root.glob("*.log"))
        )

    def query(self, expr: str) -> list[Any]:
        answer = httpx.get(
            f"{self.url('prometheus')}/api/v1/query", params={"query": expr}, timeout=10
        ).json()
        assert answer["status"] == "success", (expr, answer)
        result: list[Any] = answer["data"]["result"]
        return result


def _pod(
    name: str, memory: int | None = None, chips: int = 1, namespace: str = ML
) -> dict[str, Any]:
    limits = {f"huawei.com/{WORD}": str(chips)}
    if memory is not None:
        limits[f"huawei.com/{WORD}-memory"] = str(memory)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": "vnpu-scheduler",  # what the webhook sets; /bind refuses other pods
            "containers": [{"name": "main", "image": "app", "resources": {"limits": limits}}],
        },
    }


def _schedule(platform: Platform, name: str) -> None:
    """What kube-scheduler does with the extender: filter on both nodes, then bind to n1."""
    scheduler = platform.url("scheduler")
    pod = platform.core.api_client.sanitize_for_serialization(
        platform.core.read_namespaced_pod(name, ML)
    )

    def filtered() -> bool:
        body = {"Pod": pod, "NodeNames": [NODE, "n2"], "Nodes": None}
        answer = httpx.post(f"{scheduler}/filter", json=body, timeout=10).json()
        return NODE in (answer.get("NodeNames") or [])

    _wait(f"{name} to fit {NODE}", filtered)
    body = {"PodName": name, "PodNamespace": ML, "PodUID": pod["metadata"]["uid"], "Node": NODE}
    error = httpx.post(f"{scheduler}/bind", json=body, timeout=10).json()["Error"]
    assert error == "", error


def _hold_back(platform: Platform, name: str, namespace: str) -> None:
    """Filter a pod its namespace's ResourceQuota refuses: it stays pending, as demand."""
    pod = platform.core.api_client.sanitize_for_serialization(
        platform.core.read_namespaced_pod(name, namespace)
    )

    def refused() -> bool:
        body = {"Pod": pod, "NodeNames": [NODE, "n2"], "Nodes": None}
        answer = httpx.post(f"{platform.url('scheduler')}/filter", json=body, timeout=10).json()
        return not answer.get("NodeNames") and "limits.vnpu.io/aicore" in json.dumps(answer)

    _wait(f"{name} to be held back by its quota", refused)


TENANTS = f"""\
teams:
  - name: research
    namespaces: [{ML}]
    nominal: {{aicore: 64, memory: 131072}}
    borrowingLimit: {{aicore: 8, memory: 0}}
"""


def _tenancy(core: kubernetes.client.CoreV1Api) -> None:
    """A team for ``ml``, a ResourceQuota it is well within, and a namespace capped below a pod."""
    client = kubernetes.client
    core.create_namespaced_config_map(
        ML,
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="vnpu-tenants"), data={"tenants.yaml": TENANTS}
        ),
    )
    for namespace, cores in ((ML, "48"), (CAPPED, "1")):
        core.create_namespaced_resource_quota(
            namespace,
            client.V1ResourceQuota(
                metadata=client.V1ObjectMeta(name="npu"),
                spec=client.V1ResourceQuotaSpec(hard={"limits.vnpu.io/aicore": cores}),
            ),
        )


def _prometheus_config(platform: Platform) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
        "rule_files": [str(ALERTS)],
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [{"targets": [f"127.0.0.1:{platform.ports[name]}"]}],
            }
            for job, name in (
                ("vnpu-exporter", "exporter"),
                ("vnpu-device-plugin", "plugin"),
                ("vnpu-scheduler", "scheduler"),
            )
        ],
    }
    path = platform.root / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def platform(request: pytest.FixtureRequest) -> Iterator[Platform]:
    for binary in ("prometheus", "promtool"):
        if shutil.which(binary) is None:
            pytest.skip(
                f"{binary} is not installed (Debian package prometheus; .ci/run installs it)"
            )
    plane = request.getfixturevalue("kube_plane")  # the session's kube-apiserver
    root = Path(tempfile.mkdtemp(prefix="vx", dir="/tmp"))  # unix socket paths stay short
    bin_dir = Path(sys.executable).parent
    spaces = [plane.namespace(ML), plane.namespace(CAPPED)]
    kubeconfig = spaces[0].kubeconfig
    api = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = kubernetes.client.CoreV1Api(api)
        core.create_node({"metadata": {"name": "n2"}})  # no NPUs: the filter refuses it
        _tenancy(core)
        sim = root / "sim"
        sim.mkdir()
        (sim / "chips.yaml").write_text("chip: 310P3\nchips: 4\nseed: n1\n")
        sim_backend.SimBackend(sim)  # makes the node's state, as the simulator's ``init`` does
        control.inject_fault(sim, 3, codes=[0x80E18405])  # sub-health: usable, with an active code
        names = ("exporter", "plugin", "scheduler", "prometheus")
        ports = dict(zip(names, components.free_ports(len(names)), strict=True))
        platform = Platform(root, core, ports)
        config = kubelet.KubeletConfig(
            nodestatus.NodeIdentity(NODE),
            device_plugin_dir=root / "dp",
            pod_resources_socket=root / "pr" / "kubelet.sock",
            heartbeat_seconds=0,
        )
        with kubelet.Kubelet(config, apiclient.client_from_kubeconfig(str(kubeconfig))):
            common = [
                "--node-name",
                NODE,
                "--backend",
                "sim",
                "--sim-dir",
                str(sim),
                "--kubeconfig",
                str(kubeconfig),
            ]
            platform.start(
                "plugin",
                [
                    str(bin_dir / "vnpu-device-plugin"),
                    *common,
                    "--device-plugin-dir",
                    str(root / "dp"),
                    "--pod-resources-socket",
                    str(config.pod_resources_socket),
                    "--state-dir",
                    str(root / "state"),
                    "--metrics-host",
                    "127.0.0.1",
                    "--metrics-port",
                    str(ports["plugin"]),
                    "--report-interval",
                    "2",
                    "--reconcile-interval",
                    "2",
                ],
            )
            platform.start(
                "scheduler",
                [
                    str(bin_dir / "vnpu-scheduler"),
                    "--kubeconfig",
                    str(kubeconfig),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(ports["scheduler"]),
                    "--tenants-config",
                    f"{ML}/vnpu-tenants",
                ],
            )
            intervals = json.dumps(
                dict.fromkeys(
                    (
                        "health",
                        "sensors",
                        "utilization",
                        "memory",
                        "vnpus",
                        "pods",
                        "pod_resources",
                        "ownership",
                    ),
                    0.5,
                )
            )
            os.environ["VNPU_EXP_INTERVALS"] = intervals
            try:
                platform.start(
                    "exporter",
                    [
                        str(bin_dir / "vnpu-exporter"),
                        *common,
                        "--pod-resources-socket",
                        str(config.pod_resources_socket),
                        "--device-plugin-state-dir",
                        str(root / "state"),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(ports["exporter"]),
                    ],
                )
            finally:
                del os.environ["VNPU_EXP_INTERVALS"]
            prometheus_config = _prometheus_config(platform)
            platform.start(
                "prometheus",
                [
                    "prometheus",
                    f"--config.file={prometheus_config}",
                    f"--storage.tsdb.path={root / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
                    "--log.level=warn",
                ],
            )
            try:
                _wait(
                    "the scheduler",
                    lambda: (
                        httpx.get(f"{platform.url('scheduler')}/readyz", timeout=2).status_code
                        == 200
                    ),
                )
                _wait(
                    "the device plugin's inventory",
                    lambda: (
                        f"hami.io/node-register-{WORD}"
                        in (core.read_node(NODE).metadata.annotations or {})
                    ),
                )
                _wait(f"{NODE} Ready and schedulable", lambda: _lift_not_ready(core, NODE))
                for name, memory in (
                    ("whole", None),
                    ("small-a", 6144),
                    ("small-b", 6144),
                    ("tiny", 3072),
                ):
                    core.create_namespaced_pod(ML, _pod(name, memory))
                    _schedule(platform, name)
                core.create_namespaced_pod(CAPPED, _pod("capped", 6144, namespace=CAPPED))
                _hold_back(platform, "capped", CAPPED)
                core.create_namespaced_pod(ML, _pod("too-big", chips=8))
                pod = core.read_namespaced_pod("too-big", ML)
                body = {
                    "PodName": "too-big",
                    "PodNamespace": ML,
                    "PodUID": pod.metadata.uid,
                    "Node": NODE,
                }
                assert httpx.post(
                    f"{platform.url('scheduler')}/bind", json=body, timeout=10
                ).json()["Error"]
                _wait(
                    "Prometheus",
                    lambda: (
                        httpx.get(f"{platform.url('prometheus')}/-/ready", timeout=2).status_code
                        == 200
                    ),
                )
                _wait(
                    "three targets up",
                    lambda: len(platform.query('up{job=~"vnpu-.*"} == 1')) == 3,
                )
                _wait(
                    "the vNPUs tied to their pods by the ledger",
                    lambda: len(platform.query('vnpu_allocation_info{attribution="ledger"}')) == 3,
                    timeout=20,
                )
                _wait(  # rate() over the dashboards' 15 s windows needs two samples or more
                    "three scrapes of every target",
                    lambda: (
                        len(platform.query('count_over_time(up{job=~"vnpu-.*"}[15s]) >= 3')) == 3
                    ),
                )
                yield platform
            except BaseException:
                platform.dump_stacks()
                print(platform.logs())
                raise
            finally:
                for process in platform.processes.values():
                    process.terminate()
                for process in platform.processes.values():
                    try:
                        process.wait(10)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait(5)
    finally:
        api.close()
        for space in spaces:  # their objects and both nodes
            space.clear()
        shutil.rmtree(root, ignore_errors=True)


def test_vnpus_created_by_the_plugin_are_attributed_to_their_pods(platform: Platform) -> None:
    found = {
        (r["metric"]["pod"], r["metric"]["kind"], r["metric"].get("template", ""))
        for r in platform.query("vnpu_allocation_info")
    }
    assert found == {
        ("whole", "whole", ""),
        ("small-a", "vnpu", "vir02"),
        ("small-b", "vnpu", "vir02"),
        ("tiny", "vnpu", "vir01"),
    }
    ledger = {
        r["metric"]["pod"]: r["metric"]["vnpu"]
        for r in platform.query('vnpu_allocation_info{attribution="ledger"}')
    }
    assert set(ledger) == {"small-a", "small-b", "tiny"}
    assert len(set(ledger.values())) == 3  # three distinct vNPU ids
    assert platform.query("sum(vnpu_chip_unowned_vnpus)")[0]["value"][1] == "0"


@pytest.mark.parametrize("dashboard", dashboards.build(), ids=lambda d: d.uid)
def test_every_dashboard_query_returns_data(
    platform: Platform, dashboard: grafana.Dashboard
) -> None:
    empty = []
    for panel, query in dashboard.queries():
        expr = (
            query.expr.replace("$__rate_interval", "15s")
            .replace("$__range", "1m")
            .replace("$node", ".*")
            .replace("$model", ".*")
            .replace("$namespace", ".*")
            .replace("$team", ".*")
        )
        if not platform.query(expr):
            empty.append(f"{panel.title}: {expr}")
    assert not empty, "panels without data:\n" + "\n".join(empty)


def test_the_alert_rules_load_and_evaluate(platform: Platform) -> None:
    expected = sum(len(group["rules"]) for group in yaml.safe_load(ALERTS.read_text())["groups"])

    def rules() -> list[dict[str, Any]]:
        answer = httpx.get(f"{platform.url('prometheus')}/api/v1/rules", timeout=10).json()
        return [rule for group in answer["data"]["groups"] for rule in group["rules"]]

    evaluated = _wait(
        "every rule evaluated", lambda: all(r["health"] != "unknown" for r in rules()) and rules()
    )
    assert len(evaluated) == expected
    assert [(r["name"], r.get("lastError")) for r in evaluated if r["health"] != "ok"] == []


def test_promtool_accepts_the_live_exposition(platform: Platform) -> None:
    text = httpx.get(f"{platform.url('exporter')}/metrics", timeout=10).text
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
