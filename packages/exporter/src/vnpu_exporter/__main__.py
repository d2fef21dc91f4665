"""``vnpu-exporter``: read the settings, open the sources, serve /metrics until told to stop.

Exit status 2 means a setting (flag, environment variable, kubeconfig, simulated node
files) is invalid and 1 that the NPU driver library cannot be loaded; the message on stderr
names the field or the paths tried. SIGTERM and SIGINT stop it cleanly (status 0).
"""

from __future__ import annotations

import signal
import sys
import threading
import typing
from collections.abc import Callable, Sequence

import prometheus_client
import structlog
from prometheus_client import CollectorRegistry

from vnpu_exporter import (
    claims,
    collector,
    errors,
    kubelet,
    ownership,
    pods,
    sampler,
    server,
    settings,
    telemetry,
)
from vnpu_npu import backend
from vnpu_npu import errors as npu_errors
from vnpu_npu.dcmi import backend as dcmi_backend
from vnpu_npu.sim import backend as sim_backend
from vnpu_service import logs


def open_backend(config: settings.Settings) -> backend.Backend:
    """The NPU backend the settings name; NpuError when it cannot be opened."""
    if config.backend is settings.BackendKind.SIM:
        assert config.sim_dir is not None
        return sim_backend.SimBackend(config.sim_dir)
    library = str(config.dcmi_library) if config.dcmi_library else None
    return dcmi_backend.DcmiBackend(library)


def build(
    config: settings.Settings, npu: backend.Backend
) -> tuple[sampler.Sampler, server.MetricsServer]:
    """The sampler and the HTTP server for ``config`` (neither started)."""
    pod_source = (
        pods.KubePods.connect(config.kubeconfig, config.api_timeout) if config.kubernetes else None
    )
    resources = (
        kubelet.PodResourcesClient(config.pod_resources_socket, config.api_timeout)
        if config.pod_resources
        else None
    )
    ledger = (
        ownership.LedgerFile(config.device_plugin_state_dir)
        if config.device_plugin_state_dir
        else None
    )
    claim_ledger = claims.ClaimLedgerFile(config.dra_state_dir) if config.dra_state_dir else None
    registry = CollectorRegistry()
    instruments = telemetry.Telemetry(registry)
    reader = sampler.Sampler(
        npu,
        config.node_name,
        instruments,
        pod_source=pod_source,
        pod_resources=resources,
        ledger_source=ledger,
        claim_source=claim_ledger,
        intervals=config.intervals,
        stale_factor=config.stale_factor,
    )
    registry.register(
        collector.NodeCollector(
            reader.snapshot,
            config.node_name,
            npu_exporter_compat=config.npu_exporter_compat,
            backend_name=config.backend.value,
        )
    )
    listener = server.MetricsServer(registry, instruments, reader.stuck, config.host, config.port)
    return reader, listener


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = settings.from_args(argv)
    except errors.SettingsError as exc:
        print(f"vnpu-exporter: {exc}", file=sys.stderr)
        return 2
    logs.configure(config.log_level)
    # No *_created series: Prometheus does not read them. (The function has no type hints.)
    typing.cast(Callable[[], None], prometheus_client.disable_created_metrics)()
    log = structlog.get_logger("vnpu_exporter")
    try:
        npu = open_backend(config)
    except npu_errors.SimError as exc:
        print(f"vnpu-exporter: --sim-dir {config.sim_dir}: {exc}", file=sys.stderr)
        return 2
    except npu_errors.NpuError as exc:
        print(f"vnpu-exporter: cannot open the NPU driver: {exc}", file=sys.stderr)
        return 1
    try:
        reader, listener = build(config, npu)
    except errors.SettingsError as exc:
        print(f"vnpu-exporter: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"vnpu-exporter: cannot listen on {config.host}:{config.port}: {exc}", file=sys.stderr
        )
        return 2
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    reader.start()
    listener.start()
    log.info("serving", url=listener.url, node=config.node_name, backend=config.backend.value)
    done.wait()
    log.info("stopping")
    listener.stop()
    reader.stop()
    reader.close()
    npu.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
