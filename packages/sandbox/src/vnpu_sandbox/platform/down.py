"""``vnpu-sandbox down``: stop every process a sandbox's ``up`` started, and nothing else.

``vnpu_sandbox.cli`` registers this subcommand. The processes come from the sandbox record
(PID and start time each, so a reused PID is never signalled); they are stopped newest
first with SIGTERM, and those still running after ``--grace`` seconds with SIGKILL. The
record is then removed; logs and node files stay for reading until the next ``up``.
Exit status 0 (also when there was nothing to stop), 2 when the record cannot be read.
"""

from __future__ import annotations

import argparse
import sys

from vnpu_sandbox.platform import layout, processes, up

NAME = "down"
HELP = "Stop every process of a sandbox started by `vnpu-sandbox up`."


def configure(parser: argparse.ArgumentParser) -> None:
    up.add_dir_flag(parser)
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="wait this long after SIGTERM before SIGKILL (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    where = layout.Layout.at(args.dir)
    try:
        record = layout.read(where)
    except layout.RecordError as exc:
        print(f"vnpu-sandbox down: {exc}", file=sys.stderr)
        return 2
    if record is None:
        print(f"no sandbox in {where.root}: nothing to stop")
        return 0
    live = [p for p in record.processes if processes.alive(p)]
    killed = processes.stop(list(reversed(live)), grace=args.grace)
    where.record.unlink(missing_ok=True)
    line = f"stopped {len(live)} processes of the sandbox in {where.root}"
    if killed:
        line += f" ({', '.join(p.name for p in killed)} killed after {args.grace:g} s)"
    gone = len(record.processes) - len(live)
    if gone:
        line += f"; {gone} had already exited"
    print(line)
    return 0
