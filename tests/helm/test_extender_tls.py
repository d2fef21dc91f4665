"""Mutual TLS between kube-scheduler and the extender (scheduler.extender.tls).

Off (the default), the extender listens on loopback over plain HTTP and the Service does not
expose it. On, both ends must agree: vnpu-scheduler's flags name files of the extender's Secret
mounted in its container, the KubeSchedulerConfiguration's tlsConfig names files of the client
Secret mounted in kube-scheduler's, the URL reaches the Service port that reaches the listener,
and the certificates the chart makes complete a handshake as the two ends make it (the
extender requires a client certificate; kube-scheduler checks the server's name against the
URL) and refuse a client without a certificate.
"""

from __future__ import annotations

import base64
import socket
import ssl
import threading
from pathlib import Path
from urllib.parse import urlsplit

import helm_python as helm
import pytest
import yaml

from vnpu_scheduler import settings as scheduler_settings

MTLS = {"scheduler": {"extender": {"tls": {"enabled": True}}}}
SERVER_SECRET = "vnpu-scheduler-extender-tls"
CLIENT_SECRET = "vnpu-scheduler-extender-client"


@pytest.fixture(scope="module")
def mtls(render):
    return render(MTLS)


def extender_config(manifests):
    data = manifests.get("ConfigMap", "vnpu-scheduler-kube-scheduler")["data"]["config.yaml"]
    (extender,) = yaml.safe_load(data)["extenders"]
    return extender


def args(manifests) -> dict[str, str]:
    _, container = manifests.container("vnpu-scheduler")
    found: dict[str, str] = {}
    for arg in container["args"]:
        flag, _, value = arg.partition("=")
        assert flag not in found, f"{flag} given twice"
        found[flag] = value
    return found


def mounted_secret(manifests, container_name: str, path: str) -> tuple[str, str]:
    """(Secret name, key) of the file ``path`` in the container, through its volume mounts."""
    spec, container = manifests.container(container_name)
    for mount in container.get("volumeMounts", []):
        directory = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(directory):
            volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
            assert "secret" in volume, f"{path} is not from a Secret: {volume}"
            assert mount.get("readOnly") is True
            return volume["secret"]["secretName"], path[len(directory) :]
    raise AssertionError(f"{container_name}: {path} is inside no volume mount")


def secret_file(manifests, name: str, key: str) -> bytes:
    return base64.b64decode(manifests.get("Secret", name)["data"][key])


# Off: loopback, plain HTTP, nothing exposed


def test_by_default_the_extender_is_loopback_http_and_not_exposed(default):
    extender = extender_config(default)
    assert extender["urlPrefix"] == "http://127.0.0.1:8888"
    assert extender["enableHTTPS"] is False
    assert "tlsConfig" not in extender
    flags = args(default)
    assert flags["--host"] == "127.0.0.1"
    assert not {f for f in flags if f.startswith("--extender-") or "unauthenticated" in f}
    service = default.get("Service", "vnpu-scheduler")
    assert "extender" not in {p["name"] for p in service["spec"]["ports"]}
    _, container = default.container("vnpu-scheduler")
    assert "extender" not in {p["name"] for p in container["ports"]}
    assert default.find("Secret", SERVER_SECRET) is None
    assert default.find("Secret", CLIENT_SECRET) is None


# On: both ends agree


def test_the_extender_serves_https_on_every_address_with_the_mounted_secret(mtls, tmp_path):
    flags = args(mtls)
    assert flags["--host"] == "0.0.0.0"
    for flag, key in (
        ("--extender-tls-cert", "tls.crt"),
        ("--extender-tls-key", "tls.key"),
        ("--extender-client-ca", "ca.crt"),
    ):
        assert mounted_secret(mtls, "vnpu-scheduler", flags[flag]) == (SERVER_SECRET, key)
    # vnpu-scheduler accepts the command line and turns mutual TLS on with it.
    given = [f"--host={flags['--host']}", f"--port={flags['--port']}"]
    for flag, value in flags.items():
        if flag.startswith("--extender-"):
            local = tmp_path / Path(value).name
            local.write_bytes(secret_file(mtls, SERVER_SECRET, local.name))
            given.append(f"{flag}={local}")
    config = scheduler_settings.from_args(given)
    assert config.extender_tls is True
    assert config.host == "0.0.0.0"


