"""Command line for simulated nodes: ``python -m vnpu_npu.sim DIR COMMAND``.

For people and the sandbox: create a node, look at it, inject faults and load, and
create or destroy vNPUs the way ``npu-smi set -t create-vnpu`` does::

    python -m vnpu_npu.sim DIR init --chip 310P3 --chips 4
    python -m vnpu_npu.sim DIR show
    python -m vnpu_npu.sim DIR fault --chip 2 --health critical --code 80E18402
    python -m vnpu_npu.sim DIR fault --chip 2 --gone | --clear
    python -m vnpu_npu.sim DIR load --chip 0 --aicore 55 --memory 1024
    python -m vnpu_npu.sim DIR load --vnpu 100 --aicore 30 --memory 512 --in-use
    python -m vnpu_npu.sim DIR create --chip 0 --template vir02 [--id 101]
    python -m vnpu_npu.sim DIR destroy --chip 0 --id 101

Exit status 0 on success, 1 when the node refuses (the error is printed), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from vnpu_npu import backend, errors, faults
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import config, control

_HEALTH = {h.name.lower(): h for h in backend.Health}


def _code(text: str) -> int:
    try:
        return faults.parse_code(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vnpu_npu.sim", description=__doc__.splitlines()[0]
    )
    parser.add_argument("dir", type=Path, help="the simulated node's directory")
    commands = parser.add_subparsers(dest="command", required=True)
    init = commands.add_parser(
        "init", help="create the state (and chips.yaml when --chip is given)"
    )
    init.add_argument("--chip", help="catalog model, e.g. 310P3 or 910B3")
    init.add_argument("--chips", type=int, default=1, help="number of chips (default 1)")
    init.add_argument("--server", help="topology kind, e.g. 300i-duo")
    init.add_argument("--seed", help="UUID seed (default: the directory path)")
    commands.add_parser("show", help="print chips, health, load and vNPUs")
    fault = commands.add_parser("fault", help="inject or clear a fault")
    fault.add_argument("--chip", type=int, required=True, help="physical chip id")
    fault.add_argument("--health", choices=sorted(_HEALTH), help="DCMI health to report")
    fault.add_argument(
        "--code", type=_code, action="append", default=[], help="fault code (hex), repeatable"
    )
    group = fault.add_mutually_exclusive_group()
    group.add_argument("--gone", action="store_true", help="the chip drops off the bus (-8012)")
    group.add_argument("--clear", action="store_true", help="the chip recovers")
    load = commands.add_parser("load", help="set synthetic load of a chip or a vNPU")
    target = load.add_mutually_exclusive_group(required=True)
    target.add_argument("--chip", type=int, help="physical chip id")
    target.add_argument("--vnpu", type=int, help="vNPU id")
    load.add_argument("--aicore", type=int, help="AI core utilisation, percent")
    load.add_argument("--memory", type=int, help="memory in use, MiB")
    load.add_argument("--temperature", type=int, help="chip only: degrees Celsius")
    load.add_argument("--power", type=float, help="chip only: watts")
    use = load.add_mutually_exclusive_group()
    use.add_argument("--in-use", action="store_true", help="vNPU only: a container holds it")
    use.add_argument("--released", action="store_true", help="vNPU only: no container holds it")
    create = commands.add_parser("create", help="create a vNPU")
    create.add_argument("--chip", type=int, required=True)
    create.add_argument("--template", required=True)
    create.add_argument("--id", type=int, help="vNPU id (default: the lowest free)")
    destroy = commands.add_parser("destroy", help="destroy a vNPU")
    destroy.add_argument("--chip", type=int, required=True)
    destroy.add_argument("--id", type=int, required=True)
    return parser


def _init(args: argparse.Namespace) -> None:
    chips_file = args.dir / config.CHIPS_FILE
    if args.chip:
        args.dir.mkdir(parents=True, exist_ok=True)
        lines = [f"chip: {args.chip}", f"chips: {args.chips}"]
        lines += [f"server: {args.server}"] if args.server else []
        lines += [f"seed: {args.seed}"] if args.seed else []
        chips_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sim = sim_backend.SimBackend(args.dir)
    print(f"{args.dir}: {len(sim.chips())} chips")


def _read(read: Callable[[], str]) -> str:
    """One column of ``show``: the value, or ``-`` when the chip does not answer."""
    try:
        return read()
    except errors.NpuError:
        return "-"


def _show(sim: sim_backend.SimBackend) -> None:
    print(f"{'phy':>3} {'card':>4} {'dev':>3} {'logic':>5} {'uuid':<44} {'model':<7} {'health':<8} "
          f"{'codes':<18} {'temp':>5} {'power':>11} {'aicore':>6} memory MiB")  # fmt: skip
    for chip in sim.chips():
        _show_chip(sim, chip)


def _show_chip(sim: sim_backend.SimBackend, chip: backend.ChipInfo) -> None:
    phy = chip.phy_id
    head = f"{phy:>3} {chip.card_id:>4} {chip.device_id:>3} {chip.logic_id:>5} {chip.uuid} {chip.model:<7}"
    try:
        health = sim.health(phy)
    except errors.ChipGone:
        print(f"{head} gone")
        return
    codes = ",".join(faults.format_code(c) for c in health.error_codes) or "-"
    temp = _read(lambda: f"{sim.temperature(phy)}C")
    power = _read(lambda: f"{sim.power(phy).watts:.1f}W {sim.power(phy).scope.value}")
    aicore = _read(lambda: f"{sim.aicore_percent(phy)}%")
    memory = _read(lambda: f"{sim.memory(phy).used_mib}/{sim.memory(phy).total_mib}")
    name = health.health.name.lower()
    print(f"{head} {name:<8} {codes:<18} {temp:>5} {power:>11} {aicore:>6} {memory}")
    for v in sim.vnpus(phy):
        used = "in use" if v.container_used else "free"
        print(
            f"      vnpu {v.vnpu_id} {v.template} ({v.aicore} AI cores, {v.memory_mib} MiB, {used})"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "init":
            _init(args)
            return 0
        sim = sim_backend.SimBackend(args.dir)
        if args.command == "show":
            _show(sim)
        elif args.command == "fault":
            if args.clear:
                control.clear_fault(args.dir, args.chip)
            else:
                health = _HEALTH[args.health] if args.health else None
                control.inject_fault(
                    args.dir, args.chip, health=health, codes=args.code, gone=args.gone
                )
        elif args.command == "load" and args.vnpu is not None:
            in_use = True if args.in_use else (False if args.released else None)
            control.set_vnpu_load(
                args.dir,
                args.vnpu,
                aicore_percent=args.aicore,
                memory_mib=args.memory,
                in_use=in_use,
            )
        elif args.command == "load":
            control.set_load(
                args.dir,
                args.chip,
                aicore_percent=args.aicore,
                memory_mib=args.memory,
                temperature=args.temperature,
                power_watts=args.power,
            )
        elif args.command == "create":
            print(sim.create_vnpu(args.chip, args.template, args.id))
        elif args.command == "destroy":
            sim.destroy_vnpu(args.chip, args.id)
    except errors.NpuError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
