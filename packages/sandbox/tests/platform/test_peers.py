"""What ``vnpu-sandbox up --scheduler volcano`` makes of a peer's build and chart, with no
sandbox running: the build's refusals, the documents created of the rendered chart, the
command lines (in-cluster, in a mount namespace of their own), the flags ``up`` refuses, and
``scripts/peers-bin.sh``'s refusals (a wrong sha256, an unknown peer, a source tree that is
not one). With ``make peers-bin`` run, the same from Volcano's real chart.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_sandbox import cli
from vnpu_sandbox.platform import certificates, hami, layout, peers, volcano

ROOT = Path(__file__).resolve().parents[4]
Json = dict[str, Any]


def _deployment(name: str, args: list[str], env: list[Json] | None = None) -> Json:
    container: Json = {"name": name, "image": "x", "args": args}
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": volcano.NAMESPACE},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


CHART: list[Json] = [
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "volcano-scheduler"}},
    _deployment(
        volcano.SCHEDULER,
        ["--logtostderr", "--scheduler-conf=/volcano.scheduler/x.conf", "-v=3", "2>&1"],
        [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {}}}],
    ),
    _deployment(volcano.CONTROLLERS, ["--leader-elect=false", "2>&1"]),
    {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": volcano.CONFIG_MAP},
        "data": {volcano.CONFIG_KEY: "actions: allocate\n"},
    },
    {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "queues.scheduling.volcano.sh"},
    },
    {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "volcano-scheduler-service"}},
]


def _build(tmp_path: Path) -> peers.Build:
    return peers.Build("volcano", tmp_path / "bin", tmp_path / "src", "/usr/bin/unshare")


def _volcano(tmp_path: Path) -> volcano.Volcano:
    where = layout.Layout.at(tmp_path / "sb")
    return volcano.Volcano.at(where, _build(tmp_path), CHART, volcano.Ports(1, 2, 3, 4))


def test_a_missing_build_names_the_command_that_makes_it(tmp_path: Path) -> None:
    with pytest.raises(
        peers.PeerError, match=r"no vc-scheduler, vc-controller-manager in .*make peers-bin"
    ):
        peers.build("volcano", volcano.BINARIES, tmp_path)
    (tmp_path / "bin").mkdir()
    for name in volcano.BINARIES:
        (tmp_path / "bin" / name).write_text("#!/bin/sh\n")
        (tmp_path / "bin" / name).chmod(0o755)
    with pytest.raises(peers.PeerError, match="no volcano source"):
        peers.build("volcano", volcano.BINARIES, tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "go.mod").write_text("module volcano.sh/volcano\n")
    assert peers.build("volcano", volcano.BINARIES, tmp_path).binary("vc-scheduler") == (
        tmp_path / "bin" / "vc-scheduler"
    )


def test_a_file_that_is_not_a_rendered_chart_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "chart.yaml"
    path.write_text("kind: ConfigMap\nmetadata: {name: x}\n")
    with pytest.raises(peers.PeerError, match="no Deployment in it"):
        peers.read_chart(path)
    path.write_text("a: [\n")
    with pytest.raises(peers.PeerError, match="cannot read the rendered chart"):
        peers.read_chart(path)
    with pytest.raises(peers.PeerError, match="cannot read"):
        peers.read_chart(tmp_path / "missing.yaml")


def test_the_chart_gives_its_namespace_crds_accounts_and_config_maps_first(
    tmp_path: Path,
) -> None:
    kinds = [d["kind"] for d in volcano.install_documents(_volcano(tmp_path))]
    assert kinds == ["Namespace", "CustomResourceDefinition", "ServiceAccount", "ConfigMap"]


def test_the_processes_run_the_charts_arguments_in_cluster(tmp_path: Path) -> None:
    peer = _volcano(tmp_path)
    controllers, scheduler = volcano.components_(peer, 6443)
    argv = list(scheduler.argv)
    assert argv[:4] == ["/usr/bin/unshare", "--mount", "--propagation", "private"]
    assert ("--map-root-user" in argv) == (os.geteuid() != 0)
    at = argv.index(f"{volcano.SCHEDULER}-run")
    assert argv[at + 1 : at + 3] == [str(peer.account(volcano.SCHEDULER).run_dir),
                                     os.path.realpath("/var/run")]  # fmt: skip
    inner = argv[at + 3 :]
    account = peer.account(volcano.SCHEDULER)
    assert inner[:7] == [
        "/usr/bin/env",
        "-u",
        "KUBECONFIG",  # the pod's identity, not whoever started the sandbox
        f"HOME={account.run_dir}",
        "KUBERNETES_SERVICE_HOST=127.0.0.1",
        "KUBERNETES_SERVICE_PORT=6443",
        "A=1",
    ]
    assert inner[7:] == [
        str(tmp_path / "bin" / "vc-scheduler"),
        "--logtostderr",
        "-v=3",
        f"--scheduler-conf={peer.config}",
        "--listen-address=127.0.0.1:2",
        "--healthz-address=127.0.0.1:1",
    ]
    assert scheduler.ready_url == "http://127.0.0.1:1/healthz"
    assert controllers.name == volcano.CONTROLLERS
    assert "2>&1" not in controllers.argv
    assert controllers.argv[-2:] == (
        "--listen-address=127.0.0.1:4",
        "--healthz-address=127.0.0.1:3",
    )


def test_an_account_holds_the_ca_and_namespace_at_a_pods_paths(tmp_path: Path) -> None:
    account = _volcano(tmp_path).account(volcano.SCHEDULER)
    ca = tmp_path / "ca.crt"
    ca.write_text("CA")
    peers.prepare_account(account, ca)
    secrets = account.run_dir / "secrets" / "kubernetes.io" / "serviceaccount"
    assert (secrets / "ca.crt").read_text() == "CA"
    assert (secrets / "namespace").read_text() == volcano.NAMESPACE
    assert account.subject == "system:serviceaccount:volcano-system:volcano-scheduler"


def test_a_missing_container_or_config_map_is_named() -> None:
    with pytest.raises(peers.PeerError, match="no Deployment nope"):
        peers.container(CHART, "nope")
    with pytest.raises(peers.PeerError, match="has no container other"):
        peers.container(CHART, volcano.SCHEDULER, "other")
    with pytest.raises(peers.PeerError, match="no ConfigMap nope"):
        peers.config_map(CHART, "nope", "k")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--scheduler", "volcano"], "needs --peer-chart"),
        (["--peer-chart", "x.yaml"], "only with --scheduler volcano"),
        (["--scheduler", "volcano", "--mode", "dra"], "only in classic mode"),
        (["--scheduler", "volcano", "--schedulers", "2"], "only with --scheduler vnpu"),
        (
            ["--scheduler", "volcano", "--rbac", "r.yaml", "--peer-chart", "nope.yaml"],
            "nope.yaml: no such file",
        ),
    ],
)
def test_up_refuses_a_peer_without_what_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    (tmp_path / "r.yaml").write_text("")
    given = [str(tmp_path / f) if f.endswith(".yaml") else f for f in flags]
    assert cli.main(["up", "--dir", str(tmp_path / "sb"), "--no-prometheus", *given]) == 2
    assert message in capsys.readouterr().err


def _peers_bin(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "peers-bin.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"), **env},
    )


def test_peers_bin_refuses_an_archive_with_another_sha256(tmp_path: Path) -> None:
    archives = tmp_path / "archives"
    archives.mkdir()
    (archives / f"hami-{peers.PINNED['hami']}.tar.gz").write_bytes(b"not the pinned archive")
    done = _peers_bin(tmp_path, "hami", VNPU_PEERS_ARCHIVES=str(archives))
    assert done.returncode == 1
    assert "not the pinned" in done.stderr
    assert "refusing to build it" in done.stderr
    assert not (tmp_path / "cache" / "vnpu" / "peers" / "hami" / peers.PINNED["hami"] / "bin" /
                "hami-scheduler").exists()  # fmt: skip


def test_peers_bin_names_what_is_wrong_with_its_input(tmp_path: Path) -> None:
    unknown = _peers_bin(tmp_path, "kube-batch")
    assert unknown.returncode == 2
    assert "unknown peer 'kube-batch'" in unknown.stderr
    missing = _peers_bin(tmp_path, "volcano", VNPU_PEERS_ARCHIVES=str(tmp_path))
    assert missing.returncode == 1
    assert "set VNPU_PEERS_ARCHIVES" in missing.stderr
    assert "https://github.com/volcano-sh/volcano" in missing.stderr
    empty = _peers_bin(tmp_path, "volcano", VNPU_VOLCANO_SOURCE=str(tmp_path))
    assert empty.returncode == 2
    assert "no go.mod there" in empty.stderr


def _rendered(tmp_path: Path, peer: str) -> list[Json]:
    """The peer's real chart as ``make peer-charts`` renders it."""
    rendered = tmp_path / f"{peer}.yaml"
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_chart.py"), "--peer", peer,
         "--output", str(rendered)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return peers.read_chart(rendered)


