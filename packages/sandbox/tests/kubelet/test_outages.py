"""The simulated kubelet while kube-apiserver is away: a private plane whose kube-apiserver the
test kills and starts again on the same port and etcd, as after a crash and a restart."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from vnpu_sandbox.kubelet import apiclient, kubelet, nodestatus

from .kubeplane import Outages, Pods

RES = "example.com/npu"
API = "kube-apiserver"


def _logged(caplog: pytest.LogCaptureFixture, *parts: str) -> bool:
    """Whether one log record holds every one of ``parts``."""
    return any(all(p in r.getMessage() for p in parts) for r in list(caplog.records))


@pytest.fixture
def private_pods(private_plane: Outages) -> Iterator[Pods]:
    """A namespace on the private plane, as the admin sees it; emptied after the test."""
    space = private_plane.plane.namespace("outages")
    api = apiclient.client_from_kubeconfig(str(space.kubeconfig))
    try:
        yield Pods(client.CoreV1Api(api), space.name)
    finally:
        apiclient.close_client(api)
        space.clear()


def test_registration_waits_for_an_api_server_that_comes_up_late(
    private_plane: Outages,
    private_kubeconfig: Path,
    sock_dir: Path,
    node_name: str,
    caplog: pytest.LogCaptureFixture,
    wait: Callable[..., None],
) -> None:
    private_plane.kill(API)
    api = apiclient.client_from_kubeconfig(str(private_kubeconfig))
    config = kubelet.KubeletConfig(
        nodestatus.NodeIdentity(node_name),
        device_plugin_dir=sock_dir / "plugins",
        pod_resources_socket=sock_dir / "pr" / "kubelet.sock",
        heartbeat_seconds=0,
        register_timeout_seconds=20,
    )
    node = kubelet.Kubelet(config, api)
    started = threading.Thread(target=node.start)
    started.start()
    try:
        wait(
            lambda: _logged(caplog, "node_register_retry", f"node={node_name}"),
            what="a failed attempt to register the node",
        )
        assert started.is_alive()
        private_plane.start(API)
        started.join(timeout=20)
        assert not started.is_alive()
        registered = private_plane.plane.request("GET", f"/api/v1/nodes/{node_name}")
        assert registered["metadata"]["name"] == node_name
    finally:
        started.join(timeout=20)
        node.stop()
        apiclient.close_client(api)


def test_a_delete_and_a_status_that_failed_while_the_api_was_away_land_once_it_is_back(
    private_plane: Outages,
    private_pods: Pods,
    make_private_kubelet: Callable[..., kubelet.Kubelet],
    make_plugin: Callable[..., Any],
    node_name: str,
    caplog: pytest.LogCaptureFixture,
    wait: Callable[..., None],
) -> None:
    caplog.set_level(logging.DEBUG, logger="vnpu_sandbox.kubelet")
    pods = private_pods
    # Retried every second rather than every 10 s, so the test does not wait out the period.
    node = make_private_kubelet(status_sync_seconds=1.0)
    plugin = make_plugin(RES, {"d0": True, "d1": True})
    plugin.register()
    wait(lambda: node.capacity().get(RES) == (2, 2))
    pods.create(node_name, "leaving", {RES: "1"}, terminationGracePeriodSeconds=30)
    wait(lambda: pods.phase("leaving") == "Running")

    entered, release = threading.Event(), threading.Event()

    def hold_allocate() -> None:
        entered.set()
        release.wait(20)

    plugin.before_allocate = hold_allocate  # the kubelet's pod worker waits in Allocate
    try:
        pods.create(node_name, "arriving", {RES: "1"})
        assert entered.wait(10)
        version = pods.delete("leaving")  # graceful: the kubelet has to delete it for good
        wait(
            lambda: _logged(caplog, f"pod={pods.namespace}/leaving resource_version={version}"),
            what="the deletion in the kubelet's pod watch",
        )
        private_plane.kill(API)
    finally:
        release.set()
    # The worker admits "arriving" and finishes "leaving" while nothing answers.
    wait(
        lambda: (
            _logged(caplog, "pod_status_write_failed", f"{pods.namespace}/arriving")
            and _logged(caplog, "pod_delete_failed", f"{pods.namespace}/leaving")
        ),
        what="the status write and the delete failing",
    )
    private_plane.start(API)
    wait(lambda: pods.phase("leaving") is None, what="the deleted pod gone for good")
    wait(lambda: pods.phase("arriving") == "Running", what="the admitted pod Running")
    arriving = node.allocation(pods.namespace, "arriving")
    assert arriving is not None
    assert arriving.containers[0].device_ids(RES) == ("d1",)
    assert node.allocation(pods.namespace, "leaving") is None
