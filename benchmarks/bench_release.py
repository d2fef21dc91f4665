"""Release latency: from a pod's delete to its vNPU gone from the node, classic and DRA mode.

Standalone (``make bench`` runs it with its defaults: 30 pods, both modes; without the
binaries of ``make k8s-bin`` it says so and measures nothing)::

    .venv/bin/python benchmarks/bench_release.py
    .venv/bin/python benchmarks/bench_release.py --mode dra --pods 50 --json

For each mode, ``vnpu-sandbox up --mode <mode>`` on one simulated 300I Duo node of 8 310P3
chips (no Prometheus, no exporter), then ``--pods`` pods asking ``huawei.com/Ascend310P: 1``
with ``huawei.com/Ascend310P-memory: 3000`` (a ``vir01`` each, the webhook's rewrite in DRA
mode) are created and run; each pod's vNPU is read from what the simulated kubelet recorded
for its container (``ASCEND_VISIBLE_DEVICES``). Two rounds:

* ``one by one``: each pod is deleted (the API's default graceful delete, as ``kubectl
  delete pod`` sends it) and the next one only once the vNPU is gone and the pod has left
  the API;
* ``batch``: the pods are created and run again, then all deleted back to back.

Each pod is timed from its delete call returning to its vNPU gone from the node's simulated
NPU backend (``nodes/<node>/chips``, read as the tests read it: the state file is checked
every few milliseconds and read through ``vnpu_npu.sim`` when it changed), and to the pod gone
from the API (the kubelet's final delete, seen by a watch). ``release_stages`` then reads the
processes' logs for where the time went (the kubelet, the device plugin's pod watch and
reclaim, the DRA driver's Unprepare). The target is 2 s.

Prints a Markdown section for docs/benchmarks.md, or with ``--json`` one JSON object.
The sandbox is stopped on the way out, on failure and on SIGTERM too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import release_stages
import release_watch

from vnpu_sandbox.platform import controlplane, layout

Json = dict[str, Any]
NAMESPACE = "default"
NODE = "duo"
MODES = ("classic", "dra")
DEFAULT_PODS = 30
DEFAULT_CHIPS = 8
TARGET_SECONDS = 2.0
UP_TIMEOUT = 300.0
RUN_TIMEOUT = 240.0
"""Seconds for all the pods of a round to be Running."""
GONE_TIMEOUT = 60.0
"""Seconds a deleted pod's vNPU may take before it counts as not released."""
ROUNDS = ("one by one", "batch")
LOG_SETTLE_SECONDS = 1.0
"""The kubelet logs its final delete after the API answered it, which the benchmark's watch
may hear first: the logs are read this long after the last pod left."""


def log(text: str) -> None:
    print(f"bench_release: {text}", file=sys.stderr, flush=True)


class BenchError(Exception):
    """The benchmark cannot go on (the sandbox did not start, pods did not run)."""


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGTERM and SIGINT held back while stopping: one arriving then would end the stop
    half way (etcd left running); it takes effect, with its own handler, once done."""
    pending: list[int] = []
    wanted = (signal.SIGTERM, signal.SIGINT)
    previous = {number: signal.signal(number, lambda n, _f: pending.append(n)) for number in wanted}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if pending:
            signal.raise_signal(pending[0])


# -- the sandbox -------------------------------------------------------------------------------


def cluster_text(chips: int) -> str:
    return f"nodes:\n  - {{name: {NODE}, chip: 310P3, chips: {chips}, server: 300i-duo}}\n"


def sandbox_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "vnpu_sandbox", *args]


class Sandbox:
    """``vnpu-sandbox up`` in ``directory`` on entry, ``down`` on the way out, whatever
    happened (an ``up`` still running is ended first: its record names what it started)."""

    def __init__(self, directory: Path, mode: str, chips: int) -> None:
        self.directory = directory
        self.mode = mode
        self.chips = chips
        self.where = layout.Layout.at(directory)
        self.starting: subprocess.Popen[str] | None = None
        self.up_seconds = 0.0

    def __enter__(self) -> Sandbox:
        self.directory.mkdir(parents=True, exist_ok=True)
        cluster = self.directory / "cluster.yaml"
        cluster.write_text(cluster_text(self.chips), encoding="utf-8")
        began = time.monotonic()
        self.starting = subprocess.Popen(
            sandbox_command(
                "up", "--cluster", str(cluster), "--dir", str(self.directory),
                "--mode", self.mode, "--no-prometheus", "--no-exporters",
                "--timeout", f"{UP_TIMEOUT:g}",
            ),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            output, _ = self.starting.communicate()
        except BaseException:  # SIGTERM or Ctrl-C while starting: stop what was started
            self.__exit__()
            raise
        status, self.starting = self.starting.returncode, None
        self.up_seconds = time.monotonic() - began
        if status != 0:
            self.__exit__()
            raise BenchError(f"vnpu-sandbox up --mode {self.mode} failed:\n{output[-3000:]}")
        return self

    def __exit__(self, *_exc: object) -> None:
        with signals_deferred():
            if self.starting is not None and self.starting.poll() is None:
                self.starting.terminate()  # up stops what it started when interrupted
                try:
                    self.starting.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    self.starting.kill()
            subprocess.run(
                sandbox_command("down", "--dir", str(self.directory)),
                capture_output=True, text=True, timeout=120, check=False,
            )  # fmt: skip

    def client(self) -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(
            config_file=str(self.where.kubeconfig), client_configuration=config
        )
        config.connection_pool_maxsize = 16
        return kubernetes.client.ApiClient(config)

    def vnpu_of(self, pod: str) -> int | None:
        """The vNPU id the simulated kubelet recorded for the pod's container, or None."""
        path = self.where.node(NODE).kubelet_state / "pods" / f"{NAMESPACE}_{pod}.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        visible = str(record["containers"][0].get("env", {}).get("ASCEND_VISIBLE_DEVICES", ""))
        return int(visible) if visible.isdigit() else None


