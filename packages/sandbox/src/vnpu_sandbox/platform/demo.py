"""``vnpu-sandbox demo``: a scenario of pods sharing NPUs on a running sandbox, with kubectl.

``make demo`` runs it after ``vnpu-sandbox up --cluster examples/cluster.yaml``. It applies
the manifests of ``--manifests`` (inference Deployments of several templates, a multi-chip
training pod, soft slices and pods no node can take), waits until every pod is Running or
refused, prints where each landed (node, chip, template), the scheduler's reasons for the
refused ones and the allocation per chip model, scales one Deployment down and another up
into the freed space, prints the same again, asks the sandbox's Prometheus a few questions
and ends with the commands to explore further.

``make demo-dra`` runs it with ``--mode dra`` after ``up --mode dra``: the manifests are
``examples/demo-dra`` (no soft slices), what each pod holds is read from the ResourceClaims
kube-scheduler allocated (``claims``), and a refused pod shows kube-scheduler's own reason and
what it asked for. Exit status 0, 1 when a step fails (the message says which), 2 when there
is no ready sandbox in ``--dir`` or it runs the other mode.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnpu_core import ledger
from vnpu_sandbox.platform import claims, kubectl, layout, placements, probes, up

NAME = "demo"
HELP = "Run the NPU-sharing scenario on a sandbox started by `vnpu-sandbox up`."

SETTLE_SECONDS = 120.0
SCRAPE_WAIT_SECONDS = 60.0
"""How long the Prometheus section waits for its figures to equal what was placed."""
SCALES = ("docs/chat-7b=2", "docs/ocr-forms=16")
MANIFESTS = {"classic": Path("examples/demo"), "dra": Path("examples/demo-dra")}
"""The manifests each mode applies unless ``--manifests`` says otherwise."""
QUERIES = (
    (
        "memory allocated / capacity per chip model (GiB)",
        "sum by (model) (vnpu_chip_allocated_memory_bytes) / 2^30",
        "sum by (model) (vnpu_chip_memory_total_bytes) / 2^30",
    ),
    (
        "AI cores allocated / capacity per chip model",
        "sum by (model) (vnpu_chip_allocated_aicores)",
        "sum by (model) (vnpu_chip_aicores)",
    ),
    ("vNPUs the driver holds, per template", "sum by (template) (vnpu_chip_vnpu_templates)", ""),
)

Json = dict[str, Any]


class DemoError(Exception):
    """A step of the scenario failed; the message names the step."""


def _scale(text: str) -> tuple[str, str, int]:
    """``NAMESPACE/DEPLOYMENT=REPLICAS`` as (namespace, name, replicas)."""
    target, sep, count = text.partition("=")
    namespace, slash, name = target.rpartition("/")
    if not sep or not name or not count.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAMESPACE/DEPLOYMENT=REPLICAS")
    return namespace if slash else "default", name, int(count)


def configure(parser: argparse.ArgumentParser) -> None:
    up.add_dir_flag(parser)
    parser.add_argument(
        "--scale",
        type=_scale,
        action="append",
        metavar="NAMESPACE/DEPLOYMENT=REPLICAS",
        help=f"the scale step, repeatable, in order (default: {' '.join(SCALES)})",
    )
    parser.add_argument(
        "--manifests",
        type=Path,
        metavar="DIR",
        help="the manifests to apply, in file-name order (default: "
        + ", ".join(f"{path} in {mode} mode" for mode, path in MANIFESTS.items())
        + ")",
    )
    parser.add_argument(
        "--mode",
        choices=tuple(MANIFESTS),
        default="classic",
        help="the mode the sandbox runs (`vnpu-sandbox up --mode`); dra reads what pods hold "
        "from their ResourceClaims (default: %(default)s)",
    )


def manifests(args: argparse.Namespace) -> Path:
    """The directory the demo applies: ``--manifests``, or its mode's own."""
    chosen: Path = args.manifests or MANIFESTS[args.mode]
    return chosen


def sandbox_mode(record: layout.Record) -> str:
    """The mode ``up`` started the sandbox in: dra when its nodes run the DRA driver."""
    dra = any(p.name.startswith("dra-driver-") for p in record.processes)
    return "dra" if dra else "classic"


