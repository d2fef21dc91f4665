"""The KubeSchedulerConfiguration file the driver runs with, read as kube-scheduler reads it.

``command`` calls :func:`load` once at start; the resulting :class:`Config` is passed down to
the queue (backoff), the driver (profiles) and ``extender`` (one client per entry of
``extenders``). The file is the one the Helm chart renders for kube-scheduler: YAML or JSON,
``apiVersion: kubescheduler.config.k8s.io/v1``, ``kind: KubeSchedulerConfiguration``.

Decoding is strict like kube-scheduler's: an unknown field, a value of the wrong type or a
value validation refuses raises ``errors.ConfigError`` naming the field by its path
(``extenders[0].weight: must have a positive weight applied to it (got 0)``). Defaults are
kube-scheduler's: one profile ``default-scheduler`` when none is given, backoff 1 s doubling
to 10 s, an extender ``httpTimeout`` of 5 s. Fields kube-scheduler has but the driver does not
use (leader election, client connection, parallelism, percentageOfNodesToScore, profiles'
plugins and pluginConfig) are accepted and listed in :attr:`Config.ignored`, so the command can
say they have no effect.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from vnpu_sandbox.scheduling import errors, podrequests

API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_HTTP_TIMEOUT = 5.0
"""Seconds: kube-scheduler's ``DefaultExtenderTimeout``, used when ``httpTimeout`` is unset or 0."""

_TOP_FIELDS = {
    "apiVersion",
    "kind",
    "profiles",
    "extenders",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
}
_TOP_IGNORED = {
    "parallelism",
    "leaderElection",
    "clientConnection",
    "enableProfiling",
    "enableContentionProfiling",
    "percentageOfNodesToScore",
    "delayCacheUntilActive",
}
_PROFILE_FIELDS = {"schedulerName"}
_PROFILE_IGNORED = {"plugins", "pluginConfig", "percentageOfNodesToScore"}
_EXTENDER_FIELDS = {
    "urlPrefix",
    "filterVerb",
    "preemptVerb",
    "prioritizeVerb",
    "bindVerb",
    "weight",
    "enableHTTPS",
    "tlsConfig",
    "httpTimeout",
    "nodeCacheCapable",
    "managedResources",
    "ignorable",
}
_TLS_FIELDS = {
    "insecure",
    "serverName",
    "certFile",
    "keyFile",
    "caFile",
    "certData",
    "keyData",
    "caData",
}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


@dataclass(frozen=True)
class ManagedResource:
    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True)
