"""Registration, health and device assignment over real unix sockets, without an API server.

A ``DeviceManager`` and a ``RegistrationServer`` run as the kubelet runs them; plugins from
``conftest`` register, stream devices and answer the admission calls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from vnpu_sandbox.kubelet import admission, checkpoint, devicemanager, errors, registration

RES = "example.com/npu"


class Node:
    """The device-manager half of a kubelet, with a counter of change notifications."""

    def __init__(self, plugin_dir: Path, grace: float = 300.0) -> None:
        self.changes = 0
        self._lock = threading.Lock()
        self.plugin_dir = plugin_dir
        self.devices = devicemanager.DeviceManager(plugin_dir, self._changed, grace)
        self.server = registration.RegistrationServer(plugin_dir, self.devices, dial_timeout=2)

    def _changed(self) -> None:
        with self._lock:
            self.changes += 1

    def start(self) -> Node:
        registration.remove_sockets(self.plugin_dir)
        self.devices.restore()
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.devices.close()

    def restart(self) -> None:
        self.server.stop()
        registration.remove_sockets(self.plugin_dir)
        self.devices.forget_endpoints()
        self.server = registration.RegistrationServer(self.plugin_dir, self.devices, dial_timeout=2)
        self.server.start()


@pytest.fixture
def node(sock_dir: Path) -> Iterator[Node]:
    (sock_dir / "plugins").mkdir(exist_ok=True)
    running = Node(sock_dir / "plugins").start()
    yield running
    running.stop()


def _pod(
    uid: str, *containers: tuple[str, int], init: tuple[tuple[str, int], ...] = ()
) -> dict[str, Any]:
    def spec(name: str, count: int) -> dict[str, Any]:
        return {"name": name, "resources": {"limits": {RES: str(count)}}}

    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "default"},
        "spec": {
            "initContainers": [spec(n, c) for n, c in init],
            "containers": [spec(n, c) for n, c in containers],
        },
    }


def _ids(node: Node, uid: str) -> dict[str, tuple[str, ...]]:
    return {e.container: e.ids() for e in node.devices.entries(uid)}


def test_registration_publishes_capacity_and_allocatable(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"npu-0": True, "npu-1": True, "npu-2": False})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (3, 2), what="capacity 3, allocatable 2")
    assert node.changes >= 1
    saved = checkpoint.load(node.plugin_dir / checkpoint.CHECKPOINT_NAME)
    assert saved is not None
    assert saved.registered == {RES: ("npu-0", "npu-1")}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"version": "v1alpha"},
            'requested API version "v1alpha" is not supported by kubelet. Supported versions are ["v1beta1"]',
        ),
        ({"resource": "npu"}, 'the ResourceName "npu" is invalid: it has no vendor domain'),
        ({"resource": "kubernetes.io/npu"}, 'the ResourceName "kubernetes.io/npu" is invalid'),
    ],
)
def test_bad_registrations_are_refused_with_the_kubelet_message(
    node: Node, make_plugin: Callable[..., Any], kwargs: dict[str, str], message: str
) -> None:
    plugin = make_plugin(RES, {"npu-0": True})
    with pytest.raises(grpc.RpcError) as info:
        plugin.register(**kwargs)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert str(info.value.details()).startswith(message)
    assert node.devices.capacity() == {}
    plugin.register()  # the kubelet keeps serving after a refusal
    assert RES in node.devices.capacity()


def test_registration_without_a_plugin_socket_is_refused(
    node: Node, make_plugin: Callable[..., Any]
) -> None:
    plugin = make_plugin(RES, {"npu-0": True})
    plugin.stop()
    with pytest.raises(grpc.RpcError) as info:
        plugin.register()
    assert "failed to dial device plugin: no unix socket at" in str(info.value.details())
    with pytest.raises(errors.RegistrationError, match="must be a socket file name"):
        registration.endpoint_path(node.plugin_dir, "../escape.sock")


def test_health_changes_are_republished(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"npu-0": True, "npu-1": True})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (2, 2))
    before = node.changes
    plugin.set_health("npu-1", False)
    wait(lambda: node.devices.capacity().get(RES) == (2, 1), what="npu-1 unhealthy")
    plugin.set_health("npu-1", True)
    wait(lambda: node.devices.capacity().get(RES) == (2, 2), what="npu-1 healthy again")
    assert node.changes >= before + 2


def test_stream_end_makes_devices_unhealthy_then_grace_drops_the_resource(
    sock_dir: Path, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    (sock_dir / "plugins").mkdir(exist_ok=True)
    short = Node(sock_dir / "plugins", grace=0.5).start()
    try:
        plugin = make_plugin(RES, {"npu-0": True, "npu-1": True})
        plugin.register()
        wait(lambda: short.devices.capacity().get(RES) == (2, 2))
        assert isinstance(
            admission.admit(_pod("holder", ("main", 1)), short.devices), admission.Admitted
        )
        plugin.end_streams()
        wait(
            lambda: short.devices.capacity().get(RES) == (2, 0), what="capacity kept, allocatable 0"
        )
        wait(
            lambda: short.devices.capacity().get(RES) == (0, 0), what="resource dropped after grace"
        )
        late = admission.admit(_pod("late", ("main", 1)), short.devices)
        assert isinstance(late, admission.Rejected)
        assert "cannot allocate unregistered device example.com/npu" in late.message
        plugin.serve()
        plugin.register()
        wait(lambda: short.devices.capacity().get(RES) == (2, 2), what="back after re-registration")
    finally:
        short.stop()


def test_vanished_socket_makes_devices_unhealthy(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"npu-0": True})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (1, 1))
    plugin.socket.unlink()
    wait(lambda: node.devices.capacity().get(RES) == (1, 0), what="socket gone -> unhealthy")


def test_re_registration_replaces_the_endpoint(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    first = make_plugin(RES, {"npu-0": True})
    first.register()
    wait(lambda: node.devices.capacity().get(RES) == (1, 1))
    second = make_plugin(RES, {"a": True, "b": True, "c": True}, endpoint="second.sock")
    second.register()
    wait(lambda: node.devices.capacity().get(RES) == (3, 3), what="second plugin's devices")
    first.set_health("npu-0", False)  # the old endpoint is no longer listened to
    outcome = admission.admit(_pod("u1", ("main", 1)), node.devices)
    assert isinstance(outcome, admission.Admitted)
    assert _ids(node, "u1") == {"main": ("a",)}
    assert len(second.calls("Allocate")) == 1
    assert first.calls("Allocate") == []
    assert node.devices.capacity().get(RES) == (3, 3)


def test_pods_get_the_first_free_devices_in_order_and_one_allocate_per_container(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d2": True, "d0": True, "d1": True, "d3": True})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (4, 4))
    first = admission.admit(_pod("u1", ("a", 1), ("b", 2)), node.devices)
    second = admission.admit(_pod("u2", ("main", 1)), node.devices)
    assert isinstance(first, admission.Admitted)
    assert isinstance(second, admission.Admitted)
    assert _ids(node, "u1") == {"a": ("d0",), "b": ("d1", "d2")}
    assert _ids(node, "u2") == {"main": ("d3",)}
    requests = plugin.calls("Allocate")
    assert [[list(c.devices_ids) for c in r.container_requests] for r in requests] == [
        [["d0"]],
        [["d1", "d2"]],
        [["d3"]],
    ]
    assert first.entries[0].response.envs["VISIBLE_DEVICES"] == "d0"


def test_not_enough_devices_rejects_with_the_kubelet_message(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True, "d1": False})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (2, 1))
    outcome = admission.admit(_pod("u1", ("main", 2)), node.devices)
    assert outcome == admission.Rejected(
        "UnexpectedAdmissionError",
        f"Allocate failed due to requested number of devices unavailable for {RES}. "
        "Requested: 2, Available: 1, which is unexpected",
    )
    assert plugin.calls("Allocate") == []


def test_preferred_allocation_is_honoured_when_valid(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(
        RES,
        {f"d{i}": True for i in range(4)},
        preferred=lambda available, size: ["bogus", *reversed(available)][: size + 1],
    )
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (4, 4))
    assert isinstance(admission.admit(_pod("u1", ("main", 2)), node.devices), admission.Admitted)
    (request,) = plugin.calls("GetPreferredAllocation")
    (container,) = request.container_requests
    assert list(container.available_deviceIDs) == ["d0", "d1", "d2", "d3"]
    assert list(container.must_include_deviceIDs) == []
    assert container.allocation_size == 2
    assert _ids(node, "u1") == {"main": ("d2", "d3")}


def test_init_container_devices_are_reused_by_app_containers(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True, "d1": True, "d2": True})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (3, 3))
    outcome = admission.admit(_pod("u1", ("main", 2), init=(("prep", 1),)), node.devices)
    assert isinstance(outcome, admission.Admitted)
    assert _ids(node, "u1") == {"prep": ("d0",), "main": ("d0", "d1")}


def test_allocate_error_rejects_and_resources_without_a_plugin_are_ignored(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True}, allocate_error="chip d0 is broken")
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (1, 1))
    outcome = admission.admit(_pod("u1", ("main", 1)), node.devices)
    assert isinstance(outcome, admission.Rejected)
    assert outcome.message == (
        "Allocate failed due to rpc error: code = Internal desc = chip d0 is broken, which is unexpected"
    )
    plain = {
        "metadata": {"uid": "u2"},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {"other.io/x": "3"}}}]},
    }
    assert admission.admit(plain, node.devices) == admission.Admitted(())


def test_pre_start_is_called_when_the_plugin_asks(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True, "d1": True}, pre_start=True)
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (2, 2))
    assert isinstance(admission.admit(_pod("u1", ("main", 2)), node.devices), admission.Admitted)
    (request,) = plugin.calls("PreStartContainer")
    assert list(request.devices_ids) == ["d0", "d1"]


def test_freed_devices_go_to_the_next_pod(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (1, 1))
    assert isinstance(admission.admit(_pod("u1", ("main", 1)), node.devices), admission.Admitted)
    assert isinstance(admission.admit(_pod("u2", ("main", 1)), node.devices), admission.Rejected)
    node.devices.free_pod("u2")
    assert node.devices.free_pod("u1")
    assert isinstance(admission.admit(_pod("u3", ("main", 1)), node.devices), admission.Admitted)
    assert _ids(node, "u3") == {"main": ("d0",)}


def test_restart_forgets_plugins_keeps_assignments_until_re_registration(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True, "d1": True})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (2, 2))
    assert isinstance(admission.admit(_pod("u1", ("main", 1)), node.devices), admission.Admitted)
    node.restart()
    assert not plugin.socket.exists()
    assert (node.plugin_dir / "kubelet.sock").exists()
    assert node.devices.capacity()[RES] == (0, 0)
    outcome = admission.admit(_pod("u2", ("main", 1)), node.devices)
    assert isinstance(outcome, admission.Rejected)
    assert (
        "no healthy devices present; cannot allocate unhealthy devices example.com/npu"
        in outcome.message
    )
    plugin.stop()
    plugin.serve()
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (2, 2), what="re-registered")
    assert _ids(node, "u1") == {"main": ("d0",)}
    assert isinstance(admission.admit(_pod("u3", ("main", 1)), node.devices), admission.Admitted)
    assert _ids(node, "u3") == {"main": ("d1",)}


def test_a_new_device_manager_reads_the_checkpoint(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True, "d1": True})
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (2, 2))
    assert isinstance(admission.admit(_pod("u1", ("main", 1)), node.devices), admission.Admitted)
    fresh = devicemanager.DeviceManager(node.plugin_dir, lambda: None)
    fresh.restore()
    try:
        assert fresh.capacity() == {RES: (0, 0)}
        assert [e.ids() for e in fresh.entries("u1")] == [("d0",)]
        assert fresh.entries("u1")[0].response.envs["VISIBLE_DEVICES"] == "d0"
    finally:
        fresh.close()


def test_preferred_allocation_failure_rejects_with_the_wrapped_rpc_error(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(
        RES, {"d0": True}, preferred=lambda a, n: a, preferred_error="topology unknown"
    )
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (1, 1))
    outcome = admission.admit(_pod("u1", ("main", 1)), node.devices)
    assert outcome == admission.Rejected(
        "UnexpectedAdmissionError",
        "Allocate failed due to device plugin GetPreferredAllocation rpc failed with err: "
        "rpc error: code = Unavailable desc = topology unknown, which is unexpected",
    )


def test_pre_start_failure_is_a_start_failure_of_that_container(
    node: Node, make_plugin: Callable[..., Any], wait: Callable[..., None]
) -> None:
    plugin = make_plugin(RES, {"d0": True}, pre_start=True, pre_start_error="firmware not loaded")
    plugin.register()
    wait(lambda: node.devices.capacity().get(RES) == (1, 1))
    outcome = admission.admit(_pod("u1", ("main", 1)), node.devices)
    assert outcome == admission.StartFailed(
        "main",
        "device plugin PreStartContainer rpc failed with err: "
        "rpc error: code = FailedPrecondition desc = firmware not loaded",
    )
    assert _ids(node, "u1") == {"main": ("d0",)}


def test_an_unreadable_checkpoint_is_ignored(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    path = node.plugin_dir / checkpoint.CHECKPOINT_NAME
    path.write_text('{"Data": {}, "Checksum": 1}')
    fresh = devicemanager.DeviceManager(node.plugin_dir, lambda: None)
    try:
        assert fresh.restore() is False
        assert fresh.capacity() == {}
    finally:
        fresh.close()
    assert "checkpoint_unreadable" in caplog.text