# -- one mode ----------------------------------------------------------------------------------


def pod_body(name: str) -> Json:
    """A vir01 pod as a user writes it (classic and DRA mode alike: the webhook rewrites)."""
    limits = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "3000"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "ascend/app", "resources": {"limits": limits}}]
        },
    }


def _done(answer: Any) -> None:
    """Read the rest of an answer so that its connection can serve the next call."""
    answer.drain_conn()
    answer.release_conn()


def run_pods(
    core: kubernetes.client.CoreV1Api, pods: release_watch.PodWatch, names: Sequence[str]
) -> dict[str, str]:
    """Create the pods and wait until all run; their uids."""
    began = time.monotonic()
    for name in names:
        _done(core.create_namespaced_pod(NAMESPACE, pod_body(name), _preload_content=False))
    if not pods.wait(lambda: all(n in pods.running for n in names), began + RUN_TIMEOUT):
        missing = [n for n in names if n not in pods.running]
        raise BenchError(f"{len(missing)} pods not Running after {RUN_TIMEOUT:g} s: {missing[:5]}")
    log(f"{len(names)} pods Running in {time.monotonic() - began:.1f} s")
    with pods.guard:
        return {n: pods.running[n] for n in names}


def delete(core: kubernetes.client.CoreV1Api, name: str) -> tuple[float, float]:
    """Delete the pod as ``kubectl delete pod`` does (its grace period); when the call returned
    (monotonic, and wall clock for the logs)."""
    _done(core.delete_namespaced_pod(name, NAMESPACE, _preload_content=False))
    return time.monotonic(), time.time()


def one_round(
    sandbox: Sandbox,
    core: kubernetes.client.CoreV1Api,
    pods: release_watch.PodWatch,
    vnpus: release_watch.VnpuWatch,
    names: Sequence[str],
    batch: bool,
) -> list[Json]:
    uids = run_pods(core, pods, names)
    owned = {name: sandbox.vnpu_of(name) for name in names}
    ids = [v for v in owned.values() if v is not None]
    if len(ids) < len(names) or not vnpus.wait_present(ids, time.monotonic() + 10):
        missing = [n for n, v in owned.items() if v is None or v not in vnpus.present]
        raise BenchError(f"no vNPU on the node for pods {missing[:5]} (the kubelet's records)")
    timings: list[Json] = []
    returned: dict[str, tuple[float, float]] = {}
    if batch:
        for name in names:
            returned[name] = delete(core, name)
    for name in names:
        vnpu = owned[name]
        assert vnpu is not None
        if not batch:
            returned[name] = delete(core, name)
        began, wall = returned[name]
        deadline = began + GONE_TIMEOUT
        released = vnpus.wait_gone([vnpu], deadline)
        pods.wait(lambda n=name: uids[n] in pods.deleted_at, deadline)
        gone = vnpus.gone_at.get(vnpu)
        left = pods.deleted_at.get(uids[name])
        timings.append(
            {
                "pod": name,
                "uid": uids[name],
                "vnpu": vnpu,
                "delete_wall": wall,
                "vnpu_gone_s": round(gone - began, 4) if released and gone else None,
                "pod_gone_s": round(left - began, 4) if left else None,
            }
        )
    return timings


def measure(args: argparse.Namespace, mode: str, root: Path) -> Json:
    log(f"{mode}: vnpu-sandbox up (one node of {args.chips} 310P3 chips)")
    with Sandbox(root / mode, mode, args.chips) as sandbox:
        log(f"{mode}: up in {sandbox.up_seconds:.0f} s")
        api = sandbox.client()
        core = kubernetes.client.CoreV1Api(api)
        load_before = os.getloadavg()
        rounds: dict[str, list[Json]] = {}
        with (
            release_watch.PodWatch(api, NAMESPACE) as pods,
            release_watch.VnpuWatch(sandbox.where.node(NODE).sim) as vnpus,
        ):
            for number, name in enumerate(ROUNDS):
                names = [f"release-{number}-{i:03d}" for i in range(args.pods)]
                log(f"{mode}: round {name!r}: {args.pods} pods")
                rounds[name] = one_round(sandbox, core, pods, vnpus, names, name == "batch")
        load_after = os.getloadavg()
        time.sleep(LOG_SETTLE_SECONDS)
        stages = release_stages.read(sandbox.where, NODE, mode, rounds)
    return {
        "mode": mode,
        "pods": args.pods,
        "chips": args.chips,
        "up_seconds": round(sandbox.up_seconds, 1),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "rounds": {name: summary(timings) for name, timings in rounds.items()},
        "stages": stages,
        "timings": rounds,
    }