class TlsConfig:
    """``tlsConfig`` of an extender; file paths, or PEM text for the ``*Data`` fields."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: str = ""
    key_data: str = ""
    ca_data: str = ""


@dataclass(frozen=True)
class Extender:
    """One entry of ``extenders``; a verb left empty is not called."""

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    bind_verb: str = ""
    preempt_verb: str = ""
    weight: int = 0
    node_cache_capable: bool = False
    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    enable_https: bool = False
    tls: TlsConfig | None = None
    ignorable: bool = False
    managed_resources: tuple[ManagedResource, ...] = ()

    @property
    def managed_names(self) -> frozenset[str]:
        return frozenset(r.name for r in self.managed_resources)


@dataclass(frozen=True)
class Config:
    """What the driver uses of a KubeSchedulerConfiguration."""

    profiles: tuple[str, ...] = (DEFAULT_SCHEDULER_NAME,)
    extenders: tuple[Extender, ...] = ()
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    ignored: tuple[str, ...] = field(default=(), compare=False)
    """Paths of fields that were read but have no effect in the driver."""

    @property
    def ignored_resources(self) -> frozenset[str]:
        """Extender resources NodeResourcesFit skips (``ignoredByScheduler: true``)."""
        return frozenset(
            r.name for e in self.extenders for r in e.managed_resources if r.ignored_by_scheduler
        )


def parse_duration(text: object, where: str) -> float:
    """A Go duration (``30s``, ``1m30s``, ``500ms``, ``0``) in seconds."""
    if not isinstance(text, str):
        raise errors.ConfigError(where, text, "must be a duration string such as 30s")
    body = text.strip()
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    if body == "0":
        return 0.0
    position, total = 0, 0.0
    while position < len(body):
        match = _DURATION_PART.match(body, position)
        if match is None or match.group(1) in ("", "."):
            raise errors.ConfigError(where, text, "is not a duration (e.g. 30s, 1m30s, 500ms)")
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position == 0:
        raise errors.ConfigError(where, text, "is not a duration (e.g. 30s, 1m30s, 500ms)")
    return sign * total


def _mapping(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise errors.ConfigError(where, value, "must be a mapping")
    return value


def _check_fields(
    document: Mapping[str, Any], where: str, known: set[str], ignored: set[str]
) -> list[str]:
    """Strict decoding: an unknown field is an error; returns the ignored ones present."""
    prefix = f"{where}." if where else ""
    for key in document:
        if key not in known and key not in ignored:
            raise errors.ConfigError(f"{prefix}{key}", None, "unknown field")
    return [f"{prefix}{key}" for key in document if key in ignored]


def _string(document: Mapping[str, Any], key: str, where: str, default: str = "") -> str:
    value = document.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise errors.ConfigError(where, value, "must be a string")
    return value


def _bool(document: Mapping[str, Any], key: str, where: str) -> bool:
    value = document.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise errors.ConfigError(where, value, "must be true or false")
    return value


def _int(document: Mapping[str, Any], key: str, where: str, default: int) -> int:
    value = document.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise errors.ConfigError(where, value, "must be an integer")
    return value


def _tls(value: object, where: str) -> TlsConfig | None:
    if value is None:
        return None
    document = _mapping(value, where)
    _check_fields(document, where, _TLS_FIELDS, set())
    return TlsConfig(
        insecure=_bool(document, "insecure", f"{where}.insecure"),
        server_name=_string(document, "serverName", f"{where}.serverName"),
        cert_file=_string(document, "certFile", f"{where}.certFile"),
        key_file=_string(document, "keyFile", f"{where}.keyFile"),
        ca_file=_string(document, "caFile", f"{where}.caFile"),
        cert_data=_string(document, "certData", f"{where}.certData"),
        key_data=_string(document, "keyData", f"{where}.keyData"),
        ca_data=_string(document, "caData", f"{where}.caData"),
    )


def _managed(value: object, where: str, seen: set[str]) -> tuple[ManagedResource, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise errors.ConfigError(where, value, "must be a list")
    resources = []
    for index, item in enumerate(value):
        path = f"{where}[{index}]"
        document = _mapping(item, path)
        _check_fields(document, path, {"name", "ignoredByScheduler"}, set())
        name = _string(document, "name", f"{path}.name")
        if not podrequests.is_extended(name):
            raise errors.ConfigError(
                f"{path}.name", name, "must be an extended resource name (vendor-domain/type)"
            )
        if name in seen:
            raise errors.ConfigError(
                f"{path}.name", name, "duplicate extender managed resource name"
            )
        seen.add(name)
        resources.append(
            ManagedResource(
                name, _bool(document, "ignoredByScheduler", f"{path}.ignoredByScheduler")
            )
        )
    return tuple(resources)


def _extender(value: object, where: str, seen: set[str]) -> Extender:
    document = _mapping(value, where)
    _check_fields(document, where, _EXTENDER_FIELDS, set())
    url = _string(document, "urlPrefix", f"{where}.urlPrefix")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise errors.ConfigError(f"{where}.urlPrefix", url, "must be an http:// or https:// URL")
    timeout = DEFAULT_HTTP_TIMEOUT
    if document.get("httpTimeout") is not None:
        timeout = parse_duration(document["httpTimeout"], f"{where}.httpTimeout")
        if timeout < 0:
            raise errors.ConfigError(
                f"{where}.httpTimeout", document["httpTimeout"], "must not be negative"
            )
        timeout = timeout or DEFAULT_HTTP_TIMEOUT
    extender = Extender(
        url_prefix=url,
        filter_verb=_string(document, "filterVerb", f"{where}.filterVerb"),
        prioritize_verb=_string(document, "prioritizeVerb", f"{where}.prioritizeVerb"),
        bind_verb=_string(document, "bindVerb", f"{where}.bindVerb"),
        preempt_verb=_string(document, "preemptVerb", f"{where}.preemptVerb"),
        weight=_int(document, "weight", f"{where}.weight", 0),
        node_cache_capable=_bool(document, "nodeCacheCapable", f"{where}.nodeCacheCapable"),
        http_timeout=timeout,
        enable_https=_bool(document, "enableHTTPS", f"{where}.enableHTTPS"),
        tls=_tls(document.get("tlsConfig"), f"{where}.tlsConfig"),
        ignorable=_bool(document, "ignorable", f"{where}.ignorable"),
        managed_resources=_managed(
            document.get("managedResources"), f"{where}.managedResources", seen
        ),
    )
    if extender.prioritize_verb and extender.weight <= 0:
        raise errors.ConfigError(
            f"{where}.weight", extender.weight, "must have a positive weight applied to it"
        )
    return extender


def _profiles(value: object, ignored: list[str]) -> tuple[str, ...]:
    if value is None or value == []:
        return (DEFAULT_SCHEDULER_NAME,)
    if not isinstance(value, list):
        raise errors.ConfigError("profiles", value, "must be a list")
    names: list[str] = []
    for index, item in enumerate(value):
        path = f"profiles[{index}]"
        document = _mapping(item, path)
        ignored.extend(_check_fields(document, path, _PROFILE_FIELDS, _PROFILE_IGNORED))
        name = _string(document, "schedulerName", f"{path}.schedulerName", DEFAULT_SCHEDULER_NAME)
        name = name or DEFAULT_SCHEDULER_NAME
        if name in names:
            raise errors.ConfigError(
                f"{path}.schedulerName", name, "duplicate profile with scheduler name"
            )
        names.append(name)
    return tuple(names)


def parse(document: object) -> Config:
    """A configuration from its decoded document; ``errors.ConfigError`` names the field at fault."""
    top = _mapping(document, "(document)")
    ignored = _check_fields(top, "", _TOP_FIELDS, _TOP_IGNORED)
    if top.get("apiVersion") != API_VERSION:
        raise errors.ConfigError("apiVersion", top.get("apiVersion"), f"only {API_VERSION} is read")
    if top.get("kind") != KIND:
        raise errors.ConfigError("kind", top.get("kind"), f"must be {KIND}")
    profiles = _profiles(top.get("profiles"), ignored)
    raw_extenders = top.get("extenders") or []
    if not isinstance(raw_extenders, list):
        raise errors.ConfigError("extenders", raw_extenders, "must be a list")
    seen: set[str] = set()
    extenders = tuple(
        _extender(item, f"extenders[{i}]", seen) for i, item in enumerate(raw_extenders)
    )
    binders = sum(1 for e in extenders if e.bind_verb)
    if binders > 1:
        raise errors.ConfigError(
            "extenders",
            f"found {binders} extenders implementing bind",
            "only one extender can implement bind",
        )
    initial = _int(top, "podInitialBackoffSeconds", "podInitialBackoffSeconds", 1)
    maximum = _int(top, "podMaxBackoffSeconds", "podMaxBackoffSeconds", 10)
    if initial <= 0:
        raise errors.ConfigError("podInitialBackoffSeconds", initial, "must be greater than 0")
    if maximum < initial:
        raise errors.ConfigError(
            "podMaxBackoffSeconds",
            maximum,
            "must be greater than or equal to PodInitialBackoffSeconds",
        )
    for extender, index in zip(extenders, range(len(extenders)), strict=True):
        if extender.preempt_verb:
            ignored.append(f"extenders[{index}].preemptVerb")
    return Config(
        profiles=profiles,
        extenders=extenders,
        initial_backoff=float(initial),
        max_backoff=float(maximum),
        ignored=tuple(ignored),
    )


def load(path: Path | str) -> Config:
    """Read and check the file at ``path`` (YAML, or JSON, which is YAML too)."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise errors.ConfigError(str(target), None, f"cannot be read: {exc}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise errors.ConfigError(str(target), None, f"is not YAML or JSON: {exc}") from exc
    try:
        return parse(document)
    except errors.ConfigError as exc:
        raise errors.ConfigError(f"{target}: {exc.field}", exc.value, exc.problem) from exc
