"""The device plugin, wired: every part built from ``Settings``, started and stopped in order.

``__main__`` builds one ``Plugin`` and runs it until SIGTERM; tests build it in-process with
their own backend and API (``npu=``, ``api=``). Start-up, in order: open the NPU backend and
read the chips; load the device config; build the inventory; open the ledger and the grant
book (a broken one stops the start); poll health once; reconcile once (so vNPUs left by a crash are settled
before anything is served); publish the node annotations; serve the socket and register
with kubelet; then start the pollers, the reconciler, the pod watch and ``/metrics``. Any failure before serving raises
``errors.SettingsError``, ``errors.LedgerError`` or the backend's ``NpuError``, naming the
cause. ``stop`` undoes it in reverse; in-flight Allocates finish first (one second grace).
"""

from __future__ import annotations

import threading
from pathlib import Path

import structlog

from vnpu_core import catalog, deviceconfig, topology
from vnpu_core import errors as core_errors
from vnpu_device_plugin import (
    allocations,
    cluster,
    crashpoints,
    custody,
    devices,
    environment,
    errors,
    finder,
    grants,
    health,
    holdings,
    ledger,
    lifecycle,
    metrics,
    monitoring,
    placement,
    podresources,
    podwatch,
    publisher,
    reclaim,
    reconciler,
    registration,
    service,
    settings,
)
from vnpu_npu import backend
from vnpu_npu.dcmi import backend as dcmi_backend
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import config as sim_config

log = structlog.get_logger(__name__)


def open_backend(options: settings.Settings) -> backend.Backend:
    if options.backend is settings.BackendKind.SIM:
        assert options.sim_dir is not None
        return sim_backend.SimBackend(options.sim_dir)
    library = str(options.dcmi_library) if options.dcmi_library else None
    return dcmi_backend.DcmiBackend(library)


def load_models(path: Path | None) -> catalog.Catalog:
    """The chip models: the device config's entries over the built-in ones."""
    if path is None:
        return catalog.BUILTIN
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise errors.SettingsError("device_config", str(path), f"cannot read: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise errors.SettingsError(
            "device_config", str(path), f"not UTF-8 text (byte {exc.start})"
        ) from exc
    try:
        loaded = deviceconfig.load(text, source=str(path))
    except core_errors.ConfigError as exc:
        raise errors.SettingsError("device_config", exc.value, str(exc)) from exc
    for warning in loaded.warnings:
        log.warning("device_config", message=warning)
    return loaded.catalog


def server_kind(options: settings.Settings) -> topology.ServerKind | None:
    """The layout to publish: the flag's, else the simulated node's, else None (the model's)."""
    if options.server_kind is not None:
        return options.server_kind
    sim_dir = options.sim_dir if options.backend is settings.BackendKind.SIM else None
    if sim_dir is not None and (sim_dir / sim_config.CHIPS_FILE).exists():
        return sim_config.load(sim_dir).server
    return None