def run(args: argparse.Namespace) -> int:
    where = layout.Layout.at(args.dir)
    try:
        record = layout.read(where)
    except layout.RecordError as exc:
        print(f"vnpu-sandbox demo: {exc}", file=sys.stderr)
        return 2
    if record is None or not record.ready:
        print(f"vnpu-sandbox demo: no ready sandbox in {where.root}; run `vnpu-sandbox up`")
        return 2
    running = sandbox_mode(record)
    if running != args.mode:
        print(
            f"vnpu-sandbox demo: the sandbox in {where.root} runs {running} mode, not "
            f"{args.mode}; run `vnpu-sandbox demo --mode {running}`, or start one with "
            f"`vnpu-sandbox up --mode {args.mode}`",
            file=sys.stderr,
        )
        return 2
    try:
        scales = args.scale or [_scale(text) for text in SCALES]
        ctl = kubectl.Kubectl(record.kubeconfig)
        Scenario(record, ctl, manifests(args), scales, dra=args.mode == "dra").play()
    except (DemoError, kubectl.KubectlError) as exc:
        print(f"vnpu-sandbox demo: {exc}", file=sys.stderr)
        return 1
    return 0


def heading(text: str) -> None:
    print(f"\n== {text}")


@dataclass(frozen=True, slots=True)
class View:
    """What the pods hold, in either mode: a row per pod, the use per chip model, and the
    figures the Prometheus section waits for (allocations, vNPUs per template)."""

    rows: list[placements.Placement]
    use: dict[str, placements.ModelUse]
    allocations: int
    templates: dict[str, int]


