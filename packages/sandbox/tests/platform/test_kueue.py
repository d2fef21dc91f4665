"""What ``vnpu-sandbox up --kueue`` makes of Kueue's module, with no sandbox running.

The build's refusals (each naming ``make kueue-bin``), the CRDs and webhook configurations
read from a small module tree written here (every Service reference becomes a loopback URL
on the sandbox CA; only the webhooks of Kueue's kinds and of Jobs are kept), Kueue's
configuration and command line, and the same documents from the real module when
``make kueue-bin`` has run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_sandbox import cli
from vnpu_sandbox.platform import certificates, controlplane, kueue, layout

URL = "https://127.0.0.1:9443"
BUNDLE = "Q0E="


def _fake_build(tmp_path: Path) -> kueue.Build:
    """A module tree shaped like Kueue's: two CRDs, one converted by a patch, and webhooks of
    Kueue's kinds, Jobs, pods and JobSets."""
    crds = tmp_path / "module" / kueue.CRD_DIR
    (crds / "bases").mkdir(parents=True)
    (crds / "patches").mkdir()
    for plural in ("workloads", "topologies"):
        crd = {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
            "spec": {"group": "kueue.x-k8s.io", "names": {"plural": plural}},
        }
        (crds / "bases" / f"{plural}.yaml").write_text("---\n" + yaml.safe_dump(crd))
    patch = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "workloads.kueue.x-k8s.io"},
        "spec": {
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {
                        "service": {"namespace": "system", "name": "svc", "path": "/convert"}
                    },
                    "conversionReviewVersions": ["v1"],
                },
            }
        },
    }
    (crds / "patches" / "webhook_in_workloads.yaml").write_text(yaml.safe_dump(patch))
    kustomization = {
        "resources": ["bases/workloads.yaml", "bases/topologies.yaml"],
        "patches": [{"path": "patches/webhook_in_workloads.yaml"}, {"patch": "inline, skipped"}],
    }
    (crds / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))

    def hook(name: str, group: str, resources: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "clientConfig": {"service": {"name": "svc", "namespace": "system", "path": f"/{name}"}},
            "rules": [
                {
                    "apiGroups": [group],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": resources,
                }
            ],
        }

    webhooks = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                hook("mjob", "batch", ["jobs"]),
                hook("mpod", "", ["pods"]),
                hook("mjobset", "jobset.x-k8s.io", ["jobsets"]),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "validating-webhook-configuration"},
            "webhooks": [
                hook("vworkload", "kueue.x-k8s.io", ["workloads", "workloads/status"]),
                hook("vdeployment", "apps", ["deployments"]),
            ],
        },
    ]
    manifests = tmp_path / "module" / kueue.WEBHOOK_MANIFESTS
    manifests.parent.mkdir(parents=True)
    manifests.write_text(yaml.safe_dump_all(webhooks))
    return kueue.Build(tmp_path / "kueue", tmp_path / "module", "/usr/bin/unshare")


def _installed(tmp_path: Path, module: bool = True) -> Path:
    """A cache directory as ``make kueue-bin`` leaves it (``module``: with the module-dir
    record), around the fake module."""
    root = tmp_path / "cache"
    (root / "bin").mkdir(parents=True)
    binary = root / "bin" / "kueue"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    if module:
        (root / "module-dir").write_text(f"{tmp_path / 'module'}\n")
    return root


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("nothing", "no kueue in"),
        ("no module record", "module-dir"),
        ("module cache cleaned", "the Go module cache was cleaned?"),
    ],
)
def test_a_missing_build_names_the_command_that_makes_it(
    tmp_path: Path, shape: str, message: str
) -> None:
    if shape == "nothing":
        root = tmp_path / "cache"
    else:
        root = _installed(tmp_path, module=shape != "no module record")
    with pytest.raises(kueue.KueueError) as raised:
        kueue.build(root)
    assert message in str(raised.value)
    assert "`make kueue-bin`" in str(raised.value)


def test_a_complete_build_is_found(tmp_path: Path) -> None:
    _fake_build(tmp_path)
    built = kueue.build(_installed(tmp_path))
    assert built.binary == tmp_path / "cache" / "bin" / "kueue"
    assert built.crds == tmp_path / "module" / "config" / "components" / "crd"


def test_up_kueue_without_the_build_fails_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    k8s = tmp_path / "k8s"
    k8s.mkdir()
    for name in controlplane.BINARIES:
        (k8s / name).write_text("#!/bin/sh\n")
        (k8s / name).chmod(0o755)
    monkeypatch.setenv(controlplane.BIN_ENV, str(k8s))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    directory = tmp_path / "sb"
    assert cli.main(["up", "--kueue", "--dir", str(directory), "--no-prometheus"]) == 2
    err = capsys.readouterr().err
    assert "--kueue: no kueue in" in err
    assert "make kueue-bin" in err
    assert not (directory / "sandbox.json").exists()


