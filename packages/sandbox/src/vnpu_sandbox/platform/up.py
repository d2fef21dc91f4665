"""``vnpu-sandbox up``: start the whole platform on one machine and say how to use it.

``vnpu_sandbox.cli`` registers this subcommand. It reads the cluster file (default: the
three-node ``cluster.yaml`` beside this module), refuses a directory whose sandbox still
runs, chooses every port at once (none reused), and brings up the real control plane built
by ``make k8s-bin`` with vnpu's services and the simulated nodes around it
(``bringup.bring_up``), waiting until the sandbox is usable. With ``--kueue`` Kueue runs
beside it (``kueue``: the manager ``make kueue-bin`` builds, its CRDs and webhooks); with
``--scheduler volcano|hami`` a peer's own scheduler places NPU pods instead of vnpu-scheduler
(``peers``, ``volcano``, ``hami``: what ``make peers-bin`` builds, configured by the peer's
chart as ``make peer-charts`` renders it). Then it
prints the kubeconfig to export, every port and where the logs are, and exits, leaving the
sandbox running.

Exit status: 0 up, 1 a component failed (the message names it and shows the end of its log;
everything started is stopped again), 2 bad input (cluster file, directory, flags), 130
interrupted (everything started is stopped).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from vnpu_sandbox.platform import (
    bringup,
    clusterfile,
    components,
    controlplane,
    hami,
    kueue,
    layout,
    peers,
    processes,
    startup,
    volcano,
)

NAME = "up"
HELP = (
    "Start the whole vnpu platform on simulated nodes: the real control plane, "
    "vnpu's services, simulated kubelets."
)

DEFAULT_CLUSTER = Path(__file__).with_name("cluster.yaml")
DEFAULT_DIR = Path(".vnpu-sandbox")
DEFAULT_ALERT_RULES = Path("deploy/alerts/vnpu-alerts.yaml")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from exc
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port from 0 to 65535")
    return value


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 1")
    return int(text)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        type=Path,
        default=DEFAULT_CLUSTER,
        metavar="FILE",
        help="cluster file in the shape `vnpu plan --cluster` reads (default: 3 small nodes)",
    )
    add_dir_flag(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up when not ready after this long (default: %(default)s)",
    )
    parser.add_argument(
        "--api-port", type=_port, default=0, help="kube-apiserver's port (default: a free one)"
    )
    parser.add_argument(
        "--prometheus-port", type=_port, default=0, help="Prometheus port (default: a free one)"
    )
    parser.add_argument(
        "--no-prometheus", action="store_true", help="do not start Prometheus even if installed"
    )
    parser.add_argument(
        "--no-exporters",
        action="store_true",
        help="start no exporter (they are not on the scheduling path; saves ~90 MB per node)",
    )
    parser.add_argument(
        "--schedulers",
        type=_count,
        default=1,
        metavar="N",
        help="N kube-schedulers, each with its own vnpu-scheduler, all active "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--rbac",
        type=Path,
        metavar="FILE",
        help="the chart rendered to YAML (`make chart OUT=FILE`; `make demo` passes it): its "
        "RBAC objects give vnpu's services their rights and its admission policies are applied "
        "(default: cluster-admin, no policies)",
    )
    parser.add_argument(
        "--mode",
        choices=("classic", "dra"),
        default="classic",
        help="classic: vnpu-scheduler as kube-scheduler's extender and a device plugin per "
        "node; dra: kube-scheduler allocates NPUs from the DRA driver npu.vnpu.io on each "
        "node, with vnpu's DeviceClasses and webhook (docs/dra.md) (default: %(default)s)",
    )
    parser.add_argument(
        "--kueue",
        action="store_true",
        help="also run Kueue (sigs.k8s.io/kueue, built by `make kueue-bin`): its CRDs, its "
        "webhooks and its manager, with the batch/job integration",
    )
    parser.add_argument(
        "--scheduler",
        choices=("vnpu", *PEERS),
        default="vnpu",
        help="who schedules NPU pods in classic mode: vnpu (vnpu-scheduler as kube-scheduler's "
        "extender), or a peer as its users run it, with vnpu's device plugin and exporter on "
        "the nodes: volcano (vc-scheduler's deviceshare, pods name schedulerName volcano) or "
        "hami (HAMi's scheduler and webhook); a peer needs `make peers-bin`, --peer-chart and "
        "--rbac (docs/sandbox.md) (default: %(default)s)",
    )
    parser.add_argument(
        "--peer-chart",
        type=Path,
        metavar="FILE",
        help="with --scheduler volcano|hami: the peer's own chart rendered with vnpu's values "
        "for it (`make peer-charts`): its CRDs, service accounts, roles, ConfigMaps and the "
        "arguments its Deployments run with",
    )
    parser.add_argument(
        "--alert-rules",
        type=Path,
        metavar="FILE",
        help=f"alert rules Prometheus loads (default: {DEFAULT_ALERT_RULES} when it exists)",
    )


def add_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        metavar="DIR",
        help="the sandbox's directory: record, kubeconfig, logs, node files (default: %(default)s)",
    )


def _fail(message: str, status: int = 2) -> int:
    print(f"vnpu-sandbox up: {message}", file=sys.stderr)
    return status


def run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    where = layout.Layout.at(args.dir)
    try:
        nodes = clusterfile.read(args.cluster)
        existing = layout.read(where)
    except (clusterfile.ClusterFileError, layout.RecordError) as exc:
        return _fail(str(exc))
    if existing is not None:
        live = [p for p in existing.processes if processes.alive(p)]
        if live:
            return _fail(
                f"a sandbox is already running in {where.root} ({len(live)} processes, "
                f"API {existing.api_url}); see `vnpu-sandbox status --dir {args.dir}`, "
                f"stop it with `vnpu-sandbox down --dir {args.dir}`",
                status=1,
            )
    try:
        bins = controlplane.binaries()
    except controlplane.ControlPlaneError as exc:
        return _fail(str(exc))
    try:
        built = kueue.build() if args.kueue else None
    except kueue.KueueError as exc:
        return _fail(f"--kueue: {exc}")
    try:
        peer_build, peer_chart = _peer_parts(args)
    except peers.PeerError as exc:
        return _fail(str(exc))
    too_long = components.longest_socket(where, nodes)
    if too_long is not None:
        return _fail(
            f"--dir {args.dir}: the unix socket {too_long} would be {len(str(too_long))} "
            f"characters, over Linux's {layout.SOCKET_PATH_MAX}; use a shorter directory"
        )
    prometheus, rules, notes = _prometheus(args)
    if rules is not None and not rules.is_file():
        return _fail(f"--alert-rules {rules}: no such file")
    if args.rbac is not None and not args.rbac.is_file():
        return _fail(f"--rbac {args.rbac}: no such file")
    for stale in ("nodes", "logs", "prometheus", "control-plane", "kueue", *PEERS):
        shutil.rmtree(where.root / stale, ignore_errors=True)
    pick = components.PortPicker()
    try:
        ports = components.choose_ports(
            nodes,
            pick,
            api=args.api_port,
            prometheus=None if prometheus is None else args.prometheus_port,
            exporters=not args.no_exporters,
        )
        plane = controlplane.Plane.at(where, controlplane.Ports.choose(pick, ports.api), bins)
        replicas = [(pick(), pick()) for _ in range(args.schedulers - 1)]
        queueing = None if built is None else kueue.Kueue.at(where, built, kueue.Ports.choose(pick))
        peer = _peer(where, pick, peer_build, peer_chart)
    finally:
        pick.close()
    record = layout.Record(
        api_url=plane.api_url,
        kubeconfig=str(where.kubeconfig),
        cluster_file=str(Path(args.cluster).resolve()),
        nodes=list(nodes),
        ports=ports.as_dict()
        | plane.ports.as_dict()
        | (queueing.ports.as_dict() if queueing is not None else {})
        | (peer.ports.as_dict() if peer is not None else {}),
        prometheus_url=components.url(ports.prometheus) if prometheus else None,
    )
    run_ = startup.Startup(where, record)
    try:
        bringup.bring_up(
            run_, where, nodes, ports, plane, args.timeout,
            prometheus=prometheus, rules=rules, replicas=replicas, rbac=args.rbac,
            queueing=queueing, dra=args.mode == "dra", peer=peer,
        )  # fmt: skip
    except startup.StartError as exc:
        run_.stop_all()
        where.record.unlink(missing_ok=True)
        return _fail(f"{exc}\neverything started was stopped; logs are in {where.logs}", 1)
    except KeyboardInterrupt:
        run_.stop_all()
        where.record.unlink(missing_ok=True)
        return _fail("interrupted; everything started was stopped", 130)
    record.ready = True
    layout.write(where, record)
    notes = [
        *notes,
        *(["DRA mode: kube-scheduler allocates NPUs (docs/dra.md)"] if args.mode == "dra" else []),
    ]
    print(
        summary(
            where, record, nodes, time.monotonic() - began, notes,
            dra=args.mode == "dra", scheduler=args.scheduler,
        )
    )  # fmt: skip
    return 0


PEERS = {"volcano": volcano.BINARIES, "hami": hami.BINARIES}
"""The peers ``--scheduler`` can run, with the binaries each needs."""


def _peer_parts(args: argparse.Namespace) -> tuple[peers.Build | None, list[peers.Json]]:
    """The build and rendered chart of the peer ``--scheduler`` names (None, [] for vnpu);
    PeerError says what is wrong with the flags or the build."""
    problem = _peer_problem(args)
    if problem:
        raise peers.PeerError(problem)
    if args.scheduler not in PEERS:
        return None, []
    try:
        built = peers.build(args.scheduler, PEERS[args.scheduler])
        return built, peers.read_chart(args.peer_chart)
    except peers.PeerError as exc:
        raise peers.PeerError(f"--scheduler {args.scheduler}: {exc}", exc.path) from exc


def _peer(
    where: layout.Layout,
    pick: components.PortPicker,
    built: peers.Build | None,
    chart: list[peers.Json],
) -> volcano.Volcano | hami.Hami | None:
    """The peer ``_peer_parts`` found, with its ports."""
    if built is None:
        return None
    if built.peer == volcano.PEER:
        return volcano.Volcano.at(where, built, chart, volcano.Ports.choose(pick))
    return hami.Hami.at(where, built, chart, hami.Ports.choose(pick))


def _peer_problem(args: argparse.Namespace) -> str:
    """What is wrong with the flags of a peer's scheduler, or ''."""
    if args.scheduler not in PEERS:
        return "--peer-chart: only with --scheduler volcano|hami" if args.peer_chart else ""
    if args.mode != "classic":
        return f"--scheduler {args.scheduler}: only in classic mode (the peers read the device "\
            "plugin's annotations)"  # fmt: skip
    if args.schedulers != 1:
        return f"--schedulers: only with --scheduler vnpu, not {args.scheduler}"
    if args.peer_chart is None or args.rbac is None:
        return (
            f"--scheduler {args.scheduler} needs --peer-chart (its chart rendered: `make "
            "peer-charts`) and --rbac (vnpu's chart rendered with its values for the peer, "
            "which hold the device ConfigMap the peer reads)"
        )
    if not args.peer_chart.is_file():
        return f"--peer-chart {args.peer_chart}: no such file"
    return ""


