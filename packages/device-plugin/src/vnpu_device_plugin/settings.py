"""The device plugin's settings: one pydantic-settings class, read from ``VNPU_DP_*`` and flags.

``__main__`` builds ``Settings`` once with ``from_args`` (flags override the environment,
the environment overrides the defaults) and passes it to ``plugin.Plugin``; tests build it
directly. An invalid value fails at start with ``errors.SettingsError`` naming the field.
``--crash-at`` is hidden: it names a point where the process dies on purpose, for the
tests that kill the plugin between two steps of an Allocate (``crashpoints``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path

import pydantic
from pydantic_settings import BaseSettings, SettingsConfigDict

from vnpu_core import topology
from vnpu_device_plugin import errors
from vnpu_kubelet_api import constants


class BackendKind(StrEnum):
    DCMI = "dcmi"  # libdcmi.so through ctypes: a real Ascend node
    SIM = "sim"  # a simulated node directory (--sim-dir)


class VnpuMode(StrEnum):
    """Who creates hard vNPUs: this plugin in Allocate, or ascend-docker-runtime (HAMi's way)."""

    MANAGED = "managed"
    RUNTIME = "runtime"


class Settings(BaseSettings):
    """Everything the device plugin can be told; durations are in seconds."""

    model_config = SettingsConfigDict(env_prefix="VNPU_DP_", extra="forbid", frozen=True)

    node_name: str = pydantic.Field(min_length=1, max_length=253)
    """This node's name (``VNPU_DP_NODE_NAME``, else ``NODE_NAME`` as HAMi's DaemonSet sets it)."""
    backend: BackendKind = BackendKind.DCMI
    """Where chips are read from: ``dcmi`` (the driver) or ``sim`` (``sim_dir``)."""
    sim_dir: Path | None = None
    """Simulated node directory (``chips.yaml``, ``state.txt``); required with ``backend=sim``."""
    dcmi_library: pydantic.FilePath | None = None
    """libdcmi.so to load; unset searches the driver's usual places."""
    device_config: pydantic.FilePath | None = None
    """HAMi device-config YAML (the ``vnpus`` document); unset means the built-in chip models."""
    device_plugin_dir: Path = Path(constants.DEVICE_PLUGIN_PATH)
    """The kubelet's device plugin directory: ``kubelet.sock`` is there, our socket goes there."""
    pod_resources_socket: Path = Path(constants.POD_RESOURCES_SOCKET)
    """The kubelet's PodResources socket; the reconciler asks it which pods still run here."""
    kubeconfig: pydantic.FilePath | None = None
    """Kubeconfig file; unset means the in-cluster service account."""
    state_dir: Path = Path("/var/lib/vnpu/device-plugin")
    """Directory of the vNPU ownership ledger (``ledger.json``); must survive restarts."""
    vnpu_mode: VnpuMode = VnpuMode.MANAGED
    """``managed``: the plugin creates vNPUs in Allocate; ``runtime``: ascend-docker-runtime does."""
    hami_vnpu_core: bool | None = None
    """This node runs hami-vnpu-core (soft slices); unset takes ``vnpus.hamiVnpuCore`` of the device config."""
    server_kind: topology.ServerKind | None = None
    """Server layout published as ``vnpu.io/server``; unset: the simulated node's, else the model's usual one."""
    metrics_host: str = "0.0.0.0"
    """Address of the ``/metrics`` and ``/healthz`` listener."""
    metrics_port: int = pydantic.Field(default=9395, ge=0, le=65535)
    """Port of the ``/metrics`` and ``/healthz`` listener (0 picks a free port)."""
    health_interval: float = pydantic.Field(default=5.0, gt=0)
    """Seconds between two health polls of every chip."""
    report_interval: float = pydantic.Field(default=30.0, gt=0)
    """Seconds between two publications of the node annotations when nothing changes (HAMi: 30)."""
    report_retry: float = pydantic.Field(default=5.0, gt=0)
    """Seconds before publishing again after a failed publication (HAMi: 5)."""
    report_time_offset: float = pydantic.Field(default=1.0, ge=0)
    """Seconds added to the handshake's ``Reported_`` time (HAMi's ``--report_time_offset``)."""
    reconcile_interval: float = pydantic.Field(default=60.0, gt=0)
    """Seconds between two passes comparing driver vNPUs, the ledger and the pods."""
    pod_watch: bool = True
    """Watch this node's pods and reclaim a deleted or finished pod's vNPUs at once (off: only
    an Allocate short of room and the periodic pass reclaim)."""
    unowned_grace: float = pydantic.Field(default=300.0, ge=0)
    """Seconds an idle vNPU no record owns is left alone before it is destroyed."""
    allocate_wait: float = pydantic.Field(default=5.0, ge=0)
    """Seconds an Allocate reads again while its pod shows no decision yet, or while more than
    one pod could be the one and kubelet's records do not settle it, before it fails."""
    place_undecided: bool = False
    """Decide for a pod bound here without a device decision once ``allocate_wait`` has passed
    (``placement``): a peer's scheduler (Volcano's, at every start) may bind NPU pods before it
    reads the node's devices. Off: such a pod is refused, as with vnpu-scheduler, where a
    missing decision means something is wrong."""
    api_timeout: float = pydantic.Field(default=10.0, gt=0)
    """Timeout of one Kubernetes API call."""
    api_attempts: int = pydantic.Field(default=5, ge=1, le=50)
    """Tries of one API call that an outage (5xx, 429, no answer) or a conflict fails."""
    hami_core_dir: Path = Path("/usr/local/hami-vnpu-core")
    """Host directory of hami-vnpu-core (libvnpu.so, ld.so.preload, per-container dirs)."""
    hami_shared_dir: Path = Path("/usr/local/hami-shared-region")
    """Host directory of hami-vnpu-core's shared region."""
    log_level: str = pydantic.Field(default="info", pattern="^(debug|info|warning|error)$")
    """Log level: debug, info, warning or error."""
    crash_at: str = ""
    """Hidden, for tests: the crash point where the process exits at once (``crashpoints``)."""

    @pydantic.model_validator(mode="after")
    def _sim_dir_given(self) -> Settings:
        if self.backend is BackendKind.SIM and self.sim_dir is None:
            raise errors.SettingsError("sim_dir", None, "required with backend sim (--sim-dir)")
        return self


_FLAGS: tuple[tuple[str, str], ...] = (
    ("--node-name", "this node's name (default: $NODE_NAME)"),
    ("--backend", "dcmi or sim (default dcmi)"),
    ("--sim-dir", "simulated node directory, with --backend sim"),
    ("--dcmi-library", "libdcmi.so to load (default: search the driver's paths)"),
    ("--device-config", "HAMi device-config YAML (the vnpus document)"),
    ("--device-plugin-dir", "kubelet device plugin directory (default /var/lib/kubelet/device-plugins)"),
    ("--pod-resources-socket", "kubelet PodResources socket (default /var/lib/kubelet/pod-resources/kubelet.sock)"),
    ("--kubeconfig", "kubeconfig file (default: in-cluster service account)"),
    ("--state-dir", "directory of the vNPU ownership ledger (default /var/lib/vnpu/device-plugin)"),
    ("--vnpu-mode", "managed (the plugin creates vNPUs) or runtime (ascend-docker-runtime does)"),
    ("--server-kind", "server layout published as vnpu.io/server (default: detected)"),
    ("--metrics-host", "listen address of /metrics and /healthz (default 0.0.0.0)"),
    ("--metrics-port", "port of /metrics and /healthz (default 9395, 0 picks one)"),
    ("--health-interval", "seconds between chip health polls (default 5)"),
    ("--report-interval", "seconds between node annotation refreshes (default 30)"),
    ("--report-retry", "seconds before retrying a failed node annotation write (default 5)"),
    ("--report-time-offset", "seconds added to the handshake time (default 1)"),
    ("--reconcile-interval", "seconds between vNPU reconciler passes (default 60)"),
    ("--unowned-grace", "seconds before an idle vNPU nobody owns is destroyed (default 300)"),
    ("--allocate-wait", "seconds an Allocate waits for its pod to be settled (default 5)"),
    ("--api-timeout", "seconds per Kubernetes API call (default 10)"),
    ("--api-attempts", "tries per Kubernetes API call (default 5)"),
    ("--hami-core-dir", "host directory of hami-vnpu-core (default /usr/local/hami-vnpu-core)"),
    ("--hami-shared-dir", "host shared region of hami-vnpu-core (default /usr/local/hami-shared-region)"),
    ("--log-level", "debug, info, warning or error (default info)"),
)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The command line; every flag also reads ``VNPU_DP_<FLAG>`` from the environment."""
    cli = argparse.ArgumentParser(
        prog="vnpu-device-plugin",
        description="Kubernetes device plugin for Huawei Ascend NPUs: whole chips, vNPUs, soft slices",
    )
    for flag, text in _FLAGS:
        cli.add_argument(flag, default=None, help=text)
    soft = cli.add_mutually_exclusive_group()
    soft.add_argument(
        "--hami-vnpu-core",
        dest="hami_vnpu_core",
        action="store_const",
        const=True,
        default=None,
        help="this node runs hami-vnpu-core (soft slices); default: the device config's hamiVnpuCore",
    )
    soft.add_argument(
        "--no-hami-vnpu-core",
        dest="hami_vnpu_core",
        action="store_const",
        const=False,
        help="this node does not run hami-vnpu-core",
    )
    watch = cli.add_mutually_exclusive_group()
    watch.add_argument(
        "--pod-watch",
        dest="pod_watch",
        action="store_const",
        const=True,
        default=None,
        help="reclaim the vNPUs of deleted or finished pods at once (default)",
    )
    watch.add_argument(
        "--no-pod-watch",
        dest="pod_watch",
        action="store_const",
        const=False,
        help="reclaim only when an Allocate needs room and on the periodic pass",
    )
    place = cli.add_mutually_exclusive_group()
    place.add_argument(
        "--place-undecided",
        dest="place_undecided",
        action="store_const",
        const=True,
        default=None,
        help="decide for a pod bound here without a device decision (Volcano's scheduler "
        "binds some at every start) after --allocate-wait",
    )
    place.add_argument(
        "--no-place-undecided",
        dest="place_undecided",
        action="store_const",
        const=False,
        help="refuse a pod bound here without a device decision (default)",
    )
    cli.add_argument("--crash-at", default=None, help=argparse.SUPPRESS)
    return cli


def from_args(argv: Sequence[str] | None = None) -> Settings:
    """Settings from flags over ``VNPU_DP_*`` over defaults; SettingsError names a bad field."""
    given = {k: v for k, v in vars(parser().parse_args(argv)).items() if v is not None}
    if "node_name" not in given and "VNPU_DP_NODE_NAME" not in os.environ:
        node = os.environ.get("NODE_NAME")
        if node:
            given["node_name"] = node
    try:
        return Settings(**given)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(settings)"
        if first["type"] == "missing":
            where = f"--{field.replace('_', '-')} or VNPU_DP_{field.upper()}"
            if field == "node_name":
                where += " (or NODE_NAME)"
            raise errors.SettingsError(field, None, f"required: give {where}") from exc
        raise errors.SettingsError(
            field, first.get("input"), first["msg"].removeprefix("Value error, ")
        ) from exc
