"""What the sandbox needs to run a peer's scheduler: its build, its chart, its pod identity.

vnpu's classic mode runs under Volcano's scheduler or HAMi's as users run them today
(``vnpu-sandbox up --scheduler volcano|hami``; ``volcano`` and ``hami`` hold what differs).
This module holds what both share:

* ``build``: the binaries ``make peers-bin`` (scripts/peers-bin.sh) built from the pinned
  source, and that source (the peer's CRDs and chart are read from it);
* ``read_chart`` and ``install_documents``: the peer's own Helm chart rendered to YAML
  (``make peer-charts`` renders it with vnpu's values for it, ``deploy/peers/``): the sandbox
  creates its namespace, CRDs, service accounts, roles, bindings and ConfigMaps as they are,
  and starts the processes its Deployments describe, with their arguments;
* ``Account``: a process runs as its chart's service account, as in a pod: a token from the
  TokenRequest API with the CA and namespace at the paths a pod has them
  (``/var/run/secrets/kubernetes.io/serviceaccount``, shown there by ``mountns.overlay``) and
  ``KUBERNETES_SERVICE_HOST``/``PORT`` naming kube-apiserver. Volcano's scheduler reads the
  device ConfigMap only through that in-cluster configuration.

Failures are ``PeerError`` (``path``: the file or directory concerned, when there is one).
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vnpu_sandbox.platform import components, mountns

Json = dict[str, Any]

PINNED = {
    "volcano": "ed72c7c815a9fd547a787134676f73d42e9d049c",
    "hami": "4707fb02c91c545bc7343ce26dba4c32919f9a3e",
}
"""The peers' pinned commits (scripts/peers-bin.sh builds these)."""
CHARTS = {
    "volcano": ("installer/helm/chart/volcano", "volcano", "volcano-system"),
    "hami": ("charts/hami", "hami", "kube-system"),
}
"""Per peer: its chart's directory in its source, and the release name and namespace the
operator guide installs it with."""
BUILD_HINT = "build it with `make peers-bin` (scripts/peers-bin.sh)"
INSTALL_KINDS = (
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
)
"""What the sandbox creates of a peer's chart, in Helm's install order: the rest (Deployments,
Services, webhook certificates, Jobs) is what the sandbox runs itself or has no use for."""
TOKEN_SECONDS = 7 * 24 * 3600
"""How long a peer's service-account token lasts: a sandbox is not meant to run longer."""
SECRETS = Path("secrets/kubernetes.io/serviceaccount")
"""Where below ``/run`` (``/var/run``) a pod finds its service account's files."""


class PeerError(Exception):
    """A peer cannot be run: not built, its chart unreadable, an API call refused."""

    def __init__(self, problem: str, path: Path | None = None) -> None:
        self.problem = problem
        self.path = path
        super().__init__(problem)


def cache_dir(peer: str) -> Path:
    """Where ``scripts/peers-bin.sh`` builds ``peer`` (``$XDG_CACHE_HOME`` respected)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vnpu" / "peers" / peer / PINNED[peer]


def chart_dir(peer: str) -> Path:
    """The peer's own chart in the source ``make peers-bin`` unpacked."""
    found = cache_dir(peer) / "src" / CHARTS[peer][0]
    if not (found / "Chart.yaml").is_file():
        raise PeerError(f"no {peer} chart in {found}: {BUILD_HINT}", found)
    return found


@dataclass(frozen=True, slots=True)
class Build:
    """A peer's binaries and the source they were built from."""

    peer: str
    bin: Path
    src: Path
    unshare: str

    def binary(self, name: str) -> Path:
        return self.bin / name


def build(peer: str, binaries: Sequence[str], root: Path | None = None) -> Build:
    """The build of ``peer`` holding ``binaries``; PeerError names what is missing."""
    where = root or cache_dir(peer)
    missing = [b for b in binaries if not os.access(where / "bin" / b, os.X_OK)]
    if missing:
        raise PeerError(f"no {', '.join(missing)} in {where / 'bin'}: {BUILD_HINT}", where)
    if not (where / "src" / "go.mod").is_file():
        raise PeerError(f"no {peer} source in {where / 'src'}: {BUILD_HINT}", where / "src")
    try:
        return Build(peer, where / "bin", where / "src", mountns.unshare())
    except mountns.MountError as exc:
        raise PeerError(f"{peer}: {exc}") from exc


def read_chart(path: Path) -> list[Json]:
    """The documents of a peer's chart rendered to YAML (``make peer-charts``)."""
    try:
        text = path.read_text(encoding="utf-8")
        found = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as exc:
        raise PeerError(f"cannot read the rendered chart {path}: {exc}", path) from exc
    if not any(d.get("kind") == "Deployment" for d in found):
        raise PeerError(f"{path}: no Deployment in it: not a rendered chart?", path)
    return found