def _prometheus(args: argparse.Namespace) -> tuple[str | None, Path | None, list[str]]:
    """The Prometheus binary to run (None: none), the alert rules to load, and notes."""
    if args.no_prometheus:
        return None, None, ["Prometheus not started (--no-prometheus)"]
    binary = shutil.which("prometheus")
    if binary is None:
        return None, None, ["Prometheus is not on PATH: metrics are served but not scraped"]
    rules = args.alert_rules
    if rules is None and DEFAULT_ALERT_RULES.is_file():
        rules = DEFAULT_ALERT_RULES
    notes = [] if rules is not None else ["no alert rules loaded (--alert-rules FILE)"]
    return binary, rules.resolve() if rules is not None else None, notes


def summary(
    where: layout.Layout,
    record: layout.Record,
    nodes: tuple[clusterfile.NodeSpec, ...],
    seconds: float,
    notes: list[str],
    dra: bool = False,
    scheduler: str = "vnpu",
) -> str:
    """What ``up`` prints once ready: how to use the sandbox, its ports and logs."""
    lines = [
        f"vnpu sandbox is up in {seconds:.1f} s: {len(nodes)} nodes in {where.root}",
        "",
        f"  export KUBECONFIG={where.kubeconfig}",
        "  kubectl get nodes",
        "",
        f"  kube-apiserver   {record.api_url}",
    ]
    if scheduler == "volcano":
        lines.append(
            f"  vc-scheduler     {components.url(record.ports['volcano-scheduler-metrics'])}"
            f"  (/metrics; NPU pods name schedulerName {volcano.SCHEDULER_NAME})"
        )
    elif scheduler == "hami":
        lines.append(
            f"  hami-scheduler   {controlplane.https(record.ports['hami-scheduler'])}"
            f"  (extender, webhook; /metrics on :{record.ports['hami-scheduler-metrics']})"
        )
    else:
        lines.append(
            f"  vnpu-scheduler   {components.url(record.ports['scheduler'])}"
            + ("  (webhooks, /metrics)" if dra else "  (extender, webhooks, /metrics)")
        )
    if record.prometheus_url:
        lines.append(f"  Prometheus       {record.prometheus_url}")
    if "kueue-webhook" in record.ports:
        lines.append(
            f"  {'Kueue ' + kueue.VERSION:<17}{controlplane.https(record.ports['kueue-webhook'])}"
            f"  (webhooks; integration {', '.join(kueue.FRAMEWORKS)};"
            f" health :{record.ports['kueue-health']})"
        )
    for node in nodes:
        plugin = record.ports[f"device-plugin/{node.name}"]
        exporter = record.ports.get(f"exporter/{node.name}")
        mode = "soft slices" if node.soft else "hard vNPUs"
        agent = "DRA driver npu.vnpu.io" if dra else f"device plugin :{plugin}"
        lines.append(
            f"  node {node.name:<12} {node.chips} x {node.model} ({node.server}, {mode});"
            f" {agent}" + (f", exporter :{exporter}" if exporter else "")
        )
    lines += ["", f"  logs: {where.logs}/<component>.log"]
    lines += [f"  note: {note}" for note in notes]
    lines += ["", f"  stop it with: vnpu-sandbox down --dir {where.root}"]
    return "\n".join(lines)