class Scenario:
    def __init__(
        self,
        record: layout.Record,
        ctl: kubectl.Kubectl,
        manifests: Path,
        scales: list[tuple[str, str, int]],
        dra: bool = False,
    ) -> None:
        self.record = record
        self.ctl = ctl
        self.manifests = manifests
        self.scales = scales
        self.dra = dra
        self.refused: list[str] = []
        self.record_dir = Path(record.kubeconfig).parent

    def play(self) -> None:
        dra = ", DRA mode: kube-scheduler allocates the devices of driver npu.vnpu.io"
        heading("The cluster" + (dra if self.dra else ""))
        print(self.ctl.run(["get", "nodes", "-L", "vnpu.io/chip-model"]).rstrip())
        self.show_use("Allocation before")
        heading(f"kubectl apply -f {self.manifests}/")
        print(self.ctl.run(["apply", "-f", str(self.manifests)]).rstrip())
        pods = self.settle()
        templates = self.ctl.items(["get", "resourceclaimtemplates", "-A"]) if self.dra else []
        if self.dra:
            heading("What each workload asks kube-scheduler for, once the webhook rewrote it")
            for name, what in claims.asked(pods, templates).items():
                print(f"  {name:<28} {what}")
        self.show_placements(pods)
        self.show_refused(pods, templates)
        before = {self.key(p) for p in pods}
        heading("Scale: " + ", ".join(f"{name} to {n}" for _, name, n in self.scales))
        for namespace, name, replicas in self.scales:
            self.ctl.run(["scale", "deployment", name, "-n", namespace, f"--replicas={replicas}"])
            print(f"kubectl scale deployment {name} -n {namespace} --replicas={replicas}")
        pods = self.settle()
        after = {self.key(p) for p in pods}
        print(f"{len(before - after)} pods removed, {len(after - before)} created:")
        self.show_placements([p for p in pods if self.key(p) in after - before])
        self.show_use("Allocation after")
        self.show_prometheus(pods)
        self.show_explore()

    @staticmethod
    def key(pod: Json) -> str:
        return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"

    def settle(self) -> list[Json]:
        """The scenario's pods once each is Running or refused, every Deployment complete."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            # Deployments first: once a status counts its replicas their pods exist, so the
            # pods read next hold them (read the other way round, new pods could be missed).
            deployments = self.ctl.items(["get", "deployments", "-A"])
            short = [d["metadata"]["name"] for d in deployments if not _complete(d)]
            pods = [p for p in self.ctl.items(["get", "pods", "-A"]) if _ours(p)]
            waiting = [self.key(p) for p in pods if not _settled(p)]
            if not waiting and not short:
                return pods
            if time.monotonic() > deadline:
                raise DemoError(
                    f"pods not settled after {SETTLE_SECONDS:g} s: "
                    + ", ".join((waiting + short)[:8])
                )
            time.sleep(0.5)

    def view(self, pods: list[Json]) -> View:
        """``pods`` read as the mode records what they hold: classic mode's decision
        annotations against the chips each device plugin registered, or DRA mode's claims."""
        if self.dra:
            by_pod = claims.held(self.ctl.items(["get", "resourceclaims", "-A"]), self.record.nodes)
            by_pod = {uid: by_pod[uid] for uid in map(_uid, pods) if uid in by_pod}
            devices = claims.distinct(by_pod)
            return View(
                [claims.placement(p, by_pod) for p in pods],
                claims.model_use(devices, self.record.nodes),
                len(devices),
                claims.templates(devices),
            )
        nodes = self.ctl.items(["get", "nodes"])
        by_uuid = placements.chips(nodes)
        holdings = _holdings(pods)
        return View(
            [placements.placement(p, by_uuid) for p in pods],
            placements.model_use(pods, nodes),
            sum(len(h) for h in holdings),
            _templates(holdings),
        )

    def show_placements(self, pods: list[Json]) -> None:
        rows = self.view(pods).rows
        placed = sorted((r for r in rows if r.node), key=lambda r: (r.node, r.holds, r.name))
        heading(f"Where the pods landed ({len(placed)} of {len(rows)} placed)")
        node = None
        for row in placed:
            if row.node != node:
                node = row.node
                print(f"{node}")
            print(f"  {row.namespace + '/' + row.name:<42} {row.phase:<8} {'; '.join(row.holds)}")

    def show_refused(self, pods: Iterable[Json], templates: list[Json]) -> None:
        refused = [p for p in pods if not (p.get("spec") or {}).get("nodeName")]
        self.refused = [self.key(p) for p in refused]
        heading(f"Refused ({len(refused)}), as `kubectl describe pod` explains them")
        for pod in refused:
            meta = pod["metadata"]
            events = self.ctl.items(
                [
                    "get", "events", "-n", meta["namespace"],
                    "--field-selector",
                    f"involvedObject.name={meta['name']},reason=FailedScheduling",
                ]
            )  # fmt: skip
            message = events[-1]["message"] if events else _condition_message(pod)
            print(f"{self.key(pod)}:\n  {message}")
            if self.dra:
                print("  it asks for " + ", ".join(claims.asks(pod, templates) or ["no NPU"]))

    def show_use(self, title: str) -> None:
        use = self.view(self.ctl.items(["get", "pods", "-A"])).use
        heading(title)
        print(f"{'MODEL':<14} {'CHIPS IN USE':<13} {'MEMORY ALLOCATED':<24} HOLDINGS")
        for model in use.values():
            memory = f"{model.memory_allocated_mib / 1024:.0f} of {model.memory_mib / 1024:.0f} GiB"
            share = model.memory_allocated_mib / model.memory_mib if model.memory_mib else 0.0
            holdings = f"{model.vnpus} vNPUs, {model.whole_chips} whole, {model.soft_slices} soft"
            print(
                f"{model.common_word:<14} {f'{model.chips_used}/{model.chips}':<13} "
                f"{f'{memory} ({share:.0%})':<24} {holdings}"
            )

    def show_prometheus(self, pods: list[Json]) -> None:
        url = self.record.prometheus_url
        if url is None:
            heading("Prometheus: not running in this sandbox (not on PATH)")
            return
        view = self.view(pods)
        held, templates = view.allocations, view.templates
        heading(f"Prometheus ({url}), once it has scraped the {held} allocations")

        def scraped() -> bool:
            return _scalar(url, "sum(vnpu_chip_allocations)") == held and (
                _by_template(url) == templates
            )

        if not _wait_for(scraped, SCRAPE_WAIT_SECONDS):
            seen = _by_template(url)
            print(
                f"  (after {SCRAPE_WAIT_SECONDS:g} s Prometheus still differs from what was placed:"
                f" vNPUs per template {seen} against {templates}, allocations "
                f"{_scalar(url, 'sum(vnpu_chip_allocations)')} against {held})"
            )
        for title, allocated, capacity in QUERIES:
            print(f"{title}:\n  {allocated}" + (f"\n  {capacity}" if capacity else ""))
            totals = _vector(url, capacity) if capacity else {}
            for labels, value in sorted(_vector(url, allocated).items()):
                of = f" of {totals[labels]:g}" if labels in totals else ""
                print(f"    {labels:<24} {value:g}{of}")

    def show_explore(self) -> None:
        heading("Explore")
        print(f"  export KUBECONFIG={self.record.kubeconfig}")
        print("  kubectl get pods -A -o wide")
        for key in self.refused[:1]:
            namespace, name = key.split("/", 1)
            print(f"  kubectl describe pod -n {namespace} {name}")
        if self.dra:
            print("  kubectl get resourceclaims -A          # what kube-scheduler allocated")
            print("  kubectl get resourceslices -o yaml     # the devices each driver published")
        else:
            print("  kubectl get node NODE -o yaml       # the chips its device plugin registered")
        if self.record.prometheus_url:
            print(f"  Prometheus: {self.record.prometheus_url}/graph")
        print(f"  vnpu-sandbox status --dir {self.record_dir}")
        print(f"  vnpu-sandbox down --dir {self.record_dir}    # stop everything")