def test_crds_get_their_conversion_webhook_on_loopback(tmp_path: Path) -> None:
    crds = kueue.crd_documents(_fake_build(tmp_path), URL, BUNDLE)
    by_name = {c["metadata"]["name"]: c for c in crds}
    assert list(by_name) == ["workloads.kueue.x-k8s.io", "topologies.kueue.x-k8s.io"]
    conversion = by_name["workloads.kueue.x-k8s.io"]["spec"]["conversion"]
    assert conversion == {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"{URL}/convert", "caBundle": BUNDLE},
            "conversionReviewVersions": ["v1"],
        },
    }
    assert "conversion" not in by_name["topologies.kueue.x-k8s.io"]["spec"]


def test_only_the_webhooks_of_kueue_kinds_and_jobs_are_registered(tmp_path: Path) -> None:
    documents = kueue.webhook_configurations(_fake_build(tmp_path), URL, BUNDLE)
    kept = {d["metadata"]["name"]: [w["name"] for w in d["webhooks"]] for d in documents}
    assert kept == {
        "kueue-mutating-webhook-configuration": ["mjob"],
        "kueue-validating-webhook-configuration": ["vworkload"],
    }
    job = documents[0]["webhooks"][0]
    assert job["clientConfig"] == {"url": f"{URL}/mjob", "caBundle": BUNDLE}
    assert job["failurePolicy"] == "Fail"


def _kueue(tmp_path: Path) -> kueue.Kueue:
    where = layout.Layout.at(tmp_path / "sb")
    return kueue.Kueue.at(where, _fake_build(tmp_path), kueue.Ports(9443, 8081, 8443))


def test_the_configuration_keeps_everything_on_loopback_with_the_sandbox_certificate(
    tmp_path: Path,
) -> None:
    queueing = _kueue(tmp_path)
    config = kueue.configuration(queueing)
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["webhook"] == {
        "host": "127.0.0.1",
        "port": 9443,
        "certDir": str(queueing.cert_dir),
    }
    assert config["health"] == {"healthProbeBindAddress": "127.0.0.1:8081"}
    assert config["metrics"] == {"bindAddress": "127.0.0.1:8443"}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["integrations"] == {"frameworks": ["batch/job"]}
    assert config["leaderElection"] == {"leaderElect": False}


def test_prepare_writes_the_configuration_and_both_certificate_copies(tmp_path: Path) -> None:
    pki = certificates.write_pki(tmp_path / "pki", {})
    queueing = _kueue(tmp_path)
    kueue.prepare(queueing, pki)
    assert yaml.safe_load(queueing.config.read_text()) == kueue.configuration(queueing)
    for directory in (queueing.cert_dir, queueing.etc_overlay / "kueue" / "metrics" / "certs"):
        assert (directory / "tls.crt").read_bytes() == pki.serving.cert.read_bytes()
        assert (directory / "tls.key").read_bytes() == pki.serving.key.read_bytes()
        assert (directory / "tls.key").stat().st_mode & 0o777 == 0o600


def test_the_manager_runs_with_the_overlay_in_its_own_mount_namespace(tmp_path: Path) -> None:
    queueing = _kueue(tmp_path)
    component = kueue.component(queueing, Path("/sb/admin.yaml"))
    argv = list(component.argv)
    assert argv[:4] == ["/usr/bin/unshare", "--mount", "--propagation", "private"]
    assert ("--map-root-user" in argv) == (os.geteuid() != 0)
    assert argv[argv.index("kueue-etc") + 1] == str(queueing.etc_overlay)
    assert argv[-3:] == [
        str(queueing.build.binary),
        f"--config={queueing.config}",
        "--kubeconfig=/sb/admin.yaml",
    ]
    assert component.ready_url == "http://127.0.0.1:8081/readyz"


def test_the_real_module_gives_every_crd_and_the_webhooks_of_jobs() -> None:
    try:
        built = kueue.build()
    except kueue.KueueError as exc:
        pytest.skip(f"Kueue is not built (`make kueue-bin`): {exc}")
    crds = kueue.crd_documents(built, URL, BUNDLE)
    assert len(crds) == 11
    converted = {c["metadata"]["name"].split(".")[0] for c in crds if "conversion" in c["spec"]}
    assert converted == {
        "localqueues",
        "clusterqueues",
        "cohorts",
        "workloads",
        "multikueueclusters",
    }
    documents = kueue.webhook_configurations(built, URL, BUNDLE)
    names = {w["name"] for d in documents for w in d["webhooks"]}
    assert {"mjob.kb.io", "vjob.kb.io", "vworkload.kb.io", "vclusterqueue.kb.io"} <= names
    assert not {"mpod.kb.io", "vpod.kb.io", "mdeployment.kb.io", "mjobset.kb.io"} & names
    for document in documents:
        for webhook in document["webhooks"]:
            assert webhook["clientConfig"]["url"].startswith(f"{URL}/"), webhook["name"]
