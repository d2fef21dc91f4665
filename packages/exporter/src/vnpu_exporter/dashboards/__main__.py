"""``python -m vnpu_exporter.dashboards``: write or check the generated dashboard files."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from vnpu_exporter import dashboards
from vnpu_exporter import grafana as g


def main(argv: Sequence[str] | None = None) -> int:
    cli = argparse.ArgumentParser(
        prog="python -m vnpu_exporter.dashboards", description="write the vnpu Grafana dashboards"
    )
    cli.add_argument(
        "--out",
        type=Path,
        default=Path("deploy/dashboards"),
        help="directory (default deploy/dashboards)",
    )
    cli.add_argument(
        "--check", action="store_true", help="only compare; exit 1 when a file differs"
    )
    args = cli.parse_args(argv)
    stale = []
    for dashboard in dashboards.build():
        path = args.out / f"{dashboard.uid}.json"
        text = g.dumps(dashboard)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(path)
    for path in stale:
        print(f"out of date: {path} (run python -m vnpu_exporter.dashboards)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