def install_documents(documents: Iterable[Json], namespace: str) -> list[Json]:
    """The peer's namespace, then what ``INSTALL_KINDS`` names of its chart, in that order."""
    wanted = list(documents)
    ordered = [
        d for kind in INSTALL_KINDS for d in wanted if d.get("kind") == kind
    ]  # fmt: skip
    space = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [space, *ordered]


def container(documents: Iterable[Json], deployment: str, name: str | None = None) -> Json:
    """A container of one of the chart's Deployments (the first when ``name`` is None)."""
    for document in documents:
        if document.get("kind") != "Deployment" or document["metadata"]["name"] != deployment:
            continue
        for found in document["spec"]["template"]["spec"]["containers"]:
            if name is None or found.get("name") == name:
                return dict(found)
        raise PeerError(f"the chart's Deployment {deployment} has no container {name}")
    raise PeerError(f"the chart has no Deployment {deployment}")


def config_map(documents: Iterable[Json], name: str, key: str) -> str:
    """A value of one of the chart's ConfigMaps."""
    for document in documents:
        if document.get("kind") == "ConfigMap" and document["metadata"]["name"] == name:
            value = (document.get("data") or {}).get(key)
            if isinstance(value, str):
                return value
            raise PeerError(f"the chart's ConfigMap {name} has no {key}")
    raise PeerError(f"the chart has no ConfigMap {name}")


def arguments(found: Json, drop: Sequence[str] = ()) -> list[str]:
    """A container's arguments for a process started directly: the shell redirection the
    charts append (``2>&1``) and the flags named in ``drop`` (``--flag`` or ``--flag=``)
    left out."""
    kept = []
    for word in [*(found.get("command") or [])[1:], *(found.get("args") or [])]:
        flag = str(word).split("=", 1)[0]
        if word == "2>&1" or flag in drop:
            continue
        kept.append(str(word))
    return kept


def environment(found: Json) -> list[str]:
    """A container's plain ``env`` entries as ``NAME=value`` (references left out)."""
    return [f"{e['name']}={e['value']}" for e in found.get("env") or [] if "value" in e]


@dataclass(frozen=True, slots=True)
class Account:
    """A service account a peer's process runs as, with the files a pod would have."""

    namespace: str
    name: str
    root: Path

    @property
    def run_dir(self) -> Path:
        """What is shown over ``/run`` in the process's mount namespace."""
        return self.root / self.name

    @property
    def secrets(self) -> Path:
        return self.run_dir / SECRETS

    @property
    def subject(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"


def prepare_account(account: Account, ca: Path) -> None:
    """The CA and the namespace at the pod's paths (the token comes once the API runs)."""
    account.secrets.mkdir(parents=True, exist_ok=True)
    (account.secrets / "ca.crt").write_bytes(ca.read_bytes())
    (account.secrets / "namespace").write_text(account.namespace, encoding="ascii")


def request_token(account: Account, api_url: str, context: ssl.SSLContext) -> None:
    """Ask the TokenRequest API for the account's token and write it where a pod has it."""
    url = f"{api_url}/api/v1/namespaces/{account.namespace}/serviceaccounts/{account.name}/token"
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_SECONDS},
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            token = str(json.loads(answer.read())["status"]["token"])
    except urllib.error.HTTPError as exc:
        text = exc.read().decode("utf-8", errors="replace")[:300]
        raise PeerError(f"a token for {account.subject}: {exc.code} {text}") from exc
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        raise PeerError(f"a token for {account.subject}: {exc}") from exc
    target = account.secrets / "token"
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="ascii") as out:
        out.write(token)


def in_cluster(
    built: Build, account: Account, api_port: int, argv: Sequence[str], env: Sequence[str] = ()
) -> tuple[str, ...]:
    """``argv`` run as in a pod of ``account``: the service account's files at the pod's
    paths, ``KUBERNETES_SERVICE_HOST``/``PORT`` naming kube-apiserver, plus ``env``; no
    ``KUBECONFIG`` and a ``HOME`` without one (a client would take those over the pod's
    identity)."""
    target = os.path.realpath("/var/run")
    inner = (
        "/usr/bin/env",
        "-u",
        "KUBECONFIG",
        f"HOME={account.run_dir}",
        f"KUBERNETES_SERVICE_HOST={components.LOOPBACK}",
        f"KUBERNETES_SERVICE_PORT={api_port}",
        *env,
        *argv,
    )
    try:
        return mountns.overlay(built.unshare, f"{account.name}-run", account.run_dir, target, inner)
    except mountns.MountError as exc:
        raise PeerError(str(exc), account.run_dir) from exc
