"""``vnpu-sandbox apiserver``: run the Kubernetes API emulator in the foreground.

``vnpu_sandbox.cli`` registers this subcommand; it turns the flags into ``server.Settings``
and serves until interrupted (Ctrl-C or SIGTERM: open watches end, the state file is
written, exit status 0 for Ctrl-C). A bad ``--state`` file or an unusable port is reported on
stderr with exit status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from vnpu_sandbox.apiserver import errors, server

NAME = "apiserver"
HELP = "Serve the Kubernetes API emulator (kubectl and the kubernetes client work against it)."


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (1-65535)")
    return value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=_port, required=True, help="TCP port to listen on")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, loopback only)",
    )
    parser.add_argument(
        "--state",
        type=Path,
        metavar="FILE",
        help="keep objects and the resourceVersion counter in FILE across restarts (default: memory only)",
    )
    parser.add_argument(
        "--event-window",
        type=_positive_int,
        default=server.Settings.event_window,
        metavar="N",
        help="events kept for watches and paged lists; older resourceVersions get 410 Expired (default: %(default)s)",
    )
    parser.add_argument("--access-log", action="store_true", help="log every HTTP request")


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s:     %(name)s %(message)s")
    settings = server.Settings(
        host=args.host,
        port=args.port,
        state_file=args.state,
        event_window=args.event_window,
        access_log=args.access_log,
    )
    try:
        server.run(settings)
    except errors.StateFileError as exc:
        print(f"vnpu-sandbox apiserver: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass  # uvicorn re-raises Ctrl-C after its graceful shutdown: that is a clean stop
    return 0
