"""Fixtures for the Helm chart tests: the chart rendered offline with helm-python-sdk.

``helm_python`` binds Helm's own Go library (shipped in its wheel), so rendering, schema
validation and lint here are Helm's, not an imitation; no cluster, binary or network is used.
``render(values)`` returns a ``Manifests``: every rendered document parsed, with lookups by
kind and name and the container/pod helpers the tests share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "vnpu"
RELEASE = "vnpu"
NAMESPACE = "kube-system"

Json = dict[str, Any]


@dataclass(frozen=True)
class Manifests:
    """The documents of one render, and the rendered NOTES.txt."""

    docs: tuple[Json, ...]
    notes: str
    sources: dict[str, str]  # template path -> raw rendered text

    def kinds(self) -> set[str]:
        return {d["kind"] for d in self.docs}

    def all(self, kind: str) -> list[Json]:
        return [d for d in self.docs if d["kind"] == kind]

    def find(self, kind: str, name: str) -> Json | None:
        for doc in self.all(kind):
            if doc["metadata"]["name"] == name:
                return doc
        return None

    def get(self, kind: str, name: str) -> Json:
        found = self.find(kind, name)
        if found is None:
            present = sorted(d["metadata"]["name"] for d in self.all(kind))
            raise AssertionError(f"no {kind} {name!r} rendered (have {present})")
        return found

    def workloads(self) -> list[Json]:
        return [d for d in self.docs if d["kind"] in ("Deployment", "DaemonSet")]

    def container(self, name: str) -> tuple[Json, Json]:
        """(pod spec, container) of the container called ``name`` in any workload."""
        for workload in self.workloads():
            spec = workload["spec"]["template"]["spec"]
            for container in spec["containers"]:
                if container["name"] == name:
                    return spec, container
        raise AssertionError(f"no container {name!r} rendered")

    def has_container(self, name: str) -> bool:
        return any(
            c["name"] == name
            for w in self.workloads()
            for c in w["spec"]["template"]["spec"]["containers"]
        )


def parse(rendered: dict[str, str]) -> Manifests:
    docs: list[Json] = []
    notes = ""
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            assert isinstance(doc, dict), f"{path}: a document that is not a mapping: {doc!r}"
            docs.append(doc)
    return Manifests(tuple(docs), notes, dict(rendered))


Render = Callable[..., Manifests]


@pytest.fixture(scope="session")
def render() -> Render:
    """Render the chart as ``helm install vnpu -n kube-system`` would, with ``values``.

    The chart is loaded again for every render: Helm drops the subcharts a render disables
    from the loaded chart itself, so a handle reused after ``scheduler.enabled=false`` would
    render without the scheduler from then on.
    """

    def run(
        values: Json | None = None, *, namespace: str = NAMESPACE, release: str = RELEASE
    ) -> Manifests:
        with helm.Chart.load(CHART) as chart:
            rendered = chart.render(
                values or {}, name=release, namespace=namespace, is_install=True
            )
        return parse(rendered)

    return run


def values_file(name: str) -> Json:
    loaded: Json = yaml.safe_load((CHART / name).read_text(encoding="utf-8"))
    return loaded


# The scenarios every structural test runs over: name -> values.
SCENARIOS: dict[str, Json] = {
    "default": {},
    "volcano": values_file("values-volcano.yaml"),
    "no-scheduler": {"scheduler": {"enabled": False}},
    "no-device-plugin": {"devicePlugin": {"enabled": False}},
    "no-exporter": {"exporter": {"enabled": False}},
    "cert-manager": {"scheduler": {"webhook": {"tls": {"mode": "certManager"}}}},
    "user-secret": {
        "scheduler": {
            "webhook": {"tls": {"mode": "secret", "secretName": "my-tls", "caBundle": "Q0E="}}
        }
    },
    "no-webhook": {"scheduler": {"webhook": {"enabled": False}}},
    "extender-mtls": {"scheduler": {"extender": {"tls": {"enabled": True}}}},
    "two-replicas": {"scheduler": {"replicas": 2}},
    "monitoring": {
        "scheduler": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "devicePlugin": {"serviceMonitor": {"enabled": True}},
        "exporter": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    },
    "simulated": {
        "devicePlugin": {"backend": "sim", "simDir": "/var/lib/vnpu/sim-node"},
        "exporter": {"backend": "sim", "simDir": "/var/lib/vnpu/sim-node"},
    },
    "soft-mode": {"devicePlugin": {"hamiVnpuCore": "true", "vnpuMode": "runtime"}},
    "runtime-class": {
        "runtimeClass": {"create": True},
        "global": {"imagePullSecrets": ["regcred"]},
    },
    "external-device-config": {
        "global": {"deviceConfig": {"create": False, "name": "hami-device"}}
    },
    "teams": {
        "scheduler": {
            "tenants": {
                "teams": [
                    {
                        "name": "vision",
                        "namespaces": ["vision"],
                        "nominal": {"Ascend310P-aicore": 16},
                        "borrowingLimit": {"Ascend310P-aicore": 8},
                    }
                ]
            }
        }
    },
    "no-quotas": {"scheduler": {"quotas": {"enabled": False}}},
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking ``scenario`` run once per entry of SCENARIOS."""
    if "scenario" in metafunc.fixturenames:
        metafunc.parametrize("scenario", list(SCENARIOS))


@pytest.fixture(scope="session")
def rendered_scenarios(render: Render) -> dict[str, Manifests]:
    """Each scenario rendered once per session (rendering makes RSA keys: not free)."""
    return {}


@pytest.fixture
def manifests(scenario: str, render: Render, rendered_scenarios: dict[str, Manifests]) -> Manifests:
    if scenario not in rendered_scenarios:
        rendered_scenarios[scenario] = render(SCENARIOS[scenario])
    return rendered_scenarios[scenario]


@pytest.fixture(scope="session")
def default(render: Render) -> Manifests:
    return render()
