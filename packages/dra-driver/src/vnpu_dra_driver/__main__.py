"""``vnpu-dra-driver``: print or publish a node's ResourceSlices, or run the node agent.

    vnpu-dra-driver slices  --node NODE (--sim-dir DIR | --dcmi-library PATH) [--soft] [--server KIND]
    vnpu-dra-driver publish --node NODE ... [--kubeconfig FILE] [--interval SECONDS]
    vnpu-dra-driver serve   --node NODE ... [--kubelet-dir DIR] [--cdi-dir DIR] [--state-dir DIR]
                            [--hami-core-dir DIR] [--hami-shared-dir DIR]
                            [--interval SECONDS] [--reconcile-interval SECONDS]

``slices`` prints the slices as one JSON list (no API needed: what the driver would
publish). ``publish`` writes them once, or every ``--interval`` seconds until stopped,
re-reading the chips and their health each time. ``serve`` is the node agent: it reconciles
the claim ledger with the API, serves the kubelet plugin (``plugin``) and republishes the
slices every ``--interval`` seconds (default 30) and at once when the kubelet registers it (a
kubelet that starts, or loses the driver for 30 s, deletes the node's slices) until SIGTERM;
every ``--reconcile-interval`` seconds (default 300) it reconciles the ledger again, so a
claim the kubelet never unprepared does not hold its vNPUs. With ``--soft`` its soft slices'
containers get hami-vnpu-core from ``--hami-core-dir`` and ``--hami-shared-dir``. The chip
model is the chips' own (the catalog entry of the first chip) unless ``--model`` names one.
Exit status: 0 done, 1 the chips or the API failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import structlog

from vnpu_core import catalog, topology
from vnpu_dra_driver import (
    cdi,
    chips,
    cluster,
    errors,
    ledger,
    plugin,
    prepare,
    publisher,
    slices,
)
from vnpu_npu import backend
from vnpu_npu import errors as npu_errors
from vnpu_npu.dcmi import backend as dcmi_backend
from vnpu_npu.sim import backend as sim_backend
from vnpu_service import kubeapi, logs

log = structlog.get_logger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vnpu-dra-driver", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (
        ("slices", "print the slices as JSON"),
        ("publish", "publish them"),
        ("serve", "serve the kubelet plugin and publish the slices"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("--node", required=True, help="node name (names the pool)")
        source = command.add_mutually_exclusive_group(required=True)
        source.add_argument("--sim-dir", type=Path, help="simulated node directory")
        source.add_argument("--dcmi-library", help="libdcmi.so path ('' for the usual places)")
        command.add_argument("--model", help="catalog model, e.g. 310P3 (default: the chips')")
        command.add_argument("--soft", action="store_true", help="publish soft-mode devices")
        command.add_argument(
            "--server", choices=[k.value for k in topology.ServerKind], help="server layout"
        )
    for name in ("publish", "serve"):
        command = commands.choices[name]
        command.add_argument("--kubeconfig", type=Path, help="default: the pod's service account")
        command.add_argument("--log-level", default="info", help="debug, info, warning, error")
    publish = commands.choices["publish"]
    publish.add_argument("--interval", type=float, help="republish every SECONDS (default: once)")
    serve = commands.choices["serve"]
    serve.add_argument("--interval", type=float, default=30.0, help="republish every SECONDS")
    serve.add_argument(
        "--reconcile-interval",
        type=float,
        default=300.0,
        help="unprepare claims the API no longer has allocated every SECONDS (default 300)",
    )
    serve.add_argument(
        "--kubelet-dir", type=Path, default=Path("/var/lib/kubelet"), help="the kubelet's root"
    )
    serve.add_argument(
        "--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="where CDI specs go"
    )
    serve.add_argument(
        "--state-dir",
        type=Path,
        default=Path("/var/lib/vnpu-dra-driver"),
        help="where the claim ledger is kept",
    )
    serve.add_argument(
        "--hami-core-dir",
        type=Path,
        default=Path("/usr/local/hami-vnpu-core"),
        help="host directory of hami-vnpu-core: libvnpu.so, ld.so.preload, the soft"
        " requests' directories (with --soft)",
    )
    serve.add_argument(
        "--hami-shared-dir",
        type=Path,
        default=Path("/usr/local/hami-shared-region"),
        help="host directory of hami-vnpu-core's shared region (with --soft)",
    )
    return parser


def _backend(args: argparse.Namespace) -> backend.Backend:
    if args.sim_dir is not None:
        return sim_backend.SimBackend(args.sim_dir)
    return dcmi_backend.DcmiBackend(args.dcmi_library or None)


def _model(args: argparse.Namespace, found: Sequence[slices.Chip]) -> catalog.ChipModel:
    name = args.model or (found[0].info.model if found else "")
    model = catalog.BUILTIN.by_chip_name(name)
    if model is None:
        raise errors.SliceError("model", name, "not a catalog model")
    return model


def _build(args: argparse.Namespace, npu: backend.Backend) -> tuple[slices.Json, ...]:
    found = chips.read(npu)
    server = topology.ServerKind(args.server) if args.server else None
    return slices.build(args.node, found, _model(args, found), soft=args.soft, server=server)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        npu = _backend(args)
        if args.command == "slices":
            json.dump(list(_build(args, npu)), sys.stdout, indent=2)
            sys.stdout.write("\n")
            return 0
        logs.configure(args.log_level)
        if args.command == "serve":
            return _serve(args, npu)
        return _publish(args, npu)
    except (errors.DraDriverError, npu_errors.NpuError, kubeapi.KubeError) as exc:
        sys.stderr.write(f"vnpu-dra-driver: {exc}\n")
        return 1


def _stop_on_signals(*woken: threading.Event) -> threading.Event:
    """An event set by SIGTERM or SIGINT (which set ``woken`` too)."""
    stop = threading.Event()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        log.info("signal_received", signal=signal.Signals(number).name)
        stop.set()
        for event in woken:
            event.set()

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, on_signal)
    return stop


def _serve(args: argparse.Namespace, npu: backend.Backend) -> int:
    api = cluster.KubeSlices.connect(args.kubeconfig)
    wake = threading.Event()  # a resync now: the kubelet registered us, or a signal came
    stop = _stop_on_signals(wake)
    try:
        model = _model(args, chips.read(npu))
        book = ledger.Ledger(args.state_dir)
        soft = cdi.SoftPaths(args.hami_core_dir, args.hami_shared_dir) if args.soft else None
        preparer = prepare.Preparer(args.node, npu, model, api, book, args.cdi_dir, soft=soft)
        preparer.reconcile()
        reconciled = time.monotonic()
        server = plugin.Plugin(preparer, args.kubelet_dir, on_registered=wake.set).start()
        try:
            pool = publisher.Publisher(api)
            while True:
                try:
                    pool.publish(args.node, _build(args, npu))
                except (errors.PublishError, npu_errors.NpuError) as exc:
                    log.warning("publish_failed", node=args.node, error=str(exc))
                if time.monotonic() - reconciled >= args.reconcile_interval:
                    preparer.reconcile()
                    reconciled = time.monotonic()
                wake.wait(args.interval)
                wake.clear()
                if stop.is_set():
                    return 0
        finally:
            server.stop()
    finally:
        api.close()
        npu.close()


def _publish(args: argparse.Namespace, npu: backend.Backend) -> int:
    api = cluster.KubeSlices.connect(args.kubeconfig)
    stop = _stop_on_signals()
    try:
        pool = publisher.Publisher(api)
        while True:
            try:
                pool.publish(args.node, _build(args, npu))
            except errors.PublishError as exc:
                if args.interval is None or not exc.retryable:
                    raise
                log.warning("publish_failed", node=args.node, error=str(exc))
            if args.interval is None or stop.wait(args.interval):
                return 0
    finally:
        api.close()
        npu.close()


if __name__ == "__main__":
    sys.exit(main())
