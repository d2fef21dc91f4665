"""``vnpu-sandbox kubelet``: run one simulated kubelet in the foreground.

``vnpu_sandbox.cli`` registers this subcommand. The flags become a ``KubeletConfig``; bad
values are refused before anything starts, naming the flag and the value (exit status 2). The
kubelet then runs until SIGINT or SIGTERM; SIGHUP simulates a kubelet restart (sockets
re-created, plugins must register again). An API server that cannot be reached or refuses the
Node is reported on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import re
import signal
import sys
import threading
import zlib
from pathlib import Path
from types import FrameType

from vnpu_kubelet_api import constants
from vnpu_sandbox.kubelet import apiclient, devicemanager, errors, kubelet, nodestatus, resourcename

NAME = "kubelet"
HELP = "Run a simulated kubelet for one node (device plugin registration, pod admission, PodResources)."

SOCKET_PATH_MAX = 107
"""Longest unix socket path Linux accepts (sun_path is 108 bytes with the terminating NUL)."""
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must not be negative")
    return value


def _quantity(text: str) -> str:
    try:
        resourcename.quantity(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def default_pod_cidr(node: str) -> str:
    """A /24 per node name, so pods of different simulated nodes get different addresses."""
    return f"10.244.{zlib.crc32(node.encode()) % 254 + 1}.0/24"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", required=True, metavar="NAME", help="the Node's name")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        required=True,
        metavar="FILE",
        help="kubeconfig of the API server, with the node's identity (system:node:<name>)",
    )
    parser.add_argument(
        "--device-plugin-dir",
        type=Path,
        default=Path(constants.DEVICE_PLUGIN_PATH),
        metavar="DIR",
        help="serve kubelet.sock here; plugins put their sockets here (default: %(default)s)",
    )
    parser.add_argument(
        "--pod-resources-socket",
        type=Path,
        default=Path(constants.POD_RESOURCES_SOCKET),
        metavar="PATH",
        help="serve PodResources v1 on this unix socket (default: %(default)s)",
    )
    parser.add_argument(
        "--state-dir", type=Path, metavar="DIR", help="write pod allocation records here as JSON"
    )
    parser.add_argument(
        "--node-ip", default="127.0.0.1", help="InternalIP and hostIP (default: %(default)s)"
    )
    parser.add_argument(
        "--pod-cidr", help="pod addresses come from this range (default: a /24 per node name)"
    )
    parser.add_argument(
        "--cpu", type=_quantity, default="8", help="cpu capacity (default: %(default)s)"
    )
    parser.add_argument(
        "--memory", type=_quantity, default="32Gi", help="memory capacity (default: %(default)s)"
    )
    parser.add_argument(
        "--max-pods", type=int, default=110, help="pods capacity (default: %(default)s)"
    )
    parser.add_argument(
        "--label",
        type=_label,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra node label (repeatable)",
    )
    parser.add_argument(
        "--heartbeat-seconds",
        type=_seconds,
        default=10.0,
        help="node status refresh when nothing changes; 0 = off (default: %(default)s)",
    )
    parser.add_argument(
        "--register-timeout",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="retry registering the Node this long while the API answers nothing, 429 or "
        "5xx; 0 = give up at once (default: %(default)s)",
    )
    parser.add_argument(
        "--plugin-grace-seconds",
        type=_seconds,
        default=devicemanager.DEFAULT_GRACE_SECONDS,
        help="how long a vanished plugin's resource stays at 0 allocatable before capacity drops to 0 (default: %(default)s)",
    )
    parser.add_argument(
        "--plugins-registry-dir",
        type=Path,
        metavar="DIR",
        help="watch this directory for DRA driver registration sockets "
        "(default: plugins_registry next to --device-plugin-dir)",
    )
    parser.add_argument(
        "--cdi-dir",
        type=Path,
        metavar="DIR",
        help="CDI spec files that resolve CDI device names to container edits "
        "(default: cdi next to --device-plugin-dir)",
    )
    parser.add_argument(
        "--dra-retry-seconds",
        type=_seconds,
        default=10.0,
        help="retry a failed NodePrepareResources / NodeUnprepareResources after this long "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--no-pod-resources-get",
        action="store_true",
        help="answer PodResources Get like a kubelet without the KubeletPodResourcesGet gate",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="(default: %(default)s)",
    )


def config_from_args(args: argparse.Namespace) -> kubelet.KubeletConfig:
    """The kubelet configuration; ``ValueError`` names the flag and the value at fault."""
    if not _NODE_NAME.match(args.node) or len(args.node) > 253:
        raise ValueError(
            f"--node {args.node!r}: must be a lowercase DNS subdomain (a-z, 0-9, '-', '.')"
        )
    plugin_dir = args.device_plugin_dir.resolve()
    kubelet_socket = plugin_dir / constants.KUBELET_SOCKET_NAME
    if len(str(kubelet_socket)) > SOCKET_PATH_MAX:
        raise ValueError(
            f"--device-plugin-dir {str(args.device_plugin_dir)!r}: {kubelet_socket} is longer than "
            f"{SOCKET_PATH_MAX} bytes, too long for a unix socket"
        )
    pod_socket = args.pod_resources_socket.resolve()
    if len(str(pod_socket)) > SOCKET_PATH_MAX:
        raise ValueError(
            f"--pod-resources-socket {str(args.pod_resources_socket)!r}: longer than {SOCKET_PATH_MAX} bytes"
        )
    cidr = args.pod_cidr or default_pod_cidr(args.node)
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError as exc:
        raise ValueError(f"--pod-cidr {cidr!r}: {exc}") from exc
    try:
        ipaddress.ip_address(args.node_ip)
    except ValueError as exc:
        raise ValueError(f"--node-ip {args.node_ip!r}: {exc}") from exc
    if network.num_addresses < 4:
        raise ValueError(f"--pod-cidr {cidr!r}: too small for pod addresses")
    if args.max_pods < 1:
        raise ValueError(f"--max-pods {args.max_pods}: must be at least 1")
    identity = nodestatus.NodeIdentity(
        name=args.node,
        ip=args.node_ip,
        pod_cidr=str(network),
        cpu=args.cpu,
        memory=args.memory,
        max_pods=args.max_pods,
        labels=dict(args.label),
    )
    return kubelet.KubeletConfig(
        node=identity,
        device_plugin_dir=plugin_dir,
        pod_resources_socket=pod_socket,
        state_dir=args.state_dir,
        heartbeat_seconds=args.heartbeat_seconds,
        plugin_grace_seconds=args.plugin_grace_seconds,
        pod_resources_get=not args.no_pod_resources_get,
        register_timeout_seconds=args.register_timeout,
        plugins_registry_dir=args.plugins_registry_dir.resolve()
        if args.plugins_registry_dir
        else None,
        cdi_dir=args.cdi_dir.resolve() if args.cdi_dir else None,
        dra_retry_seconds=args.dra_retry_seconds,
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"vnpu-sandbox kubelet: {exc}", file=sys.stderr)
        return 2
    try:
        api = apiclient.client_from_kubeconfig(str(args.kubeconfig))
    except errors.ApiError as exc:
        print(f"vnpu-sandbox kubelet: {exc}", file=sys.stderr)
        return 2
    node = kubelet.Kubelet(config, api)
    stop, restart = threading.Event(), threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def on_restart(signum: int, frame: FrameType | None) -> None:
        restart.set()
        stop.set()

    try:
        node.start()
    except (errors.ApiError, OSError) as exc:
        print(f"vnpu-sandbox kubelet: cannot start node {config.node.name}: {exc}", file=sys.stderr)
        apiclient.close_client(api)
        return 1
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    signal.signal(signal.SIGHUP, on_restart)
    try:
        while True:
            stop.wait()
            if not restart.is_set():
                break
            restart.clear()
            stop.clear()
            node.restart()
    finally:
        node.stop()
        apiclient.close_client(api)
    return 0
