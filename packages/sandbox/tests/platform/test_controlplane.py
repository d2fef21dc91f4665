"""The real control plane's parts that need no binaries: certificates, identities, command lines.

The certificates are checked the way kube-apiserver reads them (the CA verifies each; the
subject's CN is the user and its O entries the groups) and the way a TLS client does (an
``ssl`` handshake over a socket pair, the serving certificate for 127.0.0.1).
"""

from __future__ import annotations

import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from vnpu_sandbox import cli
from vnpu_sandbox.platform import certificates, clusterfile, components, controlplane, layout

NODES = (clusterfile.NodeSpec("duo", "310P3", "Ascend310P", 4, "300i-duo", False),)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> certificates.Pki:
    return certificates.write_pki(tmp_path_factory.mktemp("pki"), controlplane.identities(NODES))


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_client_certificates_name_the_user_and_groups_kube_apiserver_reads(
    pki: certificates.Pki,
) -> None:
    ca = _load(pki.ca.cert)
    node = _load(pki.client("node-duo").cert)
    node.verify_directly_issued_by(ca)
    common = node.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    groups = node.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    assert [a.value for a in common] == ["system:node:duo"]
    assert [a.value for a in groups] == ["system:nodes"]
    plugin = _load(pki.client("vnpu-device-plugin").cert)
    assert plugin.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "system:serviceaccount:kube-system:vnpu-device-plugin"
    )


def test_private_keys_are_readable_by_their_owner_only(pki: certificates.Pki) -> None:
    for key in (pki.ca.key, pki.serving.key, pki.client("admin").key, pki.service_account_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key


def test_the_serving_certificate_passes_a_tls_handshake_for_loopback(
    pki: certificates.Pki,
) -> None:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(pki.serving.cert), str(pki.serving.key))
    server_context.load_verify_locations(str(pki.ca.cert))
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = controlplane.tls_context(pki)
    left, right = socket.socketpair()
    with (
        server_context.wrap_socket(left, server_side=True, do_handshake_on_connect=False) as server,
        right,
    ):
        handshake = threading.Thread(target=server.do_handshake)
        handshake.start()
        with client_context.wrap_socket(right, server_hostname="127.0.0.1") as client:
            handshake.join(timeout=10)
            assert client.version() is not None
            # The server verified the admin's client certificate against the same CA.
            peer = server.getpeercert()
            assert peer is not None
            assert (("commonName", "vnpu-sandbox-admin"),) in peer["subject"]


def test_kubeconfigs_point_at_the_api_with_the_identity_files(tmp_path: Path) -> None:
    where = layout.Layout.at(tmp_path)
    plane = controlplane.Plane.at(where, controlplane.Ports(1, 2, 6443, 3, 4, 5), {})
    controlplane.prepare(plane, where, NODES)
    kubeconfig = yaml.safe_load(plane.kubeconfig("node-duo").read_text())
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    user = kubeconfig["users"][0]["user"]
    assert Path(user["client-certificate"]) == plane.pki.client("node-duo").cert
    # The sandbox's own kubeconfig (kubectl's) is the admin's.
    assert where.kubeconfig.read_text() == plane.kubeconfig("admin").read_text()
    pick = components.PortPicker()
    try:
        ports = components.choose_ports(NODES, pick)
    finally:
        pick.close()
    kubelet = components.node_agents(where, NODES[0], ports, controlplane.credentials(plane))
    by_name = {c.name: c.argv for c in kubelet}
    assert str(plane.kubeconfig("node-duo")) in by_name["kubelet-duo"]
    assert str(plane.kubeconfig("vnpu-device-plugin")) in by_name["device-plugin-duo"]


def test_the_api_server_runs_node_and_rbac_authorization_with_the_quota_webhooks_and_policies(
    tmp_path: Path,
) -> None:
    where = layout.Layout.at(tmp_path)
    pick = components.PortPicker()
    try:
        ports = controlplane.Ports.choose(pick)
    finally:
        pick.close()
    plane = controlplane.Plane.at(where, ports, {"kube-apiserver": Path("k")})
    argv = controlplane.api_server(plane).argv
    assert "--authorization-mode=Node,RBAC" in argv
    plugins = next(a for a in argv if a.startswith("--enable-admission-plugins="))
    assert set(plugins.split("=")[1].split(",")) == {
        "NodeRestriction",
        "ResourceQuota",
        "MutatingAdmissionWebhook",
        "ValidatingAdmissionWebhook",
        "ValidatingAdmissionPolicy",
    }


def test_up_without_the_binaries_says_how_to_build_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(controlplane.BIN_ENV, str(tmp_path / "bin"))
    status = cli.main(["up", "--dir", str(tmp_path / "sb")])
    assert status == 2
    error = capsys.readouterr().err
    assert "make k8s-bin" in error
    assert "kube-apiserver" in error
    assert not (tmp_path / "sb" / "sandbox.json").exists()


def test_rbac_and_admission_policies_come_from_the_rendered_chart_when_given(
    tmp_path: Path,
) -> None:
    chart = tmp_path / "chart.yaml"
    chart.write_text(
        "kind: ValidatingAdmissionPolicyBinding\nmetadata: {name: vnpu-npu-pods}\n---\n"
        "kind: ServiceAccount\nmetadata: {name: vnpu-scheduler, namespace: kube-system}\n---\n"
        "kind: Deployment\nmetadata: {name: vnpu-scheduler}\n---\n"
        "kind: ValidatingAdmissionPolicy\nmetadata: {name: vnpu-npu-pods}\n---\n"
        "kind: ClusterRole\nmetadata: {name: vnpu-scheduler}\nrules: []\n"
    )
    kinds = [d["kind"] for d in controlplane.rbac_documents(chart)]
    assert kinds == [
        "ServiceAccount",
        "ClusterRole",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
    ]
    # Without a chart, every service account is bound to cluster-admin.
    binding = controlplane.rbac_documents()[-1]
    assert binding["roleRef"]["name"] == "cluster-admin"
    assert {s["name"] for s in binding["subjects"]} == set(controlplane.SERVICES)
    empty = tmp_path / "empty.yaml"
    empty.write_text("kind: Deployment\nmetadata: {name: x}\n")
    with pytest.raises(controlplane.ControlPlaneError, match="no ServiceAccount"):
        controlplane.rbac_documents(empty)
