"""The ``vnpu-sandbox`` command: a small dispatcher over one subcommand per sandbox part.

Each subcommand lives in its part's ``command`` module, which provides ``NAME``, ``HELP``,
``configure(parser)`` to declare its flags and ``run(args) -> int`` to execute; adding a
part is adding its module to ``COMMANDS``. ``main`` is the console-script entry point.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from types import ModuleType

from vnpu_sandbox import __version__
from vnpu_sandbox.apiserver import command as apiserver_command
from vnpu_sandbox.controllers import command as controllers_command
from vnpu_sandbox.kubelet import command as kubelet_command
from vnpu_sandbox.platform import demo, down, status, up
from vnpu_sandbox.scheduling import command as scheduler_command

COMMANDS: tuple[ModuleType, ...] = (
    up,
    status,
    down,
    demo,
    apiserver_command,
    kubelet_command,
    scheduler_command,
    controllers_command,
)


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="vnpu-sandbox", description="Run vnpu's sandbox parts on one machine."
    )
    root.add_argument("--version", action="version", version=f"vnpu-sandbox {__version__}")
    commands = root.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        sub = commands.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.configure(sub)
        sub.set_defaults(handler=module.run)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)
