"""``vnpu-sandbox kubelet``: flag checking in process, and one real run as a subprocess against
the shared kube-apiserver, as ``system:node:cli-node``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from vnpu_sandbox import cli
from vnpu_sandbox.kubelet import apiclient, command

from .kubeplane import node_kubeconfig


def _args(sock_dir: Path, *extra: str) -> list[str]:
    return [
        "kubelet",
        "--node",
        "cli-node",
        "--kubeconfig",
        str(sock_dir / "no-such-kubeconfig"),
        "--device-plugin-dir",
        str(sock_dir / "plugins"),
        "--pod-resources-socket",
        str(sock_dir / "pr.sock"),
        *extra,
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--node", "Bad_Name"], "--node 'Bad_Name': must be a lowercase DNS subdomain"),
        (["--pod-cidr", "10.0.0.0/33"], "--pod-cidr '10.0.0.0/33'"),
        (["--node-ip", "localhost"], "--node-ip 'localhost'"),
        (["--device-plugin-dir", "/tmp/" + "d" * 120], "too long for a unix socket"),
        (["--max-pods", "0"], "--max-pods 0: must be at least 1"),
    ],
)
def test_bad_flags_are_refused_naming_flag_and_value(
    sock_dir: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(_args(sock_dir, *extra)) == 2
    assert message in capsys.readouterr().err
    assert not (sock_dir / "plugins").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--cpu", "lots"], "'lots' is not a quantity"),
        (["--label", "novalue"], "'novalue' is not KEY=VALUE"),
        (["--heartbeat-seconds", "-1"], "'-1' must not be negative"),
    ],
)
def test_argparse_types_name_the_value(
    sock_dir: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(_args(sock_dir, *extra))
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_kubeconfig_that_cannot_be_read_is_refused(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(_args(sock_dir)) == 2
    assert "no-such-kubeconfig" in capsys.readouterr().err
    assert not (sock_dir / "plugins" / "kubelet.sock").exists()


def test_unreachable_api_server_is_reported(
    sock_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = sock_dir / "nowhere.yaml"
    nowhere.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        ),
        encoding="utf-8",
    )
    assert cli.main([*_args(sock_dir), "--kubeconfig", str(nowhere)]) == 1
    err = capsys.readouterr().err
    assert "cannot start node cli-node" in err
    assert not (sock_dir / "plugins" / "kubelet.sock").exists()


def test_default_pod_cidr_differs_per_node() -> None:
    assert command.default_pod_cidr("node-a") != command.default_pod_cidr("node-b")
    assert command.default_pod_cidr("node-a").endswith(".0/24")


def test_command_runs_restarts_on_sighup_and_stops_on_sigterm(
    sock_dir: Path,
    kube_namespace: Any,
    tmp_path: Path,
    make_plugin: Callable[..., Any],
    wait: Callable[..., None],
) -> None:
    kubeconfig = node_kubeconfig(kube_namespace.plane, "cli-node", tmp_path / "identities")
    plugins = sock_dir / "plugins"
    argv = [
        sys.executable,
        "-m",
        "vnpu_sandbox",
        "kubelet",
        "--node",
        "cli-node",
        "--kubeconfig",
        str(kubeconfig),
        "--device-plugin-dir",
        str(plugins),
        "--pod-resources-socket",
        str(sock_dir / "pr.sock"),
        "--label",
        "pool=cli",
        "--heartbeat-seconds",
        "0",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    api = apiclient.client_from_kubeconfig(str(kube_namespace.kubeconfig))
    core = client.CoreV1Api(api)
    try:
        kubelet_socket = plugins / "kubelet.sock"
        wait(kubelet_socket.exists, timeout=20, what="kubelet.sock from the command")
        node = core.read_node("cli-node")
        assert node.metadata is not None
        assert node.metadata.labels is not None
        assert node.metadata.labels["pool"] == "cli"

        plugin = make_plugin("example.com/npu", {"d0": True})
        plugin.register()

        def published() -> bool:
            status = core.read_node("cli-node").status
            return status is not None and (status.allocatable or {}).get("example.com/npu") == "1"

        wait(published, what="allocatable published by the command")
        before = os.stat(kubelet_socket).st_ino
        process.send_signal(signal.SIGHUP)
        wait(lambda: not plugin.socket.exists(), what="plugin socket removed by the restart")
        wait(
            lambda: kubelet_socket.exists() and os.stat(kubelet_socket).st_ino != before,
            what="new kubelet.sock",
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert not kubelet_socket.exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        stderr = process.stderr.read() if process.stderr else ""
        if process.stderr:
            process.stderr.close()
        apiclient.close_client(api)
    assert "kubelet_restarted node=cli-node" in stderr
