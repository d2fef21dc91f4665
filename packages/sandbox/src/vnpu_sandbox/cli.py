"""The ``vnpu-sandbox`` command: a small dispatcher over one subcommand per sandbox part.

Each subcommand lives in its own module, which provides ``NAME``, ``HELP``,
``configure(parser)`` to declare its flags and ``run(args) -> int`` to execute; adding a
part is adding its module to ``COMMANDS``. ``main`` is the console-script entry point.

Only the module of the subcommand being run is imported: ``vnpu-sandbox up`` starts a
``vnpu-sandbox kubelet`` process per node at once, and a kubelet has no use for the
platform's modules (importing every part costs each process CPU). The top-level ``--help``
imports them all to list them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from vnpu_sandbox import __version__

COMMANDS: dict[str, str] = {
    "up": "vnpu_sandbox.platform.up",
    "status": "vnpu_sandbox.platform.status",
    "down": "vnpu_sandbox.platform.down",
    "demo": "vnpu_sandbox.platform.demo",
    "kubelet": "vnpu_sandbox.kubelet.command",
}
"""Subcommand name -> the module that implements it (its ``NAME`` is the same)."""


def parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` one subcommand's flags (the others are bare)."""
    root = argparse.ArgumentParser(
        prog="vnpu-sandbox", description="Run vnpu's sandbox parts on one machine."
    )
    root.add_argument("--version", action="version", version=f"vnpu-sandbox {__version__}")
    commands = root.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, path in COMMANDS.items():
        if only is not None and name != only:
            commands.add_parser(name)
            continue
        module = importlib.import_module(path)
        sub = commands.add_parser(name, help=module.HELP, description=module.HELP)
        module.configure(sub)
        sub.set_defaults(handler=module.run)
    return root


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named in ``argv`` (the first word that is not an option), if known."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    args = parser(_chosen(words)).parse_args(words)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)
