"""``vnpu dra-scoring``: the kube-scheduler scoring that makes DRA mode pack as classic mode.

In DRA mode the cluster's own kube-scheduler places NPU pods, and by default nothing scores a
node by its NPUs (docs/benchmarks.md, "Packing"). This prints the ``pluginConfig`` entry to
add to each profile of its KubeSchedulerConfiguration: NodeResourcesFit with MostAllocated
over the resources the DeviceClasses of the named chip models serve
(``draclasses.fill_scoring``). Name the models the cluster has: every resource listed is
weighed for every node.
"""

from __future__ import annotations

import argparse
from typing import TextIO

import yaml

from vnpu_core import catalog, draclasses, planfiles

EXIT_OK = 0
EXIT_INPUT = 2


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``dra-scoring`` with the ``vnpu`` command's subcommands."""
    parser = commands.add_parser(
        "dra-scoring",
        help="print kube-scheduler's NodeResourcesFit scoring for DRA mode",
        description="Print the pluginConfig entry (NodeResourcesFit, MostAllocated over the "
        "extended resources vnpu's DeviceClasses serve) that places each NPU pod on the node "
        "whose NPUs of its kind are fullest. See docs/operator-guide.md, DRA mode.",
    )
    parser.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="MODEL",
        help="a chip model of the cluster: catalog name (310P3, 910B3) or common word "
        "(Ascend310P); repeat for each",
    )


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``vnpu dra-scoring`` with parsed arguments; returns the exit status."""
    models: dict[str, catalog.ChipModel] = {}
    for name in args.model:
        found = planfiles.find_model(catalog.BUILTIN, name)
        if found is None:
            known = ", ".join(m.name for m in catalog.BUILTIN)
            stderr.write(
                f"vnpu dra-scoring: --model {name!r}: unknown chip model; use one of {known}\n"
            )
            return EXIT_INPUT
        models.setdefault(found.common_word, found)
    entry = draclasses.fill_scoring(models.values())
    stdout.write(yaml.safe_dump({"pluginConfig": [entry]}, sort_keys=False))
    return EXIT_OK