class Plugin:
    """One node's device plugin."""

    def __init__(
        self,
        options: settings.Settings,
        *,
        npu: backend.Backend | None = None,
        api: cluster.Cluster | None = None,
        stats: metrics.Metrics | None = None,
    ) -> None:
        self.options = options
        self.stats = stats or metrics.Metrics()
        self._own_npu = npu is None
        self.npu = npu or open_backend(options)
        try:
            self._build(options, api)
        except BaseException:
            if self._own_npu:
                self.npu.close()
            raise

    def _build(self, options: settings.Settings, api: cluster.Cluster | None) -> None:
        models = load_models(options.device_config)
        soft = options.hami_vnpu_core
        self.inventory = devices.build(
            options.node_name,
            self.npu.chips(),
            models,
            soft=models.soft_mode_default if soft is None else soft,
            server=server_kind(options),
        )
        self._own_api: cluster.KubeCluster | None = None
        if api is None:
            self._own_api = cluster.KubeCluster.connect(options.kubeconfig, options.api_timeout)
            api = self._own_api
        self.api = api
        self.ledger = ledger.Ledger(options.state_dir)
        self.grants = grants.Book(options.state_dir)
        self.board = health.Board()
        self.lock = threading.Lock()
        crash = crashpoints.CrashPoints(options.crash_at)
        self.kubelet_view = podresources.Reader(
            options.pod_resources_socket, self.inventory.resource_name
        )
        keeper = custody.Custody(
            self.npu, self.ledger, self.grants, self.stats, kubelet=self.kubelet_view.listing
        )
        self.vnpus = lifecycle.Lifecycle(self.npu, self.ledger, self.stats, crash, keeper)
        paths = environment.SoftPaths(options.hami_core_dir, options.hami_shared_dir)
        handouts = podresources.Handouts()
        for grant in sorted(self.grants.records(), key=lambda g: g.granted_at):
            if not grant.init:  # what kubelet lists of the pods served before a restart
                handouts.record(grant.pod_uid, grant.device_ids)
        self.reclaimer = reclaim.Reclaimer(
            self.npu,
            self.ledger,
            self.vnpus,
            api,
            self.stats,
            node=options.node_name,
            kubelet=self.kubelet_view.listing,
            handouts=handouts,
            book=self.grants,
            keeper=keeper,
        )
        self.holdings = holdings.Holdings(
            self.inventory,
            self.grants,
            self.ledger,
            api,
            self.stats,
            kubelet=self.kubelet_view.listing,
            attempts=options.api_attempts,
        )
        self.reconciler = reconciler.Reconciler(
            self.npu,
            self.inventory,
            self.ledger,
            self.reclaimer,
            api,
            self.stats,
            lock=self.lock,
            grace=options.unowned_grace,
            interval=options.reconcile_interval,
            paths=paths,
        )
        self.pod_watch = podwatch.PodWatch(
            api,
            options.node_name,
            self.reclaimer,
            self.stats,
            lock=self.lock,
            resync=self.reconciler.poke,
            give_up=options.reconcile_interval,
        )
        self.publisher = publisher.Publisher(
            api,
            self.inventory,
            self.board,
            self.stats,
            interval=options.report_interval,
            retry=options.report_retry,
            offset=options.report_time_offset,
            attempts=options.api_attempts,
            grants=self.holdings.annotation,
        )
        self.grants.on_change = self.publisher.poke
        self.health = health.HealthMonitor(
            self.npu,
            self.inventory,
            self.board,
            self.stats,
            in_use=self._in_use,
            on_change=self.publisher.poke,
            interval=options.health_interval,
        )
        pods = finder.Finder(
            api,
            self.inventory,
            self.stats,
            kubelet=self.kubelet_view.listing,
            book=self.grants,
            attempts=options.api_attempts,
            wait=options.allocate_wait,
        )
        placer = None
        if options.place_undecided:
            placer = placement.Placer(
                api,
                self.inventory,
                models,
                self.holdings,
                self.stats,
                kubelet=self.kubelet_view.listing,
                healthy=self.board.healthy,
                attempts=options.api_attempts,
            )
        self.allocations = allocations.Allocations(
            api,
            self.inventory,
            pods,
            self.vnpus,
            self.reclaimer,
            self.holdings,
            self.grants,
            self.stats,
            crash,
            mode=options.vnpu_mode,
            paths=paths,
            attempts=options.api_attempts,
            lock=self.lock,
            on_failure=self.reconciler.poke,
            placer=placer,
        )
        self.service = service.DevicePluginService(
            self.inventory, self.board, self.allocations, self.stats
        )
        self.link = registration.KubeletLink(
            options.device_plugin_dir,
            self.inventory.socket_name,
            self.inventory.resource_name,
            self.service,
            self.stats,
        )
        self.monitoring = monitoring.MonitoringServer(
            options.metrics_host, options.metrics_port, self.stats.registry, self.problem
        )
        self._started = False

    def _in_use(self, phy_id: int) -> bool:
        """Whether a container uses the chip (for the fault grace of FreeRestartNPU/PreSeparateNPU)."""
        return (
            phy_id in self.reconciler.busy
            or any(r.chip == phy_id for r in self.ledger.records())
            or any(g.chip == phy_id for g in self.grants.records())
        )

    def problem(self) -> str:
        """What keeps the plugin from being healthy, or "" (``/healthz``)."""
        if not self._started:
            return "starting"
        if not self.link.healthy:
            return f"not registered with kubelet at {self.link.kubelet_socket}"
        return ""

    def start(self) -> None:
        inventory = self.inventory
        log.info(
            "plugin_starting",
            node=inventory.node,
            resource=inventory.resource_name,
            chips=[c.phy_id for c in inventory.chips],
            slots=inventory.slots,
            server=inventory.server.value,
            soft=inventory.soft,
            mode=self.options.vnpu_mode.value,
        )
        self.health.poll()
        self.reconciler.run_once()
        self.publisher.start()
        self.link.start()
        self.health.start()
        self.reconciler.start()
        if self.options.pod_watch:
            self.pod_watch.start(self.reconciler.revision)
        self.monitoring.start()
        self._started = True

    def stop(self) -> None:
        """Stop serving and polling; the ledger and the node annotations stay as they are."""
        self._started = False
        self.board.close()
        self.link.stop()
        self.pod_watch.stop()
        self.reconciler.stop()
        self.health.stop()
        self.publisher.stop()
        self.monitoring.stop()
        self.grants.flush()
        self.kubelet_view.close()
        if self._own_api is not None:
            self._own_api.close()
        if self._own_npu:
            self.npu.close()
        log.info("plugin_stopped", node=self.inventory.node)
