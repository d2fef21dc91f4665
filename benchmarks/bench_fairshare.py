"""Fair sharing, simulated: three teams on a mixed 310P/910B cluster with skewed arrival.

A discrete-time simulation (one step is one simulated minute) of a scheduling loop that
uses fair sharing (``vnpu_core.ranking`` for the queue order, ``vnpu_core.borrowing`` for
the borrowing check, ``vnpu_core.reclaim`` for reclaim, on ``vnpu_core.fairshare``'s teams)
and ``vnpu_core.allocator`` for placement on nodes built from the real catalog (4 nodes of 8
310P3 chips on Atlas 300I Duo cards, 4 nodes of 8 910B3 chips in a mesh). Pods ask one
vNPU (vir01, vir02, vir04 on 310P3; vir05_1c_16g, vir10_3c_32g on 910B3) or one or two
whole chips (``SHAPES``: about two 310P pods for each 910B one, so that both models stay
contended), and run 20 to 90 minutes; one in ten has priority 1.

Units are per chip model: ``Ascend310P-aicore``, ``Ascend310P-memory`` (MiB),
``Ascend910B3-aicore``, ``Ascend910B3-memory``. A template holds its own AI cores and
memory, a whole chip all of its chip's. Teams a, b, c have weights 1, 2, 3.

Each step: finished pods leave; pods evicted the step before are gone (one minute of
termination grace); arrivals join the queue; then the pending pods are taken in
``ranking.order`` and each is checked (``borrowing.check``): admitted ones are placed on
the node the allocator scores best. A pod of a team below its nominal that does not start
holds back what it is owed from borrowing pods for the rest of the pass (``check``'s
``reserved``), and asks ``reclaim.reclaim``, whose ``fits`` callback runs the allocator
on each node with the victims on it removed. Victims are re-queued with their creation
time and run again from the start (the work they did is lost).

Scenarios:
- ``nominal ~ weight``: nominals are 1/6, 2/6, 3/6 of every unit, no borrowing limit.
  Team a floods at t=0 and borrows the idle cluster; b arrives from t=60 min, c from
  t=120 min and take their nominal back by reclaim.
- ``borrowed by weight``: a, b, c each have a nominal of 10 % and borrow the rest from a
  fourth team that lends 70 % and runs nothing, so the weights alone split most of the
  cluster; reclaim only gives each its 10 %.

Reported: each team's share of AI-core-hours while all three are backlogged against its
weighted fair share (weight / 6; target within 5 %, relative), idle chips while some team
is backlogged and allowed to borrow (target none), and for pods that reclaimed, the time
from arrival to start. Run: ``.venv/bin/python benchmarks/bench_fairshare.py``.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import statistics
import time
from collections.abc import Sequence

from vnpu_core import (
    allocator,
    borrowing,
    catalog,
    fairshare,
    inventory,
    ranking,
    reclaim,
    requests,
)

STEP = 60  # simulated seconds per step
GRACE_STEPS = 1  # an evicted pod holds its chips this many steps
MAX_STEPS = 3000
WEIGHTS = {"a": 1, "b": 2, "c": 3}
# (team, pods, first arrival minute, arrival spread in minutes)
ARRIVALS = (("a", 600, 0, 1), ("b", 800, 60, 60), ("c", 1000, 120, 60))
SETTLE = 90  # minutes after the last team arrives before the settled window opens (longest run)
P310 = "Ascend310P"
B910 = "Ascend910B3"
# (common word, memory asked or None for whole chips, chip count, weight in the mix)
SHAPES = (
    (P310, 3072, 1, 6),
    (P310, 6144, 1, 6),
    (P310, 12288, 1, 4),
    (P310, None, 1, 2),
    (B910, 16384, 1, 3),
    (B910, 32768, 1, 2),
    (B910, None, 1, 2),
    (B910, None, 2, 1),
)


def _minus(a: fairshare.Vector, b: fairshare.Vector) -> dict[str, int]:
    return {u: a.get(u, 0) - b.get(u, 0) for u in a.keys() | b.keys()}


def _model(word: str) -> catalog.ChipModel:
    model = catalog.BUILTIN.by_common_word(word)
    assert model is not None
    return model


def build_nodes() -> list[inventory.Node]:
    duo = [inventory.build_node(f"duo-{i}", _model(P310), 8) for i in range(4)]
    a2 = [inventory.build_node(f"a2-{i}", _model(B910), 8) for i in range(4)]
    return duo + a2


def capacity(nodes: Sequence[inventory.Node]) -> dict[str, int]:
    return fairshare.total(
        {f"{c.model.common_word}-aicore": c.model.aicore, f"{c.model.common_word}-memory": c.model.memory_capacity_mib}
        for node in nodes
        for c in node.chips
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Shape:
    """What a pod asks: its request for the allocator and its demand vector for fair sharing."""

    label: str
    word: str
    request: requests.PodRequest
    demand: dict[str, int]


def build_shapes() -> list[Shape]:
    out = []
    for word, memory, count, _ in SHAPES:
        model = _model(word)
        limits: dict[str, object] = {model.resource_name: count}
        if memory is not None:
            limits[model.memory_resource] = memory
        pod = {
            "metadata": {"name": "probe", "namespace": "bench", "annotations": {}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
        }
        request = requests.from_pod(pod, catalog.BUILTIN)
        (container,) = request.requests
        if container.whole:
            cores, mib = count * model.aicore, count * model.memory_capacity_mib
            label = f"{count}x {word}"
        else:
            template = container.templates[0]
            cores, mib, label = template.aicore, template.memory_mib, template.name
        out.append(Shape(label, word, request, {f"{word}-aicore": cores, f"{word}-memory": mib}))
    return out


@dataclasses.dataclass
class Job:
    """One simulated pod (mutable: it runs, may be evicted and runs again)."""

    pod: fairshare.Pod
    shape: Shape
    runtime: int  # steps
    arrival: int  # step
    started: int = -1
    node: str = ""
    chips: list[tuple[str, inventory.ChipUsage]] = dataclasses.field(default_factory=list)
    reclaimed: int = -1  # the step it first had victims evicted for it
    given_back: bool = False  # those victims are gone


class Cluster:
    """Nodes and what each running pod holds on their chips."""

    def __init__(self, nodes: Sequence[inventory.Node]) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.by_word: dict[str, list[inventory.Node]] = {}
        for node in nodes:
            for word in node.models():
                self.by_word.setdefault(word, []).append(node)
        self.jobs: dict[str, dict[str, Job]] = {n.name: {} for n in nodes}
        self.usage: dict[str, dict[str, inventory.ChipUsage]] = {n.name: {} for n in nodes}

    def _rebuild(
        self, node: str, leaving: frozenset[str] = frozenset()
    ) -> dict[str, inventory.ChipUsage]:
        usage: dict[str, inventory.ChipUsage] = {}
        for name, job in self.jobs[node].items():
            if name in leaving:
                continue
            for uuid, held in job.chips:
                usage[uuid] = usage.get(uuid, inventory.IDLE).plus(held)
        return usage

    def best(
        self,
        shape: Shape,
        leaving: frozenset[str] = frozenset(),
        nodes: Sequence[str] | None = None,
    ) -> allocator.Assignment | None:
        found: allocator.Assignment | None = None
        for node in self.by_word[shape.word]:
            if nodes is not None and node.name not in nodes:
                continue
            usage = self._rebuild(node.name, leaving) if leaving else self.usage[node.name]
            fit = allocator.fit(node, usage, shape.request)
            if isinstance(fit, allocator.Assignment) and (found is None or fit.score > found.score):
                found = fit
        return found

    def start(self, job: Job, placed: allocator.Assignment) -> None:
        node = self.nodes[placed.node]
        held = []
        for container in placed.containers:
            for grant in container.grants:
                chip = node.chip(grant.uuid)
                assert chip is not None
                if grant.template is None:
                    held.append((grant.uuid, inventory.whole_chip_usage(chip)))
                else:
                    template = chip.model.template(grant.template)
                    assert template is not None
                    held.append((grant.uuid, inventory.template_usage(template)))
        job.node, job.chips = placed.node, held
        job.pod = dataclasses.replace(job.pod, node=placed.node)
        self.jobs[placed.node][job.pod.name] = job
        usage = self.usage[placed.node]
        for uuid, part in held:
            usage[uuid] = usage.get(uuid, inventory.IDLE).plus(part)

    def stop(self, job: Job) -> None:
        del self.jobs[job.node][job.pod.name]
        self.usage[job.node] = self._rebuild(job.node)

    def idle_chips(self, word: str) -> int:
        return sum(
            1
            for node in self.by_word[word]
            for chip in node.chips_of(word)
            if self.usage[node.name].get(chip.uuid, inventory.IDLE).idle
        )


@dataclasses.dataclass
class Window:
    """The minutes all three teams had pods of one chip model pending, and what ran then."""

    first: int = -1
    last: int = -1
    minutes: int = 0
    core_minutes: dict[str, int] = dataclasses.field(default_factory=dict)  # by team
    settled: dict[str, int] = dataclasses.field(default_factory=dict)  # by team, from SETTLE on
    held_core_minutes: int = 0  # every team's AI cores of the model


@dataclasses.dataclass
class Result:
    """What one run measured; minutes are simulated."""

    windows: dict[str, Window] = dataclasses.field(default_factory=dict)  # by common word
    idle_chip_minutes: int = 0  # idle chips while a team of that model is backlogged, may borrow
    backlog_chip_minutes: int = 0  # chips of such a model over those minutes
    missed_fits: int = 0  # minutes an idle chip was left while a pod allowed to start fitted
    given_back: list[int] = dataclasses.field(
        default_factory=list
    )  # lender arrival to victims gone
    started: list[int] = dataclasses.field(default_factory=list)  # lender arrival to its start
    settle: dict[str, int] = dataclasses.field(default_factory=dict)  # to 95 % of nominal cores
    evictions: int = 0
    lost_core_minutes: int = 0
    reasons: list[str] = dataclasses.field(default_factory=list)
    steps: int = 0
    cpu_seconds: float = 0.0


def _cores(job: Job) -> int:
    return job.shape.demand[f"{job.shape.word}-aicore"]


class Simulation:
    """The scheduling loop over simulated minutes, with its measurements."""

    def __init__(self, teams: Sequence[fairshare.Team], seed: int) -> None:
        rng = random.Random(seed)
        nodes = build_nodes()
        self.cap = capacity(nodes)
        self.teams = tuple(teams)
        self.cohort = fairshare.Cohort(self.cap, self.teams)
        self.cluster = Cluster(nodes)
        shapes = build_shapes()
        mix = [s for s, spec in zip(shapes, SHAPES, strict=True) for _ in range(spec[3])]
        self.arrivals: dict[int, list[Job]] = {}
        for team, count, first, spread in ARRIVALS:
            for i in range(count):
                step = first + (i * spread) // count
                shape = rng.choice(mix)
                priority = 1 if rng.random() < 0.1 else 0
                pod = fairshare.Pod(f"{team}-{i:04d}", team, shape.demand, priority, step * STEP)
                self.arrivals.setdefault(step, []).append(
                    Job(pod, shape, rng.randint(20, 90), step)
                )
        self.pending: dict[str, Job] = {}
        self.running: dict[str, Job] = {}
        self.terminating: dict[str, int] = {}  # pod name -> step its chips are free
        self.waiting_on: dict[str, set[str]] = {}  # lender pod -> its victims still terminating
        self.used: dict[str, dict[str, int]] = {t.name: {} for t in teams}
        self.reserved: dict[str, int] = {}
        self.first_arrival = {t: first for t, _, first, _ in ARRIVALS}
        zero = dict.fromkeys(self.first_arrival, 0)
        self.result = Result(
            {w: Window(core_minutes=dict(zero), settled=dict(zero)) for w in (P310, B910)}
        )

    def run(self) -> Result:
        started = time.process_time()
        step = 0
        while step < MAX_STEPS and (self.arrivals or self.pending or self.running):
            self.release(step)
            for job in self.arrivals.pop(step, []):
                self.pending[job.pod.name] = job
            self.schedule(step)
            self.measure(step)
            step += 1
        self.result.steps = step
        self.result.cpu_seconds = time.process_time() - started
        return self.result

    def _leave(self, job: Job) -> None:
        self.cluster.stop(job)
        del self.running[job.pod.name]
        self.used[job.pod.team] = _minus(self.used[job.pod.team], job.pod.demand)

    def release(self, step: int) -> None:
        """Finished pods leave; evicted pods leave once their grace is over and queue again."""
        for name, job in list(self.running.items()):
            gone = self.terminating.get(name)
            if gone is not None and gone <= step:
                del self.terminating[name]
                self._leave(job)
                self.result.lost_core_minutes += _cores(job) * (step - job.started)
                pod = dataclasses.replace(job.pod, node="")
                self.pending[name] = Job(pod, job.shape, job.runtime, job.arrival)
            elif gone is None and job.started + job.runtime <= step:
                self._leave(job)
        for lender, victims in list(self.waiting_on.items()):
            victims.intersection_update(self.terminating)
            if not victims:
                del self.waiting_on[lender]
                job = self.pending[lender]
                if job.reclaimed == job.arrival and not job.given_back:  # reclaimed on arrival
                    self.result.given_back.append(step - job.arrival)
                job.given_back = True

    def _start(self, job: Job, placed: allocator.Assignment, step: int) -> None:
        self.cluster.start(job, placed)
        job.started = step
        self.running[job.pod.name] = job
        del self.pending[job.pod.name]
        self.used[job.pod.team] = fairshare.total([self.used[job.pod.team], job.pod.demand])
        if job.reclaimed >= 0 and job.reclaimed == job.arrival:
            self.result.started.append(step - job.arrival)

    def schedule(self, step: int) -> None:
        ranked = ranking.order([j.pod for j in self.pending.values()], self.cohort, self.used)
        no_room: set[str] = set()  # shapes no node fits any more this step
        no_reclaim: set[tuple[str, str]] = set()  # (team, shape) whose reclaim failed this step
        self.holding: dict[str, dict[str, int]] = {}  # by team: what its waiting pods are owed
        self.reserved = {}  # all of it: not lent to borrowing pods
        for entry in ranked:
            job = self.pending[entry.pod.name]
            lender = entry.tier is ranking.Tier.NOMINAL
            if not lender and job.shape.label in no_room:
                continue  # no node has the room, and a borrowing pod neither holds nor reclaims
            answer = borrowing.check(job.pod, self.cohort, self.used, self.reserved)
            if answer.verdict.admitted and job.shape.label not in no_room:
                placed = self.cluster.best(job.shape)
                if placed is not None:
                    self._start(job, placed, step)
                    continue
                no_room.add(job.shape.label)
            if not lender:
                continue
            self._hold(job.pod.team, answer.owed)
            key = (job.pod.team, job.shape.label)
            if answer.verdict in (borrowing.Verdict.NO_IDLE, borrowing.Verdict.OVER_LIMIT):
                continue
            if job.pod.name in self.waiting_on or key in no_reclaim:
                continue
            if not self.reclaim(job, step):
                no_reclaim.add(key)

    def _hold(self, team: str, owed: fairshare.Vector) -> None:
        """Keep what a waiting lender pod is owed from borrowers (at most the team's unused nominal)."""
        nominal = self.cohort.team(team).nominal
        have = self.holding.setdefault(team, {})
        for unit, amount in owed.items():
            room = nominal.get(unit, 0) - self.used[team].get(unit, 0)
            have[unit] = min(room, have.get(unit, 0) + amount)
        self.reserved = fairshare.total(self.holding.values())

    def reclaim(self, job: Job, step: int) -> bool:
        """Ask for the lender's capacity back; False when no victims can make the room."""
        leaving = frozenset(self.terminating)
        alive = [j.pod for n, j in self.running.items() if n not in leaving]
        cluster, shape = self.cluster, job.shape

        def fits(victims: Sequence[fairshare.Pod]) -> bool:
            if not victims:
                return cluster.best(shape, leaving) is not None
            gone = leaving | {v.name for v in victims}
            return cluster.best(shape, gone, sorted({v.node for v in victims})) is not None

        outcome = reclaim.reclaim(job.pod, self.cohort, alive, fits)
        if not outcome.satisfied:
            return False
        if outcome.victims:
            if job.reclaimed < 0:
                job.reclaimed = step
            self.waiting_on[job.pod.name] = {v.pod.name for v in outcome.victims}
        for victim in outcome.victims:
            self.terminating[victim.pod.name] = step + GRACE_STEPS
            self.result.evictions += 1
            if len(self.result.reasons) < 3:
                self.result.reasons.append(
                    f"`{victim.pod.name}` for `{job.pod.name}`: {victim.reason}"
                )
        return True

    def measure(self, step: int) -> None:
        result = self.result
        for team in self.teams:
            first = self.first_arrival.get(team.name)
            if team.name in result.settle or first is None or step < first:
                continue
            cores = [u for u in team.nominal if u.endswith("-aicore")]
            if all(self.used[team.name].get(u, 0) >= 0.95 * team.nominal[u] for u in cores):
                result.settle[team.name] = step - first
        last_arrival = max(self.first_arrival.values())
        for word, window in result.windows.items():
            teams = {j.pod.team for j in self.pending.values() if j.shape.word == word}
            if step < last_arrival or not teams >= self.first_arrival.keys():
                continue
            window.first = step if window.first < 0 else window.first
            window.last = step
            window.minutes += 1
            settled = step >= last_arrival + SETTLE
            for job in self.running.values():
                if job.shape.word == word:
                    window.core_minutes[job.pod.team] += _cores(job)
                    if settled:
                        window.settled[job.pod.team] += _cores(job)
            window.held_core_minutes += sum(
                held.get(f"{word}-aicore", 0) for held in self.used.values()
            )
        # The verdict is the same for every pending pod of one team and shape.
        kinds = {(j.pod.team, j.shape.label): j for j in self.pending.values()}
        verdicts = [
            (j, borrowing.check(j.pod, self.cohort, self.used, self.reserved).verdict)
            for j in kinds.values()
        ]
        for word in (P310, B910):
            allowed = [
                (j, v)
                for j, v in verdicts
                if j.shape.word == word and v is not borrowing.Verdict.OVER_LIMIT
            ]
            if not allowed:
                continue
            chips = sum(len(n.chips_of(word)) for n in self.cluster.by_word[word])
            result.backlog_chip_minutes += chips
            idle = self.cluster.idle_chips(word)
            if idle:
                result.idle_chip_minutes += idle
                shapes = {j.shape.label: j.shape for j, v in allowed if v.admitted}
                if any(self.cluster.best(s) is not None for s in shapes.values()):
                    result.missed_fits += 1


def scenario_teams(name: str, cap: dict[str, int]) -> list[fairshare.Team]:
    if name == "nominal ~ weight":
        return [fairshare.Team(t, w, {u: cap[u] * w // 6 for u in cap}) for t, w in WEIGHTS.items()]
    teams = [fairshare.Team(t, w, {u: cap[u] // 10 for u in cap}) for t, w in WEIGHTS.items()]
    lender = {u: cap[u] - 3 * (cap[u] // 10) for u in cap}
    return [*teams, fairshare.Team("lender", 1, lender)]


def _spread(values: list[int]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered):.0f}, p95 {p95}, max {ordered[-1]} min ({len(ordered)} pods)"


def _share(core_minutes: dict[str, int], team: str) -> float:
    return core_minutes[team] / (sum(core_minutes.values()) or 1)


def report(name: str, result: Result, cap: dict[str, int]) -> float:
    """Print one scenario's section; returns the largest deviation in the settled windows."""
    print(f"### Scenario: {name}\n")
    last = max(first for _, _, first, _ in ARRIVALS)
    spans = "; ".join(f"{word} minutes {w.first} to {w.last}" for word, w in result.windows.items())
    print(
        f"All three teams backlogged (pods of that model pending): {spans}. The settled window "
        f"starts at minute {last + SETTLE}. {result.steps} minutes simulated in "
        f"{result.cpu_seconds:.0f} s of CPU.\n"
    )
    print(
        "| chip model | team | weight | fair share | share of AI-core-hours, all backlogged "
        "| settled | settled off by |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    total_weight = sum(WEIGHTS.values())
    worst = 0.0
    for word, window in result.windows.items():
        for team, weight in WEIGHTS.items():
            fair = weight / total_weight
            settled = _share(window.settled, team)
            off = settled / fair - 1
            worst = max(worst, abs(off))
            print(
                f"| {word} | {team} | {weight} | {fair:.1%} | {_share(window.core_minutes, team):.1%} "
                f"| {settled:.1%} | {off:+.1%} |"
            )
    both = {t: sum(w.settled[t] for w in result.windows.values()) for t in WEIGHTS}
    for team, weight in WEIGHTS.items():
        fair = weight / total_weight
        print(
            f"| both | {team} | {weight} | {fair:.1%} | "
            f"{_share({t: sum(w.core_minutes[t] for w in result.windows.values()) for t in WEIGHTS}, team):.1%} "
            f"| {_share(both, team):.1%} | {_share(both, team) / fair - 1:+.1%} |"
        )
    verdict = "met" if worst <= 0.05 else "missed"
    print(f"\nLargest settled deviation per model: {worst:.1%} (target 5 %: {verdict}).\n")
    idle = result.idle_chip_minutes / max(1, result.backlog_chip_minutes)
    print("| measure | value |")
    print("|---|---|")
    for word, window in result.windows.items():
        held = window.held_core_minutes / max(1, cap[f"{word}-aicore"] * window.minutes)
        print(f"| {word} AI cores held while all are backlogged | {held:.1%} of capacity |")
    print(
        f"| idle chip-minutes while a team of that model is backlogged and allowed to borrow "
        f"| {result.idle_chip_minutes} of {result.backlog_chip_minutes} ({idle:.2%}) |"
    )
    print(
        f"| minutes with an idle chip that a pending pod allowed to start fits | {result.missed_fits} |"
    )
    for team, minutes in sorted(result.settle.items()):
        if team in WEIGHTS:
            print(
                f"| team {team}: first arrival to 95 % of its nominal AI cores held | {minutes} min |"
            )
    print(
        f"| lender pod reclaiming on arrival: arrival to borrowed capacity given back | {_spread(result.given_back)} |"
    )
    print(f"| the same pods: arrival to started | {_spread(result.started)} |")
    print(
        f"| evictions (AI-core-minutes of work lost) | {result.evictions} ({result.lost_core_minutes}) |"
    )
    print("\nFirst victims and their reasons:\n")
    for reason in result.reasons:
        print(f"- {reason}")
    print()
    return worst


def main() -> None:
    print("## Fair sharing (simulated)\n")
    print(
        f"Machine: {os.cpu_count()} cores (nproc), {platform.machine()}, Python {platform.python_version()}. "
        "Command: `.venv/bin/python benchmarks/bench_fairshare.py`.\n"
    )
    cap = capacity(build_nodes())
    for name in ("nominal ~ weight", "borrowed by weight"):
        report(name, Simulation(scenario_teams(name, cap), seed=11).run(), cap)


if __name__ == "__main__":
    main()
