"""``vnpu-sandbox controllers``: run the controller manager in the foreground.

``vnpu_sandbox.cli`` registers this subcommand. It builds an API client the way the
simulated kubelet does (``--kubeconfig`` or ``--server``, through the kubelet's
``apiclient``), starts a ``manager.ControllerManager`` and runs until SIGINT or SIGTERM,
then stops its threads and exits with status 0. A kubeconfig that cannot be read is
reported on stderr with exit status 2. An API server that cannot be reached is not fatal:
the manager logs it once and keeps retrying, so the command may start before the server.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from vnpu_sandbox.controllers import manager
from vnpu_sandbox.kubelet import apiclient
from vnpu_sandbox.kubelet import errors as kubelet_errors

NAME = "controllers"
HELP = "Run the deployment and replicaset controllers and the garbage collector."


def configure(parser: argparse.ArgumentParser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="kubeconfig of the API server"
    )
    where.add_argument("--server", metavar="URL", help="API server URL without credentials")
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="(default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # urllib3 warns about every connection retry; the manager reports an outage once itself.
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    try:
        api = (
            apiclient.client_from_kubeconfig(str(args.kubeconfig))
            if args.kubeconfig
            else apiclient.client_for_host(args.server)
        )
    except kubelet_errors.ApiError as exc:
        print(f"vnpu-sandbox controllers: {exc}", file=sys.stderr)
        return 2
    controllers = manager.ControllerManager(api)
    stop = threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    controllers.start()
    logging.getLogger(__name__).info("controllers_started server=%s", api.configuration.host)
    try:
        stop.wait()
    finally:
        controllers.stop()
        apiclient.close_client(api)
    return 0
