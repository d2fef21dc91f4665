"""The service's settings: one pydantic-settings class, read from ``VNPU_SCHED_*`` and flags.

``__main__`` builds ``Settings`` once with ``from_args`` (flags override the environment,
the environment overrides the defaults) and passes it down; tests build it directly.
An invalid value fails at start with ``errors.SettingsError`` naming the field.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Sequence
from enum import StrEnum

import pydantic
from pydantic_settings import BaseSettings, SettingsConfigDict

from vnpu_core import requests
from vnpu_scheduler import errors

BIND_ROLLBACK_SECONDS = 2.0
"""The end of ``bind_timeout`` a bind keeps for rolling back (``binder.ROLLBACK_SECONDS``)."""


class Mode(StrEnum):
    """How NPUs are allocated: by this extender and the device plugins, or by DRA."""

    CLASSIC = "classic"
    DRA = "dra"


class Settings(BaseSettings):
    """Everything the scheduler can be told; durations are in seconds."""

    model_config = SettingsConfigDict(env_prefix="VNPU_SCHED_", extra="forbid", frozen=True)

    kubeconfig: pydantic.FilePath | None = None
    """Kubeconfig file; unset means the in-cluster service account."""
    host: str = pydantic.Field(default="127.0.0.1", min_length=1)
    """Address of the extender listener (every route); loopback unless mutual TLS guards it."""
    port: int = pydantic.Field(default=8888, ge=0, le=65535)
    """Port of the extender listener: extender verbs, webhook routes, probes, metrics (0: any)."""
    extender_tls_cert: pydantic.FilePath | None = None
    """PEM certificate (chain) that makes the extender listener HTTPS; with ``extender_client_ca``."""
    extender_tls_key: pydantic.FilePath | None = None
    """PEM private key of ``extender_tls_cert``."""
    extender_client_ca: pydantic.FilePath | None = None
    """PEM CA bundle; the extender listener then accepts only clients with a certificate it signed."""
    allow_unauthenticated_extender: bool = False
    """Serve the extender on a non-loopback address without client certificates (unsafe)."""
    webhook_host: str = pydantic.Field(default="0.0.0.0", min_length=1)
    """Address of the webhook listener, which serves /mutate and /validate only."""
    webhook_port: int = pydantic.Field(default=8443, ge=0, le=65535)
    """HTTPS port of the webhook listener, served with ``tls_cert``/``tls_key``."""
    tls_cert: pydantic.FilePath | None = None
    """PEM certificate (chain) of the webhook listener."""
    tls_key: pydantic.FilePath | None = None
    """PEM private key of ``tls_cert``."""
    metrics_host: str = pydantic.Field(default="0.0.0.0", min_length=1)
    """Address of the metrics listener, which serves /healthz, /readyz and /metrics only."""
    metrics_port: int | None = pydantic.Field(default=None, ge=0, le=65535)
    """Port of the metrics listener (probes and Prometheus); unset means no such listener."""
    max_body_bytes: int = pydantic.Field(default=80 * 2**20, ge=1024)
    """Largest request body of the extender and metrics listeners (a /filter with 5,000 nodes)."""
    webhook_max_body_bytes: int = pydantic.Field(default=7 * 2**20, ge=1024)
    """Largest request body of the webhook listener (an AdmissionReview: object and oldObject)."""
    device_config: pydantic.FilePath | None = None
    """HAMi device-config YAML (the ``vnpus`` document); unset means the built-in chip models."""
    config_poll_seconds: float = pydantic.Field(default=5.0, gt=0)
    """How often the device-config file is checked for changes."""
    mode: Mode = Mode.CLASSIC
    """classic: the webhook rounds NPU requests and routes pods to this extender; dra: the
    webhook rewrites them as the extended resources the npu.vnpu.io DeviceClasses serve and
    leaves scheduling to kube-scheduler's DRA allocator (docs/dra.md)."""
    policy: requests.Policy = requests.Policy.DEFAULT
    """Chip and node policy for pods that name none: best-fit, binpack or spread."""
    handshake_timeout: float = pydantic.Field(default=60.0, gt=0)
    """A node whose device plugin has not reported for longer is unavailable (HAMi: 60 s)."""
    scheduler_name: str = pydantic.Field(default="vnpu-scheduler", min_length=1)
    """The kube-scheduler profile the webhook assigns NPU pods to."""
    lock_ttl: float = pydantic.Field(default=300.0, gt=0)
    """Age after which a node lock may be taken over once its owner no longer waits for
    Allocate (HAMi: 5 minutes); a lock whose owner is unbound goes after ``bind_timeout``."""
    lock_wait: float = pydantic.Field(default=20.0, ge=0)
    """How long a bind waits for a node lock held by another pod before giving up."""
    lock_clock_skew: float = pydantic.Field(default=30.0, ge=0)
    """A node lock dated further than this in the future is invalid (a wrong clock wrote it)."""
    bind_timeout: float = pydantic.Field(default=25.0, gt=0)
    """Every bind answers within this, lock wait included; one cut short is rolled back. A node
    lock whose owner pod is still unbound this long after this replica first saw it is taken
    over (its bind has ended, or died with its replica). The same on every replica."""
    gang_reservation: float = pydantic.Field(default=60.0, gt=0)
    """Seconds a gang member's chips stay reserved on the node its filter chose, waiting for its
    bind (kube-scheduler places a whole PodGroup before binding any member; ``gang``)."""
    release_lock_after_bind: bool = False
    """Release the node lock right after the Binding, for device plugins that never release it."""
    bind_attempts: int = pydantic.Field(default=5, ge=1, le=50)
    """Tries of each API write in a bind that a conflict or an outage may fail."""
    api_timeout: float = pydantic.Field(default=10.0, gt=0)
    """Timeout of one Kubernetes API call (watches excepted)."""
    watch_timeout: int = pydantic.Field(default=300, ge=1)
    """Server-side timeout of one watch request; the cache watches again after it."""
    api_threads: int = pydantic.Field(default=16, ge=1, le=256)
    """Worker threads running Kubernetes API calls (the client is synchronous)."""
    fit_memo: bool = True
    """Remember fit results per unchanged node and request shape (filter then prioritize)."""
    quotas: bool = True
    """Enforce NPU quotas: the NPU entries of ResourceQuotas and the teams of ``tenants_config``."""
    tenants_config: str = pydantic.Field(default="", pattern=r"^([a-z0-9-]+/[a-z0-9.-]+)?$")
    """``namespace/name`` of the tenants ConfigMap (teams, weights, borrowing); empty: no teams."""
    lock_namespace: str = pydantic.Field(
        default="default", pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    )
    """Namespace of the quota Leases that serialise binds across replicas (the chart's own)."""
    reclaim: bool = True
    """Evict borrowers' pods so that teams below their nominal get their capacity back."""
    reclaim_interval: float = pydantic.Field(default=5.0, gt=0)
    """Seconds between two rounds of the reclaimer (on the replica that holds its Lease)."""
    reclaim_lease_seconds: float = pydantic.Field(default=15.0, ge=1)
    """Duration of the ``vnpu-reclaimer`` Lease: a replica that stops renewing it for this long
    is taken over; must exceed ``reclaim_interval``."""
    log_level: str = pydantic.Field(default="info", pattern="^(debug|info|warning|error)$")
    """Log level: debug, info, warning or error."""

    @property
    def extender_tls(self) -> bool:
        """Whether the extender listener is HTTPS and asks clients for certificates."""
        return self.extender_client_ca is not None

    @pydantic.model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise _Rule(
                "tls_key", self.tls_key, "tls_cert and tls_key are given together or not at all"
            )
        extender = (self.extender_tls_cert, self.extender_tls_key, self.extender_client_ca)
        if any(item is None for item in extender) and any(item is not None for item in extender):
            raise _Rule(
                "extender_client_ca",
                self.extender_client_ca,
                "extender_tls_cert, extender_tls_key and extender_client_ca are given together "
                "or not at all",
            )
        ports = [("port", self.port)]
        if self.tls_cert is not None:
            ports.append(("webhook_port", self.webhook_port))
        if self.metrics_port is not None:
            ports.append(("metrics_port", self.metrics_port))
        for i, (name, number) in enumerate(ports):
            for other, taken in ports[:i]:
                if number == taken != 0:
                    raise _Rule(name, number, f"{other} and {name} must differ (both {number})")
        return self

    @pydantic.model_validator(mode="after")
    def _extender_guarded(self) -> Settings:
        if not (_loopback(self.host) or self.extender_tls or self.allow_unauthenticated_extender):
            raise _Rule(
                "host",
                self.host,
                "not a loopback address: whoever reaches it could bind pods; listen on "
                "127.0.0.1 (kube-scheduler in the same pod) or give extender_client_ca, "
                "extender_tls_cert and extender_tls_key (mutual TLS)",
            )
        return self

    @pydantic.model_validator(mode="after")
    def _bind_deadline(self) -> Settings:
        if self.bind_timeout <= self.lock_wait + BIND_ROLLBACK_SECONDS:
            raise _Rule(
                "bind_timeout",
                self.bind_timeout,
                f"must exceed lock_wait ({self.lock_wait:g}) by more than "
                f"{BIND_ROLLBACK_SECONDS:g} s: a bind may wait lock_wait for a node lock, then "
                f"writes the Binding, and keeps its last {BIND_ROLLBACK_SECONDS:g} s for rolling "
                "back",
            )
        return self

    @pydantic.model_validator(mode="after")
    def _gang_reservation(self) -> Settings:
        if self.gang_reservation <= self.bind_timeout:
            raise _Rule(
                "gang_reservation",
                self.gang_reservation,
                f"must exceed bind_timeout ({self.bind_timeout:g}): a member's bind may queue "
                "behind the other members' binds to its node for that long, and must find its "
                "chips still reserved",
            )
        return self

    @pydantic.model_validator(mode="after")
    def _reclaim_lease(self) -> Settings:
        if self.reclaim_lease_seconds <= self.reclaim_interval:
            raise _Rule(
                "reclaim_lease_seconds",
                self.reclaim_lease_seconds,
                f"must exceed reclaim_interval ({self.reclaim_interval:g}): the Lease is renewed "
                "once per round, and would expire between two rounds",
            )
        return self


