"""The ``vnpu`` command line; ``vnpu plan`` shows where a workload's pods would go.

``vnpu convert`` (``vnpu_core.convert``, which registers its own arguments) rewrites Volcano
and HAMi manifests as Kubernetes objects for vnpu; the rest of this docstring is ``plan``'s.

``vnpu plan --cluster CLUSTER.yaml --workload WORKLOAD.yaml`` reads both files (and an
optional HAMi device-config and tenants config, ``--tenants``), parses the YAML, hands the documents to
``vnpu_core.planfiles`` and ``vnpu_core.plan``, and prints the plan as aligned plain-text
tables or, with ``--json``, as one JSON object. File reading happens here; the modules
it calls are pure. Exit status: 0 when the plan was made (even if some pods are rejected), 2
when an input is bad, with one line on stderr naming the file, the path inside it and the
value. The ``vnpu`` console script (packages/core/pyproject.toml) calls ``main``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

import vnpu_core
from vnpu_core import (
    allocator,
    catalog,
    convert,
    deviceconfig,
    dracli,
    errors,
    plan,
    planfiles,
    requests,
    tenants,
    yamldoc,
)

EXIT_OK = 0
EXIT_INPUT = 2
MAX_INPUT_BYTES = 8 * 1024 * 1024  # a cluster, workload or tenants file, in UTF-8
_VALUE_WIDTH = 80


def _read_text(path: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The file's text; a file above ``max_bytes`` is refused without reading the rest."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(max_bytes + 1)  # characters: at least as many bytes
            if len(text) > max_bytes:
                size = max(os.fstat(handle.fileno()).st_size, len(text.encode()))
                raise _input_error(path, yamldoc.oversize(size, max_bytes))
            return text
    except UnicodeDecodeError as exc:
        raise errors.InputFileError(
            path, f"byte {exc.start}", exc.object[exc.start : exc.start + 1], "is not UTF-8"
        ) from exc
    except OSError as exc:
        raise errors.InputFileError(
            path, "(file)", path, f"cannot be read: {exc.strerror}"
        ) from exc


def _yaml(text: str, source: str, many: bool) -> tuple[list[object], list[int]]:
    """The documents of a YAML text and the line each one's content starts on.

    A syntax error names the line, the column and that line's text; anchors, aliases, deep
    nesting and a text above ``MAX_INPUT_BYTES`` are refused (``yamldoc``).
    """
    try:
        if not many:
            return [yamldoc.load(text, max_bytes=MAX_INPUT_BYTES)], [1]
        documents = yamldoc.load_all(text, max_bytes=MAX_INPUT_BYTES)
    except errors.DocumentError as exc:
        raise _input_error(source, exc) from exc
    return [d.data for d in documents], [d.line for d in documents]


def _input_error(source: str, exc: errors.DocumentError) -> errors.InputFileError:
    shown = exc.value.strip() if isinstance(exc.value, str) else exc.value
    problem = f"{exc.summary}: {exc.detail}"
    return errors.InputFileError(source, exc.where or "(file)", shown, problem)


def _models(path: str | None) -> tuple[catalog.Catalog, tuple[str, ...]]:
    if path is None:
        return catalog.BUILTIN, ()
    try:
        loaded = deviceconfig.load(_read_text(path, deviceconfig.MAX_BYTES), path)
    except errors.ConfigError as exc:
        raise errors.InputFileError(path, exc.path, exc.value, exc.problem) from exc
    return loaded.catalog, tuple(f"device config: {w}" for w in loaded.warnings)


def _tenants(path: str | None, models: catalog.Catalog) -> tenants.Tenants | None:
    """The teams of a tenants file: the config text itself, or a ConfigMap holding it."""
    if path is None:
        return None
    (document,), _ = _yaml(_read_text(path), path, many=False)
    in_map = isinstance(document, dict) and document.get("kind") == "ConfigMap"
    try:
        if in_map:
            assert isinstance(document, dict)
            return tenants.from_config_map(document, models)
        return tenants.read(document, path, models)
    except errors.QuotaError as exc:
        where = f'data["{tenants.CONFIG_KEY}"] {exc.path}' if in_map else exc.path
        raise errors.InputFileError(path, where, exc.value, exc.problem) from exc


def make_plan(
    cluster_path: str,
    workload_path: str,
    policy: requests.Policy,
    device_config: str | None,
    tenants_path: str | None = None,
    namespace: str = "default",
) -> plan.Plan:
    """Read the files and plan. Raises InputFileError for any bad input."""
    models, config_notes = _models(device_config)
    (cluster_doc,), _ = _yaml(_read_text(cluster_path), cluster_path, many=False)
    cluster = planfiles.read_cluster(cluster_doc, cluster_path, models)
    teams = _tenants(tenants_path, models)
    documents, lines = _yaml(_read_text(workload_path), workload_path, many=True)
    workload = planfiles.read_workload(documents, workload_path, models, lines, namespace)
    made = plan.place(cluster, workload, models, policy, teams)
    return dataclasses.replace(made, notes=config_notes + made.notes)


# --- rendering --------------------------------------------------------------------------


def _device(grant: allocator.Grant) -> dict[str, object]:
    kind = "soft" if grant.soft else ("whole" if grant.template is None else "vnpu")
    return {
        "chip": grant.chip,
        "uuid": grant.uuid,
        "template": grant.template,
        "memory_mib": grant.memory_mib,
        "cores": grant.cores,
        "kind": kind,
    }


def to_json(made: plan.Plan) -> dict[str, object]:
    """The plan as one JSON-ready object (the schema is in docs/planner.md)."""
    placed = [
        {
            "pod": p.pod,
            "namespace": p.namespace,
            "node": p.assignment.node,
            "score": p.assignment.score,
            "pinned_template": p.pinned,
            "containers": [
                {"name": c.container, "init": c.init, "devices": [_device(g) for g in c.grants]}
                for c in p.assignment.containers
            ],
        }
        for p in made.placements
    ]
    rejected = [
        {"pod": r.pod, "namespace": r.namespace, "reason": r.reason.value, "message": r.message}
        for r in made.refusals
    ]
    s = made.summary
    summary = {
        "pods": s.pods,
        "placed": s.placed,
        "rejected": s.rejected,
        "chips_used": s.chips_used,
        "chips_total": s.chips_total,
        "whole_chip_chips": s.whole_chip_chips,
        "whole_chip_pods": s.whole_chip_pods,
        "whole_chip_nodes": s.whole_chip_nodes,
        "whole_chip_extra_nodes": s.whole_chip_extra_nodes,
    }
    nodes = [
        {
            "name": n.name,
            "model": n.model,
            "server": n.server,
            "mode": "soft" if n.soft else "hard",
            "chips": n.chips,
            "chips_used": n.chips_used,
            "whole_chips": n.whole_chips,
            "vnpus": n.vnpus,
            "soft_slices": n.soft_slices,
            "pods": n.pods,
        }
        for n in made.nodes
    ]
    out: dict[str, object] = {
        "policy": made.policy.value,
        "placed": placed,
        "rejected": rejected,
        "summary": summary,
        "nodes": nodes,
        "notes": list(made.notes),
    }
    if made.quota is not None:
        summary["over_quota"] = s.over_quota
        out["quota"] = _quota_json(made.quota)
    return out


def _quota_json(report: plan.QuotaReport) -> dict[str, object]:
    refused = [
        {
            "pod": q.pod,
            "namespace": q.namespace,
            "message": q.message,
            "refusals": [
                {
                    "rule": r.rule.value,
                    "quota": r.quota,
                    "resource": r.resource,
                    "used": r.used,
                    "asked": r.asked,
                    "limit": r.limit,
                    "message": r.message,
                }
                for r in q.refusals
            ],
        }
        for q in report.refused
    ]
    teams = [dataclasses.asdict(row) for row in report.teams]
    resource_quotas = [dataclasses.asdict(row) for row in report.quotas]
    return {"refused": refused, "teams": teams, "resource_quotas": resource_quotas}


def _table(header: Sequence[str], rows: Sequence[Sequence[object]], right: int = 99) -> list[str]:
    """Aligned columns; columns from index ``right`` on are right-aligned (numbers)."""
    cells = [[str(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [
            c.rjust(w) if i >= right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
    return lines


def _chips(indices: Sequence[int]) -> str:
    """Chip indices as ``0-3,6``."""
    ordered = sorted(set(indices))
    spans: list[str] = []
    start = prev = ordered[0]
    for i in [*ordered[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(spans)


def _devices(grants: Sequence[allocator.Grant], pinned: str | None) -> str:
    first = grants[0]
    if first.soft:
        each = f"soft {first.memory_mib} MiB {first.cores}%"
        return each if len(grants) == 1 else f"{len(grants)}x {each}"
    if first.template is None:
        return "whole chip" if len(grants) == 1 else f"{len(grants)} whole chips"
    mark = " (pinned)" if pinned is not None else ""
    return ", ".join(f"{g.template}{mark}" for g in grants)


def _pod_name(pod: str, namespace: str) -> str:
    return pod if namespace == "default" else f"{namespace}/{pod}"


def _placement_row(p: plan.Placement) -> list[str]:
    used = [c for c in p.assignment.containers if c.grants]
    described = [_devices(c.grants, p.pinned) + (" (init)" if c.init else "") for c in used]
    if len(used) > 1:
        described = [f"{c.container}: {d}" for c, d in zip(used, described, strict=True)]
    chips = _chips([g.chip for c in used for g in c.grants])
    return [_pod_name(p.pod, p.namespace), p.assignment.node, chips, "; ".join(described)]


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def _summary(s: plan.Summary, with_quota: bool) -> list[str]:
    placed = f"{s.pods}: {s.placed} placed, {s.rejected} rejected"
    placed += f", {s.over_quota} over quota" if with_quota else ""
    used = f"{s.chips_used} of {s.chips_total} ({s.chips_total - s.chips_used} idle)"
    extra = s.whole_chip_extra_nodes
    where = _count(s.whole_chip_nodes, "node")
    where += f", {extra} more than the cluster has" if extra else ""
    chips = _count(s.whole_chip_chips, "whole chip")
    whole = f"{chips} for {_count(s.whole_chip_pods, 'pod')} on {where}"
    unplaceable = s.pods - s.whole_chip_pods
    if unplaceable:
        whole += f"; {unplaceable} fit no node even when it is empty"
    rows = [("pods", placed), ("chips used", used), ("without sharing", whole)]
    return [f"  {label:<16} {text}" for label, text in rows]


def _yes(fits: bool) -> str:
    return "yes" if fits else "no"


def _quota_text(report: plan.QuotaReport) -> list[str]:
    """The quota sections: pods refused by a quota, teams, ResourceQuota limits."""
    out = [f"OVER QUOTA ({len(report.refused)})"]
    if report.refused:
        rows = [[_pod_name(q.pod, q.namespace), q.message] for q in report.refused]
        out += _table(["POD", "REFUSED BY"], rows)
    if report.teams:
        header = ["TEAM", "UNIT", "ASKED", "NOMINAL", "LIMIT", "USED", "BORROWED", "FITS"]
        team_rows: list[list[object]] = [
            [
                t.team,
                t.unit,
                t.asked,
                t.nominal,
                "-" if t.limit is None else t.limit,
                t.used,
                t.borrowed,
                _yes(t.fits),
            ]
            for t in report.teams
        ]
        out += ["", "TEAMS", *_table(header, team_rows, right=2)]
    if report.quotas:
        header = ["QUOTA", "RESOURCE", "ASKED", "LIMIT", "USED", "FITS"]
        quota_rows: list[list[object]] = [
            [q.quota, q.resource, q.asked, q.limit, q.used, _yes(q.fits)] for q in report.quotas
        ]
        out += ["", "RESOURCE QUOTAS", *_table(header, quota_rows, right=2)]
    return out


def to_text(made: plan.Plan) -> str:
    """The plan as plain-text tables: placements, rejections, nodes, summary, notes."""
    out = [
        f"vnpu plan: {len(made.nodes)} nodes, {made.summary.pods} pods, policy {made.policy.value}",
        "",
    ]
    out.append(f"PLACED ({len(made.placements)})")
    if made.placements:
        rows = [_placement_row(p) for p in made.placements]
        out += _table(["POD", "NODE", "CHIPS", "DEVICES"], rows)
    out += ["", f"REJECTED ({len(made.refusals)})"]
    if made.refusals:
        rows = [[_pod_name(r.pod, r.namespace), r.reason.value, r.message] for r in made.refusals]
        out += _table(["POD", "REASON", "MESSAGE"], rows)
    out += ["", "NODES"]
    header = ["NODE", "CHIP", "SERVER", "MODE", "PODS", "CHIPS USED", "WHOLE", "VNPUS", "SLICES"]
    node_rows: list[list[object]] = [
        [
            n.name,
            n.model,
            n.server,
            "soft" if n.soft else "hard",
            n.pods,
            f"{n.chips_used}/{n.chips}",
            n.whole_chips,
            n.vnpus,
            n.soft_slices,
        ]
        for n in made.nodes
    ]
    out += _table(header, node_rows, right=4)
    if made.quota is not None:
        out += ["", *_quota_text(made.quota)]
    out += ["", "SUMMARY", *_summary(made.summary, made.quota is not None)]
    if made.notes:
        out += ["", "NOTES", *(f"  - {note}" for note in made.notes)]
    return "\n".join(out) + "\n"


# --- entry point ------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vnpu", description="vnpu: share Ascend NPUs between Kubernetes pods."
    )
    parser.add_argument("--version", action="version", version=f"vnpu {vnpu_core.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    planner = commands.add_parser(
        "plan",
        help="place a workload on a cluster and show what fits",
        description="Place the workload's pods, in file order, on the cluster with the vnpu allocator; "
        "report placements, rejections with reasons, and the whole chips the same workload needs without sharing.",
    )
    planner.add_argument(
        "--cluster",
        required=True,
        metavar="FILE",
        help="cluster file: nodes with chip model, count, server, mode",
    )
    planner.add_argument(
        "--workload",
        required=True,
        metavar="FILE",
        help="Kubernetes manifests (Pods, Deployments, Jobs, ...)",
    )
    planner.add_argument(
        "--policy",
        default=requests.Policy.DEFAULT.value,
        choices=[p.value for p in requests.Policy],
        help="chip and node policy (default %(default)s); a pod's own policy annotations win",
    )
    planner.add_argument(
        "--device-config",
        metavar="FILE",
        help="HAMi device-config YAML (vnpus: ...) overriding the built-in chip models",
    )
    planner.add_argument(
        "--tenants",
        metavar="FILE",
        help="teams with namespaces, nominal and borrowingLimit (tenants.yaml, or its ConfigMap); "
        "pods are checked against them and against the workload's ResourceQuotas",
    )
    planner.add_argument(
        "--namespace",
        default="default",
        metavar="NS",
        help="namespace of the workload objects that name none (default %(default)s)",
    )
    planner.add_argument(
        "--json", action="store_true", help="print one JSON object instead of tables"
    )
    convert.add_parser(commands)
    dracli.add_parser(commands)
    return parser


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= _VALUE_WIDTH else shown[: _VALUE_WIDTH - 3] + "..."


def main(
    argv: Sequence[str] | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stdin: TextIO | None = None,
) -> int:
    """Run the command line; returns the exit status."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "convert":
        return convert.run(args, stdin or sys.stdin, out, err)
    if args.command == "dra-scoring":
        return dracli.run(args, out, err)
    if args.command != "plan":
        parser.print_help(err)
        return EXIT_INPUT
    try:
        made = make_plan(
            args.cluster,
            args.workload,
            requests.Policy(args.policy),
            args.device_config,
            args.tenants,
            args.namespace,
        )
    except errors.InputFileError as exc:
        err.write(f"vnpu plan: {exc.file}: {exc.path}: {exc.problem} (got {_short(exc.value)})\n")
        return EXIT_INPUT
    text = json.dumps(to_json(made), indent=2) + "\n" if args.json else to_text(made)
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:  # `vnpu plan ... | head`: the reader has gone, nothing to report
        return EXIT_OK
    return EXIT_OK