def test_volcanos_real_chart_gives_what_the_sandbox_runs(tmp_path: Path) -> None:
    try:
        chart_dir = peers.chart_dir("volcano")
    except peers.PeerError as exc:
        pytest.skip(f"Volcano is not built (`make peers-bin`): {exc}")
    chart = _rendered(tmp_path, "volcano")
    assert chart_dir.name == "volcano"
    documents = peers.install_documents(chart, volcano.NAMESPACE)
    crds = {d["metadata"]["name"] for d in documents if d["kind"] == "CustomResourceDefinition"}
    assert {"jobs.batch.volcano.sh", "queues.scheduling.volcano.sh",
            "jobflows.flow.volcano.sh"} <= crds  # fmt: skip
    conf = yaml.safe_load(peers.config_map(chart, volcano.CONFIG_MAP, volcano.CONFIG_KEY))
    deviceshare = next(p for t in conf["tiers"] for p in t["plugins"] if p["name"] == "deviceshare")
    assert deviceshare["arguments"]["deviceshare.NodeLockEnable"] is False
    scheduler = peers.container(chart, volcano.SCHEDULER)
    assert "2>&1" not in peers.arguments(scheduler)


def test_hamis_real_chart_gives_its_webhook_on_loopback_and_keeps_vnpus_device_config(
    tmp_path: Path,
) -> None:
    try:
        peers.chart_dir("hami")
    except peers.PeerError as exc:
        pytest.skip(f"HAMi is not built (`make peers-bin`): {exc}")
    build = peers.Build("hami", tmp_path / "bin", tmp_path / "src", "/usr/bin/unshare")
    where = layout.Layout.at(tmp_path / "sb")
    peer = hami.Hami.at(where, build, _rendered(tmp_path, "hami"), hami.Ports(7, 8, 9))
    documents = hami.install_documents(peer, "Q0E=", "hami-scheduler-device")
    names = {(d["kind"], d["metadata"]["name"]) for d in documents}
    assert ("ConfigMap", "hami-scheduler") in names
    assert ("ConfigMap", "hami-scheduler-device") not in names  # vnpu's is the one
    assert not [d for d in documents if "helm.sh/hook" in d["metadata"].get("annotations", {})]
    webhook = next(d for d in documents if d["kind"] == "MutatingWebhookConfiguration")
    assert [w["clientConfig"] for w in webhook["webhooks"]] == [
        {"url": "https://127.0.0.1:7/webhook", "caBundle": "Q0E="}
    ]
    config = hami.scheduler_configuration(peer)
    assert [e["urlPrefix"] for e in config["extenders"]] == ["https://127.0.0.1:7"]
    assert config["profiles"] == [{"schedulerName": hami.SCHEDULER_NAME}]
    serving = certificates.Pair(tmp_path / "s.crt", tmp_path / "s.key")
    extender, kube = hami.components_(peer, 6443, serving, Path("/k8s/kube-scheduler"))
    argv = list(extender.argv)
    assert "--enable-ascend=true" in argv
    assert "--http_bind=127.0.0.1:7" in argv
    assert f"--device-config-file={peer.device_config}" in argv
    assert not [a for a in argv if a.startswith(("--http_bind=0", "--metrics-bind-address=:"))]
    assert extender.ready_url == "https://127.0.0.1:7/healthz"
    assert "/k8s/kube-scheduler" in kube.argv
    assert f"--config={peer.scheduler_config}" in kube.argv
    assert "--config=/config/config.yaml" not in kube.argv
