"""The demo's kubectl session against the emulator with the controllers running: apply a
Deployment, see it ready, scale it, list deploy,rs,pods, delete it and see everything go.

Runs whichever kubectl is on PATH (``VNPU_TEST_KUBECTL`` picks another, such as Debian's 1.20).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.controllers import manager

pytestmark = pytest.mark.needs_kubectl

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: batch
spec:
  replicas: 1
  strategy: {type: Recreate}
  selector:
    matchLabels: {app: batch}
  template:
    metadata:
      labels: {app: batch}
    spec:
      containers:
      - name: worker
        image: busybox:1.36
"""


@pytest.fixture
def kubectl(api_url: str, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    binary = os.environ.get("VNPU_TEST_KUBECTL") or shutil.which("kubectl")
    if binary is None:
        pytest.skip("no kubectl on PATH (.ci/run installs Debian's kubernetes-client)")
    env = {
        **os.environ,
        "KUBECONFIG": str(harness.write_kubeconfig(tmp_path / "kubeconfig", api_url)),
        "HOME": str(tmp_path),
    }

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [binary, *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=env,
            timeout=20,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    return run


def _rows(output: str) -> dict[str, list[str]]:
    """``kubectl get`` output as {NAME: the other cells}, every kind's header dropped."""
    rows: dict[str, list[str]] = {}
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0] != "NAME":
            rows[cells[0]] = cells[1:]
    return rows


def test_apply_scale_get_and_delete_a_deployment(
    controllers: manager.ControllerManager,
    kubelet: Any,
    kubectl: Callable[..., subprocess.CompletedProcess[str]],
    wait: Callable[..., Any],
) -> None:
    applied = kubectl("apply", "--validate=false", "-f", "-", stdin=MANIFEST)
    assert "deployment.apps/web created" in applied.stdout

    def ready(name: str, replicas: int) -> Callable[[], bool]:
        """READY n/n, UP-TO-DATE n, AVAILABLE n."""

        def check() -> bool:
            row = _rows(kubectl("get", "deploy", name).stdout).get(name)
            return row is not None and row[:3] == [
                f"{replicas}/{replicas}",
                str(replicas),
                str(replicas),
            ]

        return check

    wait(ready("web", 3), timeout=8)
    wait(ready("batch", 1), timeout=8)
    kubectl("scale", "deployment", "web", "--replicas=5")
    wait(ready("web", 5), timeout=8)
    kubectl("scale", "deployment", "web", "--replicas=2", "--current-replicas=5")
    wait(ready("web", 2), timeout=8)
    listed = _rows(kubectl("get", "deploy,rs,pods").stdout)
    replica_sets = [name for name in listed if name.startswith("replicaset.apps/web-")]
    assert len(replica_sets) == 1
    assert listed[replica_sets[0]][:3] == ["2", "2", "2"]  # DESIRED CURRENT READY
    web_pods = [
        n for n in listed if n.startswith(f"pod/{replica_sets[0][len('replicaset.apps/') :]}-")
    ]
    wait(lambda: len(_rows(kubectl("get", "pods", "-l", "app=web").stdout)) == 2)
    assert len(web_pods) >= 2
    described = yaml.safe_load(kubectl("get", "deploy", "web", "-o", "yaml").stdout)
    assert described["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert {c["type"] for c in described["status"]["conditions"]} == {"Available", "Progressing"}
    deleted = kubectl("delete", "deployment", "web")  # waits until it is gone
    assert 'deployment.apps "web" deleted' in deleted.stdout

    def web_gone() -> bool:
        left = _rows(kubectl("get", "deploy,rs,pods").stdout)
        return not [name for name in left if "web" in name]

    wait(web_gone, timeout=8)
    kubectl("delete", "deployment", "batch", "--cascade=foreground")
    wait(lambda: not _rows(kubectl("get", "deploy,rs,pods").stdout), timeout=8)