def test_kube_scheduler_calls_the_service_with_its_client_certificate(mtls):
    extender = extender_config(mtls)
    assert extender["enableHTTPS"] is True
    url = urlsplit(extender["urlPrefix"])
    assert (url.scheme, url.hostname, url.path) == ("https", "vnpu-scheduler.kube-system.svc", "")
    # The URL's port is a Service port that leads to the extender's listener.
    service = mtls.get("Service", "vnpu-scheduler")
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == url.port]
    assert port["name"] == "extender"
    _, container = mtls.container("vnpu-scheduler")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[port["targetPort"]] == int(args(mtls)["--port"])
    # tlsConfig names files of the client Secret, mounted in the kube-scheduler container.
    tls = extender["tlsConfig"]
    assert set(tls) == {"certFile", "keyFile", "caFile"}
    for field, key in (("certFile", "tls.crt"), ("keyFile", "tls.key"), ("caFile", "ca.crt")):
        assert mounted_secret(mtls, "kube-scheduler", tls[field]) == (CLIENT_SECRET, key)
    assert extender["urlPrefix"] in mtls.notes
    assert CLIENT_SECRET in mtls.notes
    for name in (SERVER_SECRET, CLIENT_SECRET):
        secret = mtls.get("Secret", name)
        assert secret["type"] == "kubernetes.io/tls"
        assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}


def _context_files(tmp_path: Path, manifests, name: str) -> dict[str, str]:
    files = {}
    for key in ("ca.crt", "tls.crt", "tls.key"):
        path = tmp_path / f"{name}-{key}"
        path.write_bytes(secret_file(manifests, name, key))
        files[key] = str(path)
    return files


def handshake(manifests, tmp_path: Path, server_name: str, *, client_certificate: bool) -> None:
    """A TLS handshake as the extender (client certificate required) and kube-scheduler make it.

    Raises ``ssl.SSLError`` (or an ``OSError`` the refusal caused) when either side refuses.
    """
    server_files = _context_files(tmp_path, manifests, SERVER_SECRET)
    client_files = _context_files(tmp_path, manifests, CLIENT_SECRET)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(server_files["tls.crt"], server_files["tls.key"])
    server_context.load_verify_locations(server_files["ca.crt"])
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # checks the name and the chain
    client_context.load_verify_locations(client_files["ca.crt"])
    if client_certificate:
        client_context.load_cert_chain(client_files["tls.crt"], client_files["tls.key"])
    server_end, client_end = socket.socketpair()
    server_end.settimeout(10)
    client_end.settimeout(10)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            with server_context.wrap_socket(server_end, server_side=True) as tls:
                tls.sendall(tls.recv(5))
        except (ssl.SSLError, OSError) as exc:
            failures.append(exc)
            server_end.close()

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_context.wrap_socket(client_end, server_hostname=server_name) as tls:
            tls.sendall(b"hello")
            assert tls.recv(5) == b"hello"
    finally:
        thread.join(10)
    if failures:
        raise failures[0]


def test_the_made_certificates_complete_a_mutual_handshake(mtls, tmp_path):
    host = urlsplit(extender_config(mtls)["urlPrefix"]).hostname
    assert host is not None
    handshake(mtls, tmp_path, host, client_certificate=True)


def test_a_client_without_a_certificate_is_refused(mtls, tmp_path):
    host = urlsplit(extender_config(mtls)["urlPrefix"]).hostname
    assert host is not None
    with pytest.raises((ssl.SSLError, OSError)):
        handshake(mtls, tmp_path, host, client_certificate=False)


def test_a_name_the_certificate_does_not_carry_is_refused(mtls, tmp_path):
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(mtls, tmp_path, "elsewhere.example", client_certificate=True)


