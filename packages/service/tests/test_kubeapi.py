"""``kubeapi``: the real ``kubernetes`` client against a loopback server, and what its failures become."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from vnpu_service import kubeapi


def _read_node(kubeconfig: Path, name: str, timeout: float = 5.0) -> dict[str, Any]:
    """GET a node as the services do; every failure translated at this boundary."""
    api_client = kubeapi.client(kubeconfig)
    try:
        core = kubernetes.client.CoreV1Api(api_client)
        return kubeapi.fetch(
            lambda: core.read_node(name, _preload_content=False, _request_timeout=timeout),
            f"get node {name}",
        )
    finally:
        kubeapi.close(api_client)


TABLE = [
    # status, reason the API sends, class, retryable
    (400, "BadRequest", kubeapi.Invalid, False),
    (403, "Forbidden", kubeapi.Invalid, False),
    (404, "NotFound", kubeapi.NotFound, False),
    (409, "Conflict", kubeapi.Conflict, True),
    (410, "Expired", kubeapi.Expired, True),
    (422, "Invalid", kubeapi.Invalid, False),
    (429, "TooManyRequests", kubeapi.Unavailable, True),
    (500, "InternalError", kubeapi.Unavailable, True),
    (503, "ServiceUnavailable", kubeapi.Unavailable, True),
    (504, "Timeout", kubeapi.Unavailable, True),
    (401, "Unauthorized", kubeapi.ApiError, False),
    (405, "MethodNotAllowed", kubeapi.ApiError, False),
    (415, "UnsupportedMediaType", kubeapi.ApiError, False),
]


@pytest.mark.parametrize(("status", "reason", "cls", "retryable"), TABLE)
def test_a_refusal_becomes_the_class_its_status_names(
    kit: Any,
    fake_api: Any,
    kubeconfig: Path,
    status: int,
    reason: str,
    cls: type[kubeapi.ApiError],
    retryable: bool,
) -> None:
    fake_api.answers["/api/v1/nodes/n1"] = kit.Answer(
        status, kit.status_body(status, reason, f"the server says {status}")
    )
    with pytest.raises(kubeapi.ApiError) as caught:
        _read_node(kubeconfig, "n1")
    error = caught.value
    assert type(error) is cls
    assert (error.status, error.reason, error.retryable) == (status, reason, retryable)
    assert error.message == f"get node n1: the server says {status}"
    assert str(error) == f"Kubernetes API {status} {reason}: get node n1: the server says {status}"
    assert isinstance(error, kubeapi.KubeError)
    assert isinstance(error.__cause__, kubernetes.client.exceptions.ApiException)


def test_a_refusal_without_a_status_body_keeps_the_http_reason_and_the_body(
    kit: Any, fake_api: Any, kubeconfig: Path
) -> None:
    page = b"<html>" + b"x" * 500 + b"</html>"
    fake_api.answers["/api/v1/nodes/n1"] = kit.Answer(502, page, content_type="text/html")
    with pytest.raises(kubeapi.Unavailable) as caught:
        _read_node(kubeconfig, "n1")
    assert (caught.value.status, caught.value.reason) == (502, "Bad Gateway")
    assert caught.value.message == "get node n1: " + page.decode()[:200]


def test_a_status_body_without_a_message_says_the_reason(
    kit: Any, fake_api: Any, kubeconfig: Path
) -> None:
    fake_api.answers["/api/v1/nodes/n1"] = kit.Answer(
        409, kit.status_body(409, "AlreadyExists", "")
    )
    with pytest.raises(kubeapi.Conflict) as caught:
        _read_node(kubeconfig, "n1")
    assert caught.value.message == "get node n1: AlreadyExists"


def test_nothing_listening_is_unavailable_with_status_0(tmp_path: Path, kit: Any) -> None:
    with socket.socket() as probe:  # a port that was free a moment ago and has no listener
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = kit.write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    with pytest.raises(kubeapi.Unavailable) as caught:
        _read_node(config, "n1")
    assert caught.value.status == 0
    assert caught.value.reason == "MaxRetryError"
    assert caught.value.message.startswith("get node n1: ")
    assert caught.value.retryable


def test_an_answer_that_never_comes_is_unavailable(
    kit: Any, fake_api: Any, kubeconfig: Path
) -> None:
    fake_api.answers["/api/v1/nodes/n1"] = kit.Answer(200, b"{}", delay=10)
    with pytest.raises(kubeapi.Unavailable) as caught:
        _read_node(kubeconfig, "n1", timeout=0.1)
    assert caught.value.status == 0
    assert "timed out" in caught.value.message.lower()


def test_an_answer_cut_off_midway_is_unavailable(kit: Any, fake_api: Any, kubeconfig: Path) -> None:
    fake_api.answers["/api/v1/nodes/n1"] = kit.Answer(200, b'{"kind": "Node", "metadata"', cut=True)
    with pytest.raises(kubeapi.Unavailable) as caught:
        _read_node(kubeconfig, "n1")
    assert caught.value.status == 0
    assert caught.value.reason == "ProtocolError"
    assert caught.value.message.startswith("get node n1: ")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"<html>not json</html>", "the answer is not JSON"),
        (b"", "the answer is not JSON"),
        (b"[1, 2]", "the answer is not a JSON object"),
        (b'"text"', "the answer is not a JSON object"),
    ],
)
def test_an_unreadable_answer_is_unavailable(
    kit: Any, fake_api: Any, kubeconfig: Path, body: bytes, problem: str
) -> None:
    fake_api.answers["/api/v1/nodes/n1"] = kit.Answer(200, body)
    with pytest.raises(kubeapi.Unavailable) as caught:
        _read_node(kubeconfig, "n1")
    assert (caught.value.status, caught.value.reason) == (0, "BadResponse")
    assert caught.value.message.startswith(f"get node n1: {problem}")


def test_an_answer_is_the_json_the_api_sent(kit: Any, fake_api: Any, kubeconfig: Path) -> None:
    node = {"kind": "Node", "metadata": {"name": "n1", "annotations": {"a": "b"}}}
    fake_api.answers["/api/v1/nodes/n1"] = kit.Answer(200, json.dumps(node).encode())
    assert _read_node(kubeconfig, "n1") == node


def test_the_error_table_without_an_answer_object() -> None:
    assert type(kubeapi.error_for(0, "x", "m")) is kubeapi.Unavailable
    assert type(kubeapi.error_for(599, "x", "m")) is kubeapi.Unavailable
    assert type(kubeapi.error_for(418, "x", "m")) is kubeapi.ApiError
    assert type(kubeapi.error_for(302, "x", "m")) is kubeapi.ApiError


def test_other_transport_failures_are_unavailable() -> None:
    error = kubeapi.translate(ConnectionResetError("reset by peer"), "list pods")
    assert type(error) is kubeapi.Unavailable
    assert (error.status, error.reason, error.message) == (
        0,
        "ConnectionResetError",
        "list pods: reset by peer",
    )


def test_a_client_uses_the_kubeconfig_and_the_pool_size(kubeconfig: Path, fake_api: Any) -> None:
    api_client = kubeapi.client(kubeconfig, pool_size=7)
    try:
        assert api_client.configuration.host == fake_api.url
        assert api_client.configuration.connection_pool_maxsize == 7
    finally:
        kubeapi.close(api_client)
    default = kubeapi.client(kubeconfig)
    try:
        assert default.configuration.connection_pool_maxsize == (
            kubernetes.client.Configuration().connection_pool_maxsize
        )
    finally:
        kubeapi.close(default)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n", "current-context"),
        ("[]\n", "list indices"),
        ("clusters: [\n", "while parsing"),
        ("", "is empty"),
    ],
)
def test_a_bad_kubeconfig_is_a_config_error_naming_the_file(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(kubeapi.ConfigError) as caught:
        kubeapi.client(path)
    assert caught.value.source == str(path)
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"{path}: ")
    assert not caught.value.retryable


def test_a_missing_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "nowhere"
    with pytest.raises(kubeapi.ConfigError) as caught:
        kubeapi.client(path)
    assert caught.value.source == str(path)


def test_outside_a_cluster_the_service_account_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(kubeapi.ConfigError) as caught:
        kubeapi.client(None)
    assert caught.value.source == "in-cluster service account"
    assert "not set" in caught.value.problem
