"""Render the vnpu Helm chart to YAML without a helm binary; ``make chart`` runs this.

It does what ``helm template vnpu deploy/helm/vnpu -n kube-system -f VALUES`` does, with
helm-python-sdk (Helm's own Go library shipped in a wheel, the one tests/helm renders with):
the values schema, the template functions and the merging of values are Helm's. The output
is laid out as ``helm template`` lays it out: every document after ``---`` and a
``# Source: <template>`` line, in Helm's install order by kind (unknown kinds last, by
name); NOTES.txt and templates that render to nothing are left out::

    python scripts/render_chart.py [--values FILE]... [--output FILE]
                                   [--release NAME] [--namespace NAMESPACE] [--chart DIR]

``--chart`` renders another chart the same way. ``--peer volcano|hami`` renders a peer's own
chart (from the source ``make peers-bin`` unpacks) with its release name and namespace and
vnpu's values for it (``deploy/peers/<peer>-values.yaml``, then any ``--values``), for
``vnpu-sandbox up --scheduler`` (``make peer-charts``; docs/operator-guide.md).

Several ``--values`` files are merged in order, later ones winning key by key (maps merge,
anything else is replaced), as repeated ``helm -f`` does. Exit status 0 with the manifests on
stdout (or in ``--output``); 2 with one line on stderr when a values file cannot be read or
parsed, or when the chart refuses the values (Helm's message names the key).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import helm_python as helm

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "vnpu"
PEER_VALUES = ROOT / "deploy" / "peers"
RELEASE = "vnpu"
NAMESPACE = "kube-system"

# Helm's InstallOrder (pkg/release/util/kind_sorter.go): the order `helm template` prints kinds.
INSTALL_ORDER = (
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
_SEPARATOR = re.compile(r"^---[ \t]*$", re.MULTILINE)
_KIND = re.compile(r"^kind:[ \t]*([A-Za-z0-9]+)[ \t]*$", re.MULTILINE)

Values = dict[str, Any]


class ChartError(Exception):
    """The chart could not be rendered with these inputs; the message says which and why."""


def _one_line(exc: Exception) -> str:
    """Helm's message (which may list problems on several lines) as one line."""
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def merged(base: Values, override: Values) -> Values:
    """``override`` over ``base``: maps merge key by key, any other value replaces."""
    result = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def read_values(paths: Sequence[Path]) -> Values:
    """The values files merged in order, each parsed by Helm as ``-f`` parses it."""
    values: Values = {}
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ChartError(f"--values {path}: cannot read it: {exc.strerror}") from exc
        try:
            values = merged(values, helm.values_from_yaml(text))
        except helm.HelmError as exc:
            raise ChartError(f"--values {path}: {_one_line(exc)}") from exc
    return values


def _documents(rendered: dict[str, str]) -> list[tuple[str, str]]:
    """(template, document) of every non-empty document, in template path order."""
    found: list[tuple[str, str]] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for part in _SEPARATOR.split(text):
            if part.strip():
                found.append((path, part.strip("\n")))
    return found


def _kind_rank(document: str) -> tuple[int, str]:
    match = _KIND.search(document)
    kind = match.group(1) if match else ""
    if kind in INSTALL_ORDER:
        return INSTALL_ORDER.index(kind), ""
    return len(INSTALL_ORDER), kind


def render(
    values: Values, release: str = RELEASE, namespace: str = NAMESPACE, chart_dir: Path = CHART
) -> str:
    """The chart's manifests for ``values`` as one YAML stream, laid out as ``helm template``."""
    try:
        with helm.Chart.load(chart_dir) as chart:
            rendered = chart.render(values, name=release, namespace=namespace, is_install=True)
    except helm.HelmError as exc:
        raise ChartError(_one_line(exc)) from exc
    documents = sorted(_documents(rendered), key=lambda item: _kind_rank(item[1]))
    return "".join(f"---\n# Source: {path}\n{document}\n" for path, document in documents)


def _arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="render_chart.py",
        description="Render a Helm chart (default deploy/helm/vnpu) to YAML, as helm template does.",
    )
    parser.add_argument(
        "--values",
        "-f",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="a values file (repeatable; later files win)",
    )
    parser.add_argument(
        "--output", "-o", type=Path, metavar="FILE", help="write here instead of stdout"
    )
    parser.add_argument("--release", default=RELEASE, help=f"release name (default {RELEASE})")
    parser.add_argument(
        "--namespace", default=NAMESPACE, help=f"release namespace (default {NAMESPACE})"
    )
    parser.add_argument(
        "--chart", type=Path, default=CHART, metavar="DIR", help="the chart (default: vnpu's)"
    )
    parser.add_argument(
        "--peer",
        choices=("volcano", "hami"),
        help="render the peer's own chart (`make peers-bin` unpacks it) as vnpu's docs install it",
    )
    arguments = parser.parse_args(argv)
    if arguments.peer is not None:
        # Imported here: rendering vnpu's own chart needs no vnpu package.
        from vnpu_sandbox.platform import peers  # noqa: PLC0415

        try:
            arguments.chart = peers.chart_dir(arguments.peer)
        except peers.PeerError as exc:
            parser.error(f"--peer {arguments.peer}: {exc}")
        _, arguments.release, arguments.namespace = peers.CHARTS[arguments.peer]
        arguments.values.insert(0, PEER_VALUES / f"{arguments.peer}-values.yaml")
    return arguments


def main(argv: Sequence[str] | None = None, stdout: TextIO = sys.stdout) -> int:
    arguments = _arguments(sys.argv[1:] if argv is None else argv)
    try:
        manifests = render(
            read_values(arguments.values), arguments.release, arguments.namespace, arguments.chart
        )
    except ChartError as exc:
        print(f"render_chart.py: {exc}", file=sys.stderr)
        return 2
    if arguments.output is None:
        stdout.write(manifests)
        return 0
    try:
        arguments.output.write_text(manifests, encoding="utf-8")
    except OSError as exc:
        print(f"render_chart.py: --output {arguments.output}: {exc.strerror}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