@pytest.mark.parametrize("host", ["extender.npu.example", "10.96.0.88"])
def test_a_url_of_its_own_is_called_and_carried_by_the_certificate(render, tmp_path, host):
    manifests = render(
        {"scheduler": {"extender": {"tls": {"enabled": True, "url": f"https://{host}:8888"}}}}
    )
    assert extender_config(manifests)["urlPrefix"] == f"https://{host}:8888"
    handshake(manifests, tmp_path, host, client_certificate=True)


def test_operator_secrets_are_mounted_and_none_is_made(render):
    manifests = render(
        {
            "scheduler": {
                "extender": {
                    "tls": {
                        "enabled": True,
                        "mode": "secret",
                        "secretName": "extender-serving",
                        "clientSecretName": "kube-scheduler-client",
                    }
                }
            }
        }
    )
    assert manifests.find("Secret", SERVER_SECRET) is None
    assert manifests.find("Secret", CLIENT_SECRET) is None
    flags = args(manifests)
    assert mounted_secret(manifests, "vnpu-scheduler", flags["--extender-client-ca"]) == (
        "extender-serving",
        "ca.crt",
    )
    tls = extender_config(manifests)["tlsConfig"]
    assert mounted_secret(manifests, "kube-scheduler", tls["certFile"]) == (
        "kube-scheduler-client",
        "tls.crt",
    )


# Refusals at render time


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"config": {"host": "0.0.0.0"}},
            r"scheduler\.config\.host \(0\.0\.0\.0\) is not a loopback address: .*"
            r"scheduler\.extender\.tls\.enabled=true .*scheduler\.config\.allowUnauthenticatedExtender",
        ),
        (
            {"config": {"host": "127.0.0.1"}, "extender": {"tls": {"enabled": True}}},
            r"scheduler\.config\.host \(127\.0\.0\.1\) is a loopback address",
        ),
        (
            {"extender": {"tls": {"enabled": True, "mode": "secret"}}},
            r"scheduler\.extender\.tls\.secretName is required",
        ),
        (
            {"extender": {"tls": {"enabled": True, "mode": "secret", "secretName": "s"}}},
            r"scheduler\.extender\.tls\.clientSecretName is required",
        ),
    ],
)
def test_an_unguarded_or_incomplete_extender_fails_the_render(render, values, message):
    with pytest.raises(helm.HelmRenderError, match=message):
        render({"scheduler": values})


@pytest.mark.parametrize(
    ("host", "accepted"), [("::1", True), ("localhost", True), ("10.0.0.1", False)]
)
def test_loopback_addresses_need_no_guard(render, host, accepted):
    values = {"scheduler": {"config": {"host": host}}}
    if accepted:
        assert args(render(values))["--host"] == host
    else:
        with pytest.raises(helm.HelmRenderError, match="not a loopback address"):
            render(values)


def test_the_explicit_opt_out_serves_without_certificates_and_exposes_nothing(render):
    manifests = render(
        {"scheduler": {"config": {"host": "0.0.0.0", "allowUnauthenticatedExtender": True}}}
    )
    flags = args(manifests)
    assert flags["--host"] == "0.0.0.0"
    assert "--allow-unauthenticated-extender" in flags
    config = scheduler_settings.from_args(
        ["--host=0.0.0.0", "--allow-unauthenticated-extender"]
    )  # the service accepts exactly this pair
    assert config.allow_unauthenticated_extender is True
    assert extender_config(manifests)["urlPrefix"] == "http://127.0.0.1:8888"
    service = manifests.get("Service", "vnpu-scheduler")
    assert "extender" not in {p["name"] for p in service["spec"]["ports"]}


@pytest.mark.parametrize("bad", [{"url": "http://x:1"}, {"mode": "certManager"}])
def test_the_schema_checks_the_tls_values(render, bad):
    with pytest.raises(helm.HelmValuesError, match="/scheduler/extender/tls"):
        render({"scheduler": {"extender": {"tls": {"enabled": True, **bad}}}})
