"""The certificates of a real control plane: one CA, serving and client certificates, SA keys.

``controlplane`` calls ``write_pki`` once per ``up``: it makes a CA, a
serving certificate for loopback (kube-apiserver, kube-controller-manager, kube-scheduler and
vnpu-scheduler's webhook listener all present it), one client certificate per identity
(``Identity``: the user name is the subject's common name, the groups its organisations, as
kube-apiserver's x509 authenticator reads them) and the service-account signing key pair.
Everything is PEM under ``<sandbox>/pki/``; keys are written 0600. Keys are EC P-256: quick
to make, and every Kubernetes component accepts them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 30
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_ADDRESSES = ("127.0.0.1", "::1")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a client certificate says its holder is: a user name and groups."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Pair:
    """A certificate and its key on disk."""

    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class Pki:
    """The files of one control plane's certificates."""

    root: Path

    @property
    def ca(self) -> Pair:
        return Pair(self.root / "ca.crt", self.root / "ca.key")

    @property
    def serving(self) -> Pair:
        return Pair(self.root / "serving.crt", self.root / "serving.key")

    @property
    def service_account_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def service_account_public(self) -> Path:
        return self.root / "sa.pub"

    def client(self, name: str) -> Pair:
        return Pair(self.root / f"{name}.crt", self.root / f"{name}.key")


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _builder(
    subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


class Authority:
    """A CA that signs the control plane's certificates."""

    def __init__(self, name: str = "vnpu-sandbox-ca") -> None:
        self._key = _key()
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        public = self._key.public_key()
        self.cert = (
            _builder(self._name, self._name, public)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(self._key, hashes.SHA256())
        )

    def write(self, pair: Pair) -> None:
        _write_cert(pair.cert, self.cert)
        _write_key(pair.key, self._key)

    def _sign(
        self, builder: x509.CertificateBuilder, public: ec.EllipticCurvePublicKey
    ) -> x509.Certificate:
        ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        return (
            builder.add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )

    def serving(
        self,
        pair: Pair,
        names: tuple[str, ...] = LOOPBACK_NAMES,
        addresses: tuple[str, ...] = LOOPBACK_ADDRESSES,
    ) -> None:
        """A server certificate for ``names`` and ``addresses`` (loopback by default)."""
        key = _key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
        alternatives: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        alternatives += [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]
        builder = (
            _builder(subject, self.cert.subject, key.public_key())
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        )
        _write_cert(pair.cert, self._sign(builder, key.public_key()))
        _write_key(pair.key, key)

    def client(self, pair: Pair, identity: Identity) -> None:
        """A client certificate naming ``identity`` (CN: the user, O: each group)."""
        key = _key()
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in identity.groups]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, identity.user))
        builder = _builder(
            x509.Name(attributes), self.cert.subject, key.public_key()
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        _write_cert(pair.cert, self._sign(builder, key.public_key()))
        _write_key(pair.key, key)


def write_pki(root: Path, identities: dict[str, Identity]) -> Pki:
    """Make the CA, the loopback serving pair, a client pair per ``identities`` entry, SA keys."""
    root.mkdir(parents=True, exist_ok=True)
    pki = Pki(root)
    authority = Authority()
    authority.write(pki.ca)
    authority.serving(pki.serving)
    for name, identity in identities.items():
        authority.client(pki.client(name), identity)
    signer = _key()
    _write_key(pki.service_account_key, signer)
    pki.service_account_public.write_bytes(
        signer.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki
