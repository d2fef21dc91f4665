"""The exporter's settings: one pydantic-settings class, read from ``VNPU_EXP_*`` and flags.

``__main__`` builds ``Settings`` once with ``from_args`` (flags override the environment,
the environment overrides the defaults) and passes it down; tests build it directly. An
invalid value fails at start with ``errors.SettingsError`` naming the field and the value.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

import pydantic
from pydantic_settings import BaseSettings, SettingsConfigDict

from vnpu_exporter import errors, metrics
from vnpu_kubelet_api import constants


class BackendKind(StrEnum):
    DCMI = "dcmi"  # libdcmi.so through ctypes: a real Ascend node
    SIM = "sim"  # a simulated node directory (--sim-dir)


class Settings(BaseSettings):
    """Everything the exporter can be told; durations are in seconds."""

    model_config = SettingsConfigDict(env_prefix="VNPU_EXP_", extra="forbid", frozen=True)

    node_name: str = pydantic.Field(
        min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
    )
    """This node's name (the downward API's spec.nodeName); pods are those bound to it."""
    backend: BackendKind = BackendKind.DCMI
    """How chips are read: dcmi (libdcmi.so) or sim (a simulated node, needs sim_dir)."""
    sim_dir: pydantic.DirectoryPath | None = None
    """The simulated node's directory (the device plugin's --sim-dir)."""
    dcmi_library: pydantic.FilePath | None = None
    """libdcmi.so to load; unset searches LD_LIBRARY_PATH, the driver's paths, then ldconfig."""
    pod_resources_socket: Path = Path(constants.POD_RESOURCES_SOCKET)
    """The kubelet's PodResources v1 socket."""
    pod_resources: bool = True
    """Read the PodResources socket at all (off: attribution from pod annotations only)."""
    kubeconfig: pydantic.FilePath | None = None
    """Kubeconfig file; unset means the in-cluster service account."""
    kubernetes: bool = True
    """Read pods from the Kubernetes API at all (off: chip metrics only, no allocations)."""
    device_plugin_state_dir: Path | None = None
    """The device plugin's --state-dir, to read its vNPU ownership ledger (managed mode)."""
    dra_state_dir: Path | None = None
    """The DRA driver's --state-dir, to read its claim ledger (DRA mode): vNPUs and soft slices."""
    host: str = "0.0.0.0"
    """Address the HTTP listener binds to."""
    port: int = pydantic.Field(default=9400, ge=0, le=65535)
    """Port of /metrics and /healthz (0 picks a free port)."""
    npu_exporter_compat: bool = False
    """Also emit npu-exporter's metric names and labels."""
    intervals: dict[metrics.Group, float] = {}
    """Refresh interval per group, overriding the defaults (sampler.DEFAULT_INTERVALS)."""
    stale_factor: float = pydantic.Field(default=3.0, ge=1.5, le=100)
    """A group not refreshed for this many intervals is left out of scrapes until it is."""
    api_timeout: float = pydantic.Field(default=10.0, gt=0)
    """Timeout of one Kubernetes API or PodResources call."""
    log_level: str = pydantic.Field(default="info", pattern="^(debug|info|warning|error)$")
    """Log level: debug, info, warning or error."""

    @pydantic.field_validator("intervals")
    @classmethod
    def _positive(cls, value: dict[metrics.Group, float]) -> dict[metrics.Group, float]:
        for group, seconds in value.items():
            if not 0.05 <= seconds <= 86400:
                raise ValueError(f"{group.value}: an interval is 0.05-86400 seconds, got {seconds}")
        return value

    @pydantic.model_validator(mode="after")
    def _backend_needs(self) -> Settings:
        if self.backend is BackendKind.SIM and self.sim_dir is None:
            raise ValueError("backend sim needs sim_dir (--sim-dir)")
        if self.backend is BackendKind.DCMI and self.sim_dir is not None:
            raise ValueError("sim_dir is only for backend sim (--backend sim)")
        return self


_FLAGS: tuple[tuple[str, str], ...] = (
    ("--node-name", "this node's name (required)"),
    ("--backend", "dcmi (default) or sim"),
    ("--sim-dir", "simulated node directory (with --backend sim)"),
    ("--dcmi-library", "path of libdcmi.so (default: searched)"),
    (
        "--pod-resources-socket",
        f"kubelet PodResources socket (default {constants.POD_RESOURCES_SOCKET})",
    ),
    ("--kubeconfig", "kubeconfig file (default: in-cluster service account)"),
    ("--device-plugin-state-dir", "the device plugin's --state-dir, for its vNPU ownership ledger"),
    ("--dra-state-dir", "the DRA driver's --state-dir, for its claim ledger (DRA mode)"),
    ("--host", "listen address (default 0.0.0.0)"),
    ("--port", "port of /metrics and /healthz (default 9400)"),
    ("--stale-factor", "intervals after which a group's readings are dropped (default 3)"),
    ("--api-timeout", "seconds per Kubernetes API or PodResources call (default 10)"),
    ("--log-level", "debug, info, warning or error (default info)"),
)


def _interval(text: str) -> tuple[str, str]:
    group, sep, seconds = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"--interval {text!r}: use GROUP=SECONDS")
    return group, seconds


def parser() -> argparse.ArgumentParser:
    """The command line; every flag also reads ``VNPU_EXP_<FLAG>`` from the environment."""
    cli = argparse.ArgumentParser(
        prog="vnpu-exporter",
        description="Prometheus metrics of one node's Ascend NPUs, vNPUs and the pods that hold them",
    )
    for flag, text in _FLAGS:
        cli.add_argument(flag, default=None, help=text)
    groups = ", ".join(g.value for g in metrics.Group)
    cli.add_argument(
        "--interval",
        dest="intervals",
        type=_interval,
        action="append",
        default=None,
        help=f"GROUP=SECONDS refresh interval, repeatable; groups: {groups}",
    )
    switches = (
        ("--npu-exporter-compat", "npu_exporter_compat", True, "also emit npu-exporter's names"),
        ("--no-kubernetes", "kubernetes", False, "do not read pods (chip metrics only)"),
        ("--no-pod-resources", "pod_resources", False, "do not read the PodResources socket"),
    )
    for flag, dest, const, text in switches:
        cli.add_argument(
            flag, dest=dest, action="store_const", const=const, default=None, help=text
        )
    return cli


def from_args(argv: Sequence[str] | None = None) -> Settings:
    """Settings from flags over ``VNPU_EXP_*`` over defaults; SettingsError names a bad field."""
    given = {k: v for k, v in vars(parser().parse_args(argv)).items() if v is not None}
    if "intervals" in given:
        given["intervals"] = dict(given["intervals"])
    try:
        return Settings(**given)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(settings)"
        raise errors.SettingsError(field, first.get("input"), first["msg"]) from exc
