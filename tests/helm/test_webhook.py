"""The admission webhooks and their certificate, in the three certificate modes.

In "helm" mode the chart makes the CA and the serving certificate itself; the test checks the
certificate with ``cryptography`` as the API server would: signed by the CA in caBundle, valid
for the Service's DNS names, with the key in the same Secret.
"""

from __future__ import annotations

import base64
import datetime

import helm_python as helm
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

SERVICE_NAMES = [
    "vnpu-scheduler",
    "vnpu-scheduler.kube-system",
    "vnpu-scheduler.kube-system.svc",
    "vnpu-scheduler.kube-system.svc.cluster.local",
]


def webhooks(manifests):
    mutating = manifests.get("MutatingWebhookConfiguration", "vnpu-scheduler")["webhooks"]
    validating = manifests.get("ValidatingWebhookConfiguration", "vnpu-scheduler")["webhooks"]
    assert len(mutating) == len(validating) == 1
    return mutating[0], validating[0]


def tls_volume_secret(manifests) -> str:
    spec, _ = manifests.container("vnpu-scheduler")
    volume = next(v for v in spec["volumes"] if v["name"] == "tls")
    name: str = volume["secret"]["secretName"]
    return name


def test_webhooks_call_the_scheduler_service(default):
    service = default.get("Service", "vnpu-scheduler")
    ports = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    for hook, path in zip(webhooks(default), ("/mutate", "/validate"), strict=True):
        target = hook["clientConfig"]["service"]
        assert target == {
            "name": "vnpu-scheduler",
            "namespace": "kube-system",
            "port": 443,
            "path": path,
        }
        assert ports[443] == "webhook"
        assert hook["rules"] == [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ]
        assert hook["sideEffects"] == "NoneOnDryRun"  # claim templates (DRA mode)
        assert hook["admissionReviewVersions"] == ["v1"]
        # NPU pods only, and closed: while the webhook is down an NPU pod is refused (its
        # controller retries) instead of being created unrounded for the default scheduler.
        assert hook["failurePolicy"] == "Fail"
        assert [c["name"] for c in hook["matchConditions"]] == ["npu-pod"]
        assert "r.startsWith('huawei.com/')" in hook["matchConditions"][0]["expression"]
        assert hook["namespaceSelector"]["matchExpressions"] == [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}
        ]
        assert hook["objectSelector"]["matchExpressions"] == [
            {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
        ]


def test_webhook_values(render):
    manifests = render(
        {
            "scheduler": {
                "webhook": {
                    "timeoutSeconds": 5,
                    "excludeNamespaces": ["kube-system", "monitoring"],
                    "ignoreLabel": "vnpu.io/webhook",
                }
            }
        }
    )
    for hook in webhooks(manifests):
        assert hook["timeoutSeconds"] == 5
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "kube-system",
            "monitoring",
        ]
        assert hook["objectSelector"]["matchExpressions"][0]["key"] == "vnpu.io/webhook"


def test_helm_mode_certificate_is_valid_for_the_service(default):
    secret = default.get("Secret", "vnpu-scheduler-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert tls_volume_secret(default) == "vnpu-scheduler-tls"
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    cert = x509.load_pem_x509_certificate(data["tls.crt"])
    key = serialization.load_pem_private_key(data["tls.key"], password=None)
    for hook in webhooks(default):
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == data["ca.crt"]
    # Signed by the CA the API server is given.
    ca_key = ca.public_key()
    assert isinstance(ca_key, rsa.RSAPublicKey)
    assert cert.signature_hash_algorithm is not None
    ca_key.verify(
        cert.signature,
        cert.tbs_certificate_bytes,
        padding.PKCS1v15(),
        cert.signature_hash_algorithm,
    )
    assert cert.issuer == ca.subject
    # The key in the Secret is the certificate's.
    assert isinstance(key, rsa.RSAPrivateKey)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()
    # Valid for every name the API server may use for the Service.
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(SERVICE_NAMES) <= set(names.get_values_for_type(x509.DNSName))
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usage
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc <= now < cert.not_valid_after_utc
    assert cert.not_valid_after_utc - now > datetime.timedelta(days=3000)


def test_cert_manager_mode(render):
    manifests = render(
        {"scheduler": {"webhook": {"tls": {"mode": "certManager", "validityDays": 365}}}}
    )
    assert manifests.find("Secret", "vnpu-scheduler-tls") is None
    certificate = manifests.get("Certificate", "vnpu-scheduler-webhook")
    issuer = manifests.get("Issuer", "vnpu-scheduler-selfsigned")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"] == {
        "kind": "Issuer",
        "name": "vnpu-scheduler-selfsigned",
    }
    assert certificate["spec"]["secretName"] == tls_volume_secret(manifests)
    assert certificate["spec"]["dnsNames"] == SERVICE_NAMES
    assert certificate["spec"]["duration"] == "8760h"
    for hook, kind in zip(webhooks(manifests), ("Mutating", "Validating"), strict=True):
        assert "caBundle" not in hook["clientConfig"]
        config = manifests.get(f"{kind}WebhookConfiguration", "vnpu-scheduler")
        assert config["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": "kube-system/vnpu-scheduler-webhook"
        }


def test_cert_manager_with_an_existing_issuer(render):
    ref = {"name": "corp-ca", "kind": "ClusterIssuer"}
    manifests = render(
        {"scheduler": {"webhook": {"tls": {"mode": "certManager", "certManagerIssuerRef": ref}}}}
    )
    assert manifests.all("Issuer") == []
    assert manifests.get("Certificate", "vnpu-scheduler-webhook")["spec"]["issuerRef"] == ref


def test_user_secret_mode(render):
    manifests = render(
        {
            "scheduler": {
                "webhook": {"tls": {"mode": "secret", "secretName": "my-tls", "caBundle": "Q0E="}}
            }
        }
    )
    assert manifests.all("Secret") == []
    assert manifests.all("Certificate") == []
    assert tls_volume_secret(manifests) == "my-tls"
    for hook in webhooks(manifests):
        assert hook["clientConfig"]["caBundle"] == "Q0E="


@pytest.mark.parametrize(
    ("tls", "key"),
    [
        ({"mode": "secret", "caBundle": "Q0E="}, "scheduler.webhook.tls.secretName"),
        ({"mode": "secret", "secretName": "my-tls"}, "scheduler.webhook.tls.caBundle"),
    ],
)
def test_user_secret_mode_needs_both_values(render, tls, key):
    with pytest.raises(helm.HelmError, match=key.replace(".", r"\.")):
        render({"scheduler": {"webhook": {"tls": tls}}})


def test_no_webhook_no_certificate(render):
    manifests = render({"scheduler": {"webhook": {"enabled": False}}})
    assert manifests.all("MutatingWebhookConfiguration") == []
    assert manifests.all("ValidatingWebhookConfiguration") == []
    assert manifests.all("Secret") == []
    spec, _ = manifests.container("vnpu-scheduler")
    assert "tls" not in {v["name"] for v in spec["volumes"]}
    service = manifests.get("Service", "vnpu-scheduler")
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]