class _Rule(ValueError):
    """A rule between settings broken, naming the setting to change and its value."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        super().__init__(problem)
        self.field = field
        self.value = value
        self.problem = problem


def _loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_FLAGS: tuple[tuple[str, str], ...] = (
    ("--kubeconfig", "kubeconfig file (default: in-cluster service account)"),
    ("--host", "extender listen address (default 127.0.0.1)"),
    ("--port", "extender port: extender verbs, webhook routes, probes, metrics (default 8888)"),
    ("--extender-tls-cert", "PEM certificate: the extender listener serves HTTPS"),
    ("--extender-tls-key", "PEM private key of --extender-tls-cert"),
    ("--extender-client-ca", "PEM CA: the extender listener requires client certificates"),
    ("--webhook-host", "webhook listen address (default 0.0.0.0)"),
    ("--webhook-port", "webhook HTTPS port, with --tls-cert/--tls-key (default 8443)"),
    ("--tls-cert", "PEM certificate for the HTTPS (webhook) listener"),
    ("--tls-key", "PEM private key for the HTTPS (webhook) listener"),
    ("--metrics-host", "metrics listen address (default 0.0.0.0)"),
    ("--metrics-port", "port for /healthz, /readyz and /metrics only (default: none)"),
    ("--max-body-bytes", "largest body on the extender and metrics listeners (default 80 MiB)"),
    ("--webhook-max-body-bytes", "largest body on the webhook listener (default 7 MiB)"),
    ("--device-config", "HAMi device-config YAML, reloaded when it changes"),
    ("--config-poll-seconds", "how often the device config is checked (default 5)"),
    ("--mode", "classic (this extender and the device plugins) or dra (default classic)"),
    ("--policy", "default policy: best-fit, binpack or spread (default best-fit)"),
    ("--handshake-timeout", "seconds after which a silent device plugin's node is unavailable"),
    ("--scheduler-name", "schedulerName the webhook sets on NPU pods (default vnpu-scheduler)"),
    ("--lock-ttl", "seconds after which a bound pod's node lock may be taken over (default 300)"),
    ("--lock-wait", "seconds a bind waits for a busy node lock (default 20)"),
    ("--lock-clock-skew", "seconds a node lock may be dated in the future (default 30)"),
    (
        "--bind-timeout",
        "seconds one bind may take before it is rolled back; an unbound pod's node lock is "
        "taken over after it (default 25; the same on every replica)",
    ),
    ("--bind-attempts", "tries per API write in a bind (default 5)"),
    (
        "--gang-reservation",
        "seconds a PodGroup member's chips stay reserved for its bind (default 60; more than "
        "--bind-timeout)",
    ),
    ("--api-timeout", "seconds per Kubernetes API call (default 10)"),
    ("--watch-timeout", "seconds per watch request (default 300)"),
    ("--api-threads", "threads for Kubernetes API calls (default 16)"),
    ("--tenants-config", "namespace/name of the tenants ConfigMap (default: no teams)"),
    ("--lock-namespace", "namespace of the quota Leases binds take (default: default)"),
    ("--reclaim-interval", "seconds between reclaim rounds (default 5)"),
    ("--reclaim-lease-seconds", "duration of the vnpu-reclaimer Lease (default 15)"),
    ("--log-level", "debug, info, warning or error (default info)"),
)


def parser() -> argparse.ArgumentParser:
    """The command line; every flag also reads ``VNPU_SCHED_<FLAG>`` from the environment."""
    cli = argparse.ArgumentParser(
        prog="vnpu-scheduler",
        description="kube-scheduler extender and admission webhook for Ascend NPUs",
    )
    for flag, text in _FLAGS:
        cli.add_argument(flag, default=None, help=text)
    cli.add_argument(
        "--release-lock-after-bind",
        action="store_const",
        const=True,
        default=None,
        help="release the node lock after binding (device plugins that never release it)",
    )
    cli.add_argument(
        "--allow-unauthenticated-extender",
        action="store_const",
        const=True,
        default=None,
        help="serve the extender on a non-loopback address without client certificates (unsafe)",
    )
    cli.add_argument(
        "--no-quotas",
        dest="quotas",
        action="store_const",
        const=False,
        default=None,
        help="do not read or enforce NPU quotas (ResourceQuota NPU entries, teams)",
    )
    cli.add_argument(
        "--no-reclaim",
        dest="reclaim",
        action="store_const",
        const=False,
        default=None,
        help="never evict borrowers' pods for teams below their nominal",
    )
    cli.add_argument(
        "--no-fit-memo",
        dest="fit_memo",
        action="store_const",
        const=False,
        default=None,
        help="recompute every fit (for measuring)",
    )
    return cli


def from_args(argv: Sequence[str] | None = None) -> Settings:
    """Settings from flags over ``VNPU_SCHED_*`` over defaults; SettingsError names a bad field."""
    given = {k: v for k, v in vars(parser().parse_args(argv)).items() if v is not None}
    try:
        return Settings(**given)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        rule = (first.get("ctx") or {}).get("error")
        if isinstance(rule, _Rule):
            raise errors.SettingsError(rule.field, rule.value, rule.problem) from exc
        field = ".".join(str(p) for p in first["loc"]) or "(settings)"
        raise errors.SettingsError(field, first.get("input"), first["msg"]) from exc
