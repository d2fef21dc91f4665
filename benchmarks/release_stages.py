"""Where a release's time goes: the milestones of each deleted pod, read from the sandbox's logs.

``bench_release`` deletes pods and times each one to its vNPU gone; ``read`` then finds, in the
logs of the sandbox's processes, when each step between the two happened for each pod, as
seconds after its delete call returned (wall clock: the logs' timestamps):

* classic mode: the simulated kubelet sees the ``deletionTimestamp`` and frees the pod's
  devices (``pod_terminated``), its status manager's final delete lands (``pod_deleted``),
  the device plugin's pod watch hears the pod DELETED and starts the reclaim
  (``grants_released``), and the plugin destroys the vNPU (``vnpu_destroyed``);
* DRA mode: the kubelet's ``NodeUnprepareResources`` reaches the driver, which destroys the
  claim's vNPU (``vnpu_destroyed``), the call returns (``dra_claims_unprepared``) and the
  final delete lands (``pod_deleted``).

The kubelet logs text lines (``<local time>,<ms> LEVEL logger event key=value...``), the
device plugin and the driver JSON lines with a UTC ``timestamp``. ``markdown`` renders the
p50 and max of every milestone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from vnpu_sandbox.platform import layout

Json = dict[str, Any]
SLACK_SECONDS = 0.5
"""A milestone may be logged this much before the delete call returned to the benchmark (the
watch event can reach the kubelet before the answer reaches the caller)."""
_KUBELET_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \S+ (\w+) (.*)$")
_POD = re.compile(r"\bpod=(\S+)")


@dataclass(frozen=True, slots=True)
class Line:
    at: float  # seconds since the epoch
    event: str
    fields: Json


@dataclass(frozen=True, slots=True)
class Milestone:
    label: str
    log: str  # the process whose log says it
    event: str
    matches: Callable[[Json, Json], bool]  # (the line's fields, the pod's timing)


def _kubelet_lines(path: Path) -> Iterator[Line]:
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        found = _KUBELET_LINE.match(text)
        if found is None:
            continue
        at = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # local
        pod = _POD.search(found.group(3))
        yield Line(at, found.group(2), {"pod": pod.group(1) if pod else ""})


def _json_lines(path: Path) -> Iterator[Line]:
    for text in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not text.startswith("{"):
            continue
        try:
            record = json.loads(text)
            at = datetime.fromisoformat(str(record["timestamp"]).replace("Z", "+00:00"))
        except (ValueError, KeyError):
            continue
        yield Line(at.timestamp(), str(record.get("event", "")), record)


def _pod_is(fields: Json, timing: Json) -> bool:
    return bool(fields.get("pod") == f"default/{timing['pod']}")


def _pod_among(fields: Json, timing: Json) -> bool:
    return f"default/{timing['pod']}" in (fields.get("pods") or [])


def _vnpu_is(fields: Json, timing: Json) -> bool:
    return bool(fields.get("vnpu") == timing["vnpu"])


def _claim_of(fields: Json, timing: Json) -> bool:
    return str(fields.get("claim", "")).startswith(f"default/{timing['pod']}-")


MILESTONES: dict[str, tuple[Milestone, ...]] = {
    "classic": (
        Milestone("kubelet: deletion seen, devices freed", "kubelet", "pod_terminated", _pod_is),
        Milestone("kubelet: final delete landed", "kubelet", "pod_deleted", _pod_is),
        Milestone(
            "device plugin: pod watch starts the reclaim",
            "device-plugin",
            "grants_released",
            _pod_among,
        ),
        Milestone("device plugin: vNPU destroyed", "device-plugin", "vnpu_destroyed", _vnpu_is),
    ),
    "dra": (
        Milestone(
            "DRA driver: vNPU destroyed (Unprepare)", "dra-driver", "vnpu_destroyed", _claim_of
        ),
        Milestone(
            "kubelet: NodeUnprepareResources returned", "kubelet", "dra_claims_unprepared", _pod_is
        ),
        Milestone("kubelet: final delete landed", "kubelet", "pod_deleted", _pod_is),
    ),
}


def _lines(where: layout.Layout, process: str) -> list[Line]:
    path = where.log(process)
    if not path.exists():
        return []
    return list(_kubelet_lines(path) if process.startswith("kubelet") else _json_lines(path))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile (``q`` from 0 to 1) of ``values``; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = -(-round(q * 1000) * len(ordered) // 1000)  # ceil(q * n), exact for q in 0.001s
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def read(where: layout.Layout, node: str, mode: str, rounds: dict[str, list[Json]]) -> Json:
    """Per round, per milestone: seconds after the delete returned (p50, max, pods found)."""
    logs = {
        process: _lines(where, f"{process}-{node}") for process in {m.log for m in MILESTONES[mode]}
    }
    found: Json = {}
    for name, timings in rounds.items():
        stages = []
        for milestone in MILESTONES[mode]:
            offsets = []
            for timing in timings:
                since = timing["delete_wall"] - SLACK_SECONDS
                hit = next(
                    (
                        line.at
                        for line in logs[milestone.log]
                        if line.at >= since
                        and line.event == milestone.event
                        and milestone.matches(line.fields, timing)
                    ),
                    None,
                )
                if hit is not None:
                    offsets.append(hit - timing["delete_wall"])
            stages.append(_stage(milestone.label, offsets))
        seen = [t["vnpu_gone_s"] for t in timings if t["vnpu_gone_s"] is not None]
        stages.append(_stage("benchmark: vNPU seen gone from the chip", seen))
        found[name] = stages
    return found


def _stage(label: str, offsets: Sequence[float]) -> Json:
    p50, top = percentile(offsets, 0.5), max(offsets, default=None)
    return {
        "stage": label,
        "pods": len(offsets),
        "p50_s": None if p50 is None else round(p50, 3),
        "max_s": None if top is None else round(top, 3),
    }


def markdown(mode: str, stages: Json) -> list[str]:
    """Rows of the milestone table (its header is ``HEADER``)."""
    rows = []
    for name, listed in stages.items():
        for stage in listed:
            p50 = "-" if stage["p50_s"] is None else f"{stage['p50_s']:.3f}"
            top = "-" if stage["max_s"] is None else f"{stage['max_s']:.3f}"
            rows.append(f"| {mode} | {name} | {stage['stage']} | {p50} | {top} | {stage['pods']} |")
    return rows


HEADER = (
    "| mode | round | milestone | p50 s after the delete returned | max s | pods found |",
    "|---|---|---|---:|---:|---:|",
)