# -- numbers and output ------------------------------------------------------------------------


def summary(timings: Sequence[Json]) -> Json:
    found: Json = {"pods": len(timings)}
    for key in ("vnpu_gone_s", "pod_gone_s"):
        values = [t[key] for t in timings if t[key] is not None]
        found[f"{key}_missing"] = len(timings) - len(values)
        for label, q in (("p50", 0.5), ("p95", 0.95), ("max", 1.0)):
            value = release_stages.percentile(values, q)
            found[f"{key}_{label}"] = None if value is None else round(value, 3)
    found["over_target"] = sum(
        1 for t in timings if t["vnpu_gone_s"] is None or t["vnpu_gone_s"] > TARGET_SECONDS
    )
    return found


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(rows: Sequence[Json], command: str) -> str:
    lines = [
        "## Release: delete -> vNPU destroyed (`benchmarks/bench_release.py`)\n",
        f"Machine: {os.cpu_count()} cores, {platform.machine()}, Python "
        f"{platform.python_version()}; Kubernetes {controlplane.KUBERNETES_VERSION}; "
        f"{datetime.now(UTC):%Y-%m-%d}. Command: `{command}`.\n",
        "| mode | round | pods | delete -> vNPU gone p50 / p95 / max | delete -> pod gone "
        "p50 / p95 / max | over 2 s | load before / after |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        for name, s in row["rounds"].items():
            missing = f" ({s['vnpu_gone_s_missing']} never)" if s["vnpu_gone_s_missing"] else ""
            lines.append(
                f"| {row['mode']} | {name} | {s['pods']} "
                f"| {_s(s['vnpu_gone_s_p50'])} / {_s(s['vnpu_gone_s_p95'])} / "
                f"{_s(s['vnpu_gone_s_max'])} s{missing} "
                f"| {_s(s['pod_gone_s_p50'])} / {_s(s['pod_gone_s_p95'])} / "
                f"{_s(s['pod_gone_s_max'])} s | {s['over_target']} "
                f"| {row['load_before'][0]} / {row['load_after'][0]} |"
            )
    lines.append("\nWhere the time went (from the processes' logs, per pod):\n")
    lines.extend(release_stages.HEADER)
    for row in rows:
        lines.extend(release_stages.markdown(row["mode"], row["stages"]))
    lines.append("\n```json")
    lines.extend(json.dumps({k: v for k, v in r.items() if k != "timings"}) for r in rows)
    lines.append("```")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--mode",
        choices=(*MODES, "both"),
        default="both",
        help="default: both, one after the other",
    )
    parser.add_argument(
        "--pods", type=int, default=DEFAULT_PODS, help=f"pods per round (default {DEFAULT_PODS})"
    )
    parser.add_argument(
        "--chips",
        type=int,
        default=DEFAULT_CHIPS,
        help=f"310P3 chips of the node, even (default {DEFAULT_CHIPS}; 7 vir01 a chip)",
    )
    parser.add_argument("--keep", type=Path, help="run the sandboxes in this directory and keep it")
    parser.add_argument("--json", action="store_true", help="print one JSON object per mode")
    args = parser.parse_args(argv)
    if args.chips < 2 or args.chips % 2 or args.chips > 64:
        parser.error(f"--chips {args.chips}: an even number from 2 to 64 (a 300I Duo server)")
    if not 1 <= args.pods <= 7 * args.chips:
        parser.error(f"--pods {args.pods}: from 1 to {7 * args.chips} (7 vir01 a chip)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM ends the run as Ctrl-C does: the sandbox is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    command = " ".join(["benchmarks/bench_release.py", *(sys.argv[1:] if argv is None else argv)])
    try:
        controlplane.binaries()
    except controlplane.ControlPlaneError as exc:
        print(f"## Release: delete -> vNPU destroyed\n\nNot run: {exc}\n")
        return 0
    modes = MODES if args.mode == "both" else (args.mode,)
    rows = []
    with tempfile.TemporaryDirectory(prefix="vnpu-release-") as tmp:
        root = args.keep or Path(tmp)
        for mode in modes:
            try:
                rows.append(measure(args, mode, root))
            except (BenchError, kubernetes.client.exceptions.ApiException) as exc:
                log(f"{mode}: {exc}")
                return 1
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(markdown(rows, f".venv/bin/python {command}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
