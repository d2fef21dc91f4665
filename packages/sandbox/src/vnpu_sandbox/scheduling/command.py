"""``vnpu-sandbox scheduler``: play kube-scheduler, with its extender configuration, in the foreground.

``vnpu_sandbox.cli`` registers this subcommand. ``--config`` is read first: a file that cannot
be read or that kube-scheduler would refuse is reported on stderr naming the field, with exit
status 2, as are bad flags. The driver then runs until SIGINT or SIGTERM (exit status 0): it
stops taking pods, waits for the binds in flight (at most ``--stop-timeout`` seconds), writes
the events still queued and closes its connections. An API server or extender that cannot be
reached is logged and retried; it never ends the command.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from vnpu_sandbox.kubelet import apiclient
from vnpu_sandbox.kubelet import errors as kubelet_errors
from vnpu_sandbox.scheduling import config, driver, errors, logs

NAME = "scheduler"
HELP = "Schedule pending pods like kube-scheduler with a KubeSchedulerConfiguration's extenders."


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        required=True,
        metavar="FILE",
        help="KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1), YAML or JSON",
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--kubeconfig", type=Path, metavar="FILE", help="kubeconfig of the API server"
    )
    where.add_argument("--server", metavar="URL", help="API server URL without credentials")
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the tie-break between equal scores (default: random)",
    )
    parser.add_argument(
        "--bind-workers",
        type=_positive_int,
        default=driver.Settings.bind_workers,
        metavar="N",
        help="binds in flight at once (default: %(default)s)",
    )
    parser.add_argument(
        "--max-unschedulable-seconds",
        type=_seconds,
        default=driver.Settings.max_unschedulable,
        metavar="S",
        help="an unschedulable pod is tried again after this long even if nothing changed (default: %(default)s)",
    )
    parser.add_argument(
        "--api-timeout",
        type=_seconds,
        default=driver.Settings.api_timeout,
        metavar="S",
        help="seconds per Kubernetes API call, watches excepted (default: %(default)s)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=_seconds,
        default=10.0,
        metavar="S",
        help="on SIGTERM, wait at most this long for binds in flight (default: %(default)s)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=logs.LEVELS, help="(default: %(default)s)"
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = config.load(args.config)
    except errors.ConfigError as exc:
        print(f"vnpu-sandbox scheduler: --config {exc}", file=sys.stderr)
        return 2
    logs.configure(args.log_level)
    try:
        api = (
            apiclient.client_from_kubeconfig(str(args.kubeconfig))
            if args.kubeconfig
            else apiclient.client_for_host(args.server)
        )
    except kubelet_errors.ApiError as exc:
        print(f"vnpu-sandbox scheduler: {exc}", file=sys.stderr)
        return 2
    try:
        scheduler = driver.Driver(
            driver.Settings(
                config=settings,
                seed=args.seed,
                bind_workers=args.bind_workers,
                max_unschedulable=args.max_unschedulable_seconds,
                api_timeout=args.api_timeout,
            ),
            api,
        )
    except (errors.ConfigError, OSError, ValueError) as exc:
        print(f"vnpu-sandbox scheduler: --config {exc}", file=sys.stderr)
        apiclient.close_client(api)
        return 2
    stop = threading.Event()

    def on_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
    driver.log.info(
        "scheduler_starting",
        extra=logs.fields(
            profiles=list(settings.profiles),
            extenders=[e.url_prefix for e in settings.extenders],
            ignored_fields=list(settings.ignored),
            server=args.server or str(args.kubeconfig),
        ),
    )
    scheduler.start()
    try:
        stop.wait()
    finally:
        scheduler.stop(args.stop_timeout)
        apiclient.close_client(api)
        driver.log.info("scheduler_stopped")
    return 0