def _ours(pod: Json) -> bool:
    return bool(pod["metadata"].get("namespace") != "kube-system")


def _complete(deployment: Json) -> bool:
    """The Deployment's controller has seen its latest spec and made as many pods as it asks."""
    status = deployment.get("status") or {}
    seen = status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
    return bool(seen and status.get("replicas", 0) == deployment["spec"].get("replicas", 1))


def _uid(pod: Json) -> str:
    return str(pod["metadata"].get("uid", ""))


def _settled(pod: Json) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") in ("Running", "Failed", "Succeeded"):
        return True
    conditions = status.get("conditions") or []
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def _condition_message(pod: Json) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return str(condition.get("message", ""))
    return "(no event yet)"


def _holdings(pods: Iterable[Json]) -> list[dict[str, Any]]:
    out = []
    for pod in pods:
        held = ledger.read_pod(pod, placements.MODELS)
        if isinstance(held, dict) and (pod.get("spec") or {}).get("nodeName"):
            out.append(held)
    return out


def _templates(holdings: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many vNPUs of each template the pods' decisions hold."""
    counted: collections.Counter[str] = collections.Counter()
    for held in holdings:
        for usage in held.values():
            counted.update(usage.templates)
    return dict(sorted(counted.items()))


def _by_template(url: str) -> dict[str, int] | None:
    """The vNPUs per template Prometheus holds (None while it cannot be asked)."""
    try:
        found = _vector(url, "sum by (template) (vnpu_chip_vnpu_templates) > 0")
    except (OSError, ValueError, DemoError):
        return None
    return {k.removeprefix("template="): int(v) for k, v in sorted(found.items())}


def _query(url: str, promql: str) -> list[Json]:
    answer = probes.get_json(f"{url}/api/v1/query?query={urllib.parse.quote(promql)}")
    if answer.get("status") != "success":
        raise DemoError(f"Prometheus refused {promql!r}: {json.dumps(answer)[:200]}")
    result: list[Json] = answer["data"]["result"]
    return result


def _vector(url: str, promql: str) -> dict[str, float]:
    return {
        ",".join(f"{k}={v}" for k, v in sorted(r["metric"].items())) or "{}": float(r["value"][1])
        for r in _query(url, promql)
    }


def _scalar(url: str, promql: str) -> float | None:
    try:
        result = _query(url, promql)
    except (OSError, ValueError, DemoError):
        return None
    return float(result[0]["value"][1]) if result else None


def _wait_for(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1.0)
    return False
