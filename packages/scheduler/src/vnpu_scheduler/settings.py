"""The service's settings: one pydantic-settings class, read from ``VNPU_SCHED_*`` and flags.

``__main__`` builds ``Settings`` once with ``from_args`` (flags override the environment,
the environment overrides the defaults) and passes it down; tests build it directly.
An invalid value fails at start with ``errors.SettingsError`` naming the field.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import pydantic
from pydantic_settings import BaseSettings, SettingsConfigDict

from vnpu_core import requests
from vnpu_scheduler import errors


class Settings(BaseSettings):
    """Everything the scheduler can be told; durations are in seconds."""

    model_config = SettingsConfigDict(env_prefix="VNPU_SCHED_", extra="forbid", frozen=True)

    kubeconfig: pydantic.FilePath | None = None
    """Kubeconfig file; unset means the in-cluster service account."""
    host: str = "0.0.0.0"
    """Address the HTTP listeners bind to."""
    port: int = pydantic.Field(default=8888, ge=0, le=65535)
    """Plain HTTP port of the extender verbs, probes and metrics (0 picks a free port)."""
    webhook_port: int = pydantic.Field(default=8443, ge=0, le=65535)
    """HTTPS port serving the same routes with ``tls_cert``/``tls_key`` (for the webhook)."""
    tls_cert: pydantic.FilePath | None = None
    """PEM certificate (chain) of the HTTPS listener; the webhook needs it."""
    tls_key: pydantic.FilePath | None = None
    """PEM private key of ``tls_cert``."""
    device_config: pydantic.FilePath | None = None
    """HAMi device-config YAML (the ``vnpus`` document); unset means the built-in chip models."""
    config_poll_seconds: float = pydantic.Field(default=5.0, gt=0)
    """How often the device-config file is checked for changes."""
    policy: requests.Policy = requests.Policy.DEFAULT
    """Chip and node policy for pods that name none: best-fit, binpack or spread."""
    handshake_timeout: float = pydantic.Field(default=60.0, gt=0)
    """A node whose device plugin has not reported for longer is unavailable (HAMi: 60 s)."""
    scheduler_name: str = pydantic.Field(default="vnpu-scheduler", min_length=1)
    """The kube-scheduler profile the webhook assigns NPU pods to."""
    lock_ttl: float = pydantic.Field(default=300.0, gt=0)
    """Age after which a node lock may be taken over (HAMi: 5 minutes)."""
    lock_wait: float = pydantic.Field(default=20.0, ge=0)
    """How long a bind waits for a node lock held by another pod before giving up."""
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
    log_level: str = pydantic.Field(default="info", pattern="^(debug|info|warning|error)$")
    """Log level: debug, info, warning or error."""

    @pydantic.model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key are given together or not at all")
        if self.tls_cert is not None and self.port == self.webhook_port != 0:
            raise ValueError(f"port and webhook_port must differ (both {self.port})")
        return self


_FLAGS: tuple[tuple[str, str], ...] = (
    ("--kubeconfig", "kubeconfig file (default: in-cluster service account)"),
    ("--host", "listen address (default 0.0.0.0)"),
    ("--port", "HTTP port for the extender, probes and metrics (default 8888)"),
    ("--webhook-port", "HTTPS port, served when --tls-cert/--tls-key are given (default 8443)"),
    ("--tls-cert", "PEM certificate for the HTTPS (webhook) listener"),
    ("--tls-key", "PEM private key for the HTTPS (webhook) listener"),
    ("--device-config", "HAMi device-config YAML, reloaded when it changes"),
    ("--config-poll-seconds", "how often the device config is checked (default 5)"),
    ("--policy", "default policy: best-fit, binpack or spread (default best-fit)"),
    ("--handshake-timeout", "seconds after which a silent device plugin's node is unavailable"),
    ("--scheduler-name", "schedulerName the webhook sets on NPU pods (default vnpu-scheduler)"),
    ("--lock-ttl", "seconds after which a node lock may be taken over (default 300)"),
    ("--lock-wait", "seconds a bind waits for a busy node lock (default 20)"),
    ("--bind-attempts", "tries per API write in a bind (default 5)"),
    ("--api-timeout", "seconds per Kubernetes API call (default 10)"),
    ("--watch-timeout", "seconds per watch request (default 300)"),
    ("--api-threads", "threads for Kubernetes API calls (default 16)"),
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
        field = ".".join(str(p) for p in first["loc"]) or "(settings)"
        raise errors.SettingsError(field, first.get("input"), first["msg"]) from exc
