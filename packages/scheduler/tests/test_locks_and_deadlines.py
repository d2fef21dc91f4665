"""Node locks dated in the future, and binds that meet a hung API or a long queue: all bounded.

A lock written by a wrong clock (dated further ahead than ``--lock-clock-skew``) no longer
blocks a node: it counts as expired, so it is taken over unless its owner still waits for
Allocate, and the take-over is logged, counted and put in an event. Every bind answers
within ``--bind-timeout``, its rollback included: the API is reached through a real TCP
proxy that swallows the Binding, or answers it late, and binds queue behind a lock that is
never released. What a bind wrote is rolled back unless its Binding landed, and no write
of a bind is sent after its deadline. A bind abandoned between its lock and its Binding (its
replica killed with SIGKILL, or a lock written as such a replica leaves it) frees its node
--bind-timeout after the lock appeared, never before, and never while its pod is bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import ssl
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from vnpu_core import coordination
from vnpu_scheduler import cluster
from vnpu_service import kubeapi

LOCK = "hami.io/mutex.lock"
MERGE_PATCH = "application/merge-patch+json"
Json = dict[str, Any]


def _lock(owner: tuple[str, str] | None, ahead_seconds: float) -> str:
    when = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=ahead_seconds)
    if owner is None:
        return coordination.encode_lock(coordination.NodeLock(when))
    return coordination.encode_lock(coordination.NodeLock(when, owner[0], owner[1]))


def _bind(scheduler: Any, kube: Any, name: str, node: str = "n1") -> str:
    pod = kube.pod(name)
    body = {
        "PodName": name,
        "PodNamespace": kube.namespace,
        "PodUID": pod["metadata"]["uid"],
        "Node": node,
    }
    answer = scheduler.post("bind", body)
    assert answer.status_code == 200
    error: str = answer.json()["Error"]
    return error


def _notes(kube: Any, node: str = "n1") -> dict[str, str]:
    found: dict[str, str] = kube.node(node)["metadata"].get("annotations") or {}
    return found


@pytest.fixture
def node_and_pod(kube: Any, make: Any) -> None:
    kube.add_node(make.node("n1"))
    kube.add_pod(make.npu_pod("job", memory=4000))


# --- locks from the future -----------------------------------------------------------------------


@pytest.mark.parametrize("owner", ["done", None])
def test_a_lock_dated_in_the_future_is_taken_over(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None, owner: Any
) -> None:
    scheduler = start_scheduler(lock_wait=5.0, lock_ttl=300.0)
    kube.add_pod(make.npu_pod("done", annotations={"hami.io/bind-phase": "success"}))
    future = _lock(None if owner is None else (kube.namespace, owner), ahead_seconds=3600)
    kube.annotate_node("n1", {LOCK: future})
    started = time.monotonic()
    assert _bind(scheduler, kube, "job") == ""
    assert time.monotonic() - started < 5.0  # no waiting out --lock-wait on a lock nobody holds
    assert _notes(kube)[LOCK].endswith(f",{kube.namespace},job")
    assert scheduler.sample("vnpu_scheduler_lock_takeovers_total", why="future") == 1
    scheduler.wait_for(lambda: any(e["reason"] == "NPULockTakenOver" for e in kube.events("job")))
    event = next(e for e in kube.events("job") if e["reason"] == "NPULockTakenOver")
    assert event["type"] == "Warning"
    assert event["message"].startswith(
        f"node n1: took over hami.io/mutex.lock={future}: it is dated "
    )
    assert (
        "in the future (more than the allowed clock skew of 30 s): a wrong clock wrote it"
        in (event["message"])
    )


def test_a_future_lock_of_a_pod_still_waiting_for_allocate_is_kept(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None
) -> None:
    """Its date is wrong, but its owner may still be served: never hand its chips on (#3096)."""
    scheduler = start_scheduler(lock_wait=0.3)
    kube.add_pod(make.npu_pod("other", annotations={"hami.io/bind-phase": "allocating"}))
    future = _lock((kube.namespace, "other"), ahead_seconds=3600)
    kube.annotate_node("n1", {LOCK: future})
    error = _bind(scheduler, kube, "job")
    assert error.startswith(
        f"node n1 is locked by pod {kube.namespace}/other, still waiting for Allocate "
        "(its lock is dated 3"
    )
    assert "s in the future)" in error
    assert _notes(kube)[LOCK] == future
    assert not kube.pod("job")["spec"].get("nodeName")


def test_a_lock_slightly_ahead_is_a_fresh_lock(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None
) -> None:
    """Within the clock-skew allowance the lock is read as just taken: it is waited for."""
    scheduler = start_scheduler(lock_wait=0.3, lock_clock_skew=30.0)
    kube.add_pod(make.npu_pod("other", annotations={"hami.io/bind-phase": "success"}))
    ahead = _lock((kube.namespace, "other"), ahead_seconds=10)
    kube.annotate_node("n1", {LOCK: ahead})
    error = _bind(scheduler, kube, "job")
    assert error.startswith(f"node n1 is locked by pod {kube.namespace}/other")
    assert _notes(kube)[LOCK] == ahead
    assert scheduler.sample("vnpu_scheduler_lock_takeovers_total", why="future") == 0


# --- bind deadlines ---------------------------------------------------------------------------


@dataclass
class SlowApi:
    """A proxy in front of kube-apiserver that swallows or delays chosen requests.

    Its clients speak plain HTTP to it; it speaks TLS to ``upstream`` with ``tls`` (the
    admin's client certificate), so what it forwards is the admin's. ``swallow`` (a path
    fragment): such a request is read and never forwarded. ``late`` (a path fragment): such
    a request is forwarded at once and its answer held back ``late_seconds``. Everything
    else (watches included) flows through unchanged.
    """

    upstream: str
    tls: ssl.SSLContext
    swallow: str = ""
    late: str = ""
    late_seconds: float = 5.0
    seen: list[str] = field(default_factory=list)
    url: str = ""

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        parts = urlsplit(self.upstream)
        upstream: asyncio.StreamWriter | None = None
        answers: asyncio.Task[None] | None = None
        hold = asyncio.Event()
        hold.set()

        async def down(up_reader: asyncio.StreamReader) -> None:
            while data := await up_reader.read(65536):
                await hold.wait()
                writer.write(data)
                await writer.drain()

        try:
            up_reader, upstream = await asyncio.open_connection(
                parts.hostname, parts.port, ssl=self.tls
            )
            answers = asyncio.get_running_loop().create_task(down(up_reader))
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line = head.split(b"\r\n", 1)[0].decode()
                length = 0
                for header in head.split(b"\r\n")[1:]:
                    name, _, value = header.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                self.seen.append(line)
                path = line.split()[1]
                if self.swallow and self.swallow in path:
                    continue  # never forwarded, never answered
                if self.late and self.late in path:
                    hold.clear()
                    asyncio.get_running_loop().call_later(self.late_seconds, hold.set)
                upstream.write(head + body)
                await upstream.drain()
        except (asyncio.IncompleteReadError, OSError, asyncio.CancelledError):
            pass  # the client or kube-apiserver hung up, or the proxy is stopping
        finally:
            if answers is not None:
                answers.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError):
                    await answers
            if upstream is not None:
                # At once, without TLS's goodbye, which would outlive the proxy's event loop.
                upstream.transport.abort()
            writer.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[str]:
        """Serve on a free loopback port in a thread of its own; yield the URL."""
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        stop = asyncio.Event()

        async def main() -> None:
            server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
            host, port = server.sockets[0].getsockname()[:2]
            self.url = f"http://{host}:{port}"
            ready.set()
            await stop.wait()
            server.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)
            await server.wait_closed()

        thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
        thread.start()
        assert ready.wait(5)
        try:
            yield self.url
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(timeout=5)
            loop.close()


@pytest.fixture
def slow_api(
    kube: Any, write_kubeconfig: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """``kube`` behind a ``SlowApi`` (parametrize indirectly with its fields); its kubeconfig."""
    proxy = SlowApi(kube.url, kube.plane.tls, **getattr(request, "param", {}))
    with proxy.running() as url:
        yield proxy, write_kubeconfig(tmp_path / "slow-kubeconfig", url, kube.namespace)


@pytest.mark.parametrize("slow_api", [{"swallow": "/binding"}], indirect=True)
def test_a_binding_the_api_never_answers_is_rolled_back_at_the_deadline(
    kube: Any, start_scheduler: Any, slow_api: Any, node_and_pod: None
) -> None:
    proxy, kubeconfig = slow_api
    scheduler = start_scheduler(kubeconfig=kubeconfig, bind_timeout=3.0, lock_wait=0.5)
    started = time.monotonic()
    error = _bind(scheduler, kube, "job")
    took = time.monotonic() - started
    assert error == (
        f"bind of pod {kube.namespace}/job to node n1 did not finish in time (--bind-timeout 3 s); "
        "nothing was bound; the node lock it took was released"
    )
    # Its work stopped at 1 s and it answered by its deadline; with none it would never answer.
    assert 1.0 <= took < 3.0 + 2.0
    assert any("/binding" in line for line in proxy.seen)  # it did get as far as the Binding
    assert LOCK not in _notes(kube)
    time.sleep(0.3)
    pod = kube.pod("job")
    assert not pod["spec"].get("nodeName")
    assert not any(k.startswith("hami.io/") for k in pod["metadata"].get("annotations") or {})
    assert scheduler.sample("vnpu_scheduler_binds_total", result="failed") == 1
    scheduler.wait_for(lambda: any(e["reason"] == "NPUBindFailed" for e in kube.events("job")))


@pytest.mark.parametrize("slow_api", [{"late": "/binding", "late_seconds": 9.0}], indirect=True)
def test_a_binding_answered_late_is_a_success_when_it_landed(
    kube: Any, start_scheduler: Any, slow_api: Any, node_and_pod: None
) -> None:
    """The API wrote the Binding but its answer is lost: the rollback finds it and keeps it."""
    _, kubeconfig = slow_api
    scheduler = start_scheduler(kubeconfig=kubeconfig, bind_timeout=3.0, lock_wait=0.5)
    started = time.monotonic()
    assert _bind(scheduler, kube, "job") == ""
    assert time.monotonic() - started < 3.0 + 2.0  # the API's answer would have come at 9 s
    pod = kube.pod("job")
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["metadata"]["annotations"]["hami.io/bind-phase"] == "allocating"
    assert _notes(kube)[LOCK].endswith(f",{kube.namespace},job")  # kept for the device plugin


@pytest.mark.parametrize("slow_api", [{"swallow": "/events"}], indirect=True)
def test_events_the_api_never_answers_hold_up_no_bind(
    kube: Any, make: Any, start_scheduler: Any, slow_api: Any
) -> None:
    """Every Event write hangs, and binds have one API thread: the Events wait on threads of
    their own, so each bind still has the thread and succeeds, by its deadline."""
    _, kubeconfig = slow_api
    scheduler = start_scheduler(
        kubeconfig=kubeconfig, api_threads=1, bind_timeout=3.0, lock_wait=0.5
    )
    names = [f"n{i}" for i in range(1, 5)]
    for node in names:
        kube.add_node(make.node(node))
    for i, node in enumerate(names):
        kube.add_pod(make.npu_pod(f"job{i}", memory=4000))
        started = time.monotonic()
        assert _bind(scheduler, kube, f"job{i}", node) == ""
        assert time.monotonic() - started < 3.0 + 2.0
    assert all(kube.pod(f"job{i}")["spec"]["nodeName"] == node for i, node in enumerate(names))


def test_binds_queued_behind_a_held_lock_end_by_their_deadline(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    """Three binds to a node whose lock is never released: none answers after its deadline."""
    scheduler = start_scheduler(bind_timeout=3.0, lock_wait=0.7)
    kube.add_node(make.node("n1"))
    kube.add_pod(make.npu_pod("other", annotations={"hami.io/bind-phase": "allocating"}))
    held = _lock((kube.namespace, "other"), ahead_seconds=0)
    kube.annotate_node("n1", {LOCK: held})
    for name in ("a", "b", "c"):
        kube.add_pod(make.npu_pod(name, memory=4000))

    def timed(name: str) -> tuple[str, float]:
        started = time.monotonic()
        error = _bind(scheduler, kube, name)
        return error, time.monotonic() - started

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(timed, ("a", "b", "c")))
    for error, took in results:
        assert took < 3.0 + 2.0, (error, took)
        assert error.startswith(f"node n1 is locked by pod {kube.namespace}/other") or error == (
            f"bind of pod {error.split()[3]} to node n1 did not finish in time "
            "(--bind-timeout 3 s); nothing was bound"
        ), error
    assert sum("did not finish" in error for error, _ in results) >= 1  # the queue hit the deadline
    assert _notes(kube)[LOCK] == held
    for name in ("a", "b", "c"):
        assert not kube.pod(name)["spec"].get("nodeName")


@pytest.mark.parametrize("slow_api", [{}], indirect=True)
def test_a_bind_waiting_for_a_lock_reads_the_watchs_copy_of_a_busy_node(
    kube: Any, make: Any, start_scheduler: Any, slow_api: Any
) -> None:
    """The node changes every 50 ms while a bind waits: each change wakes it, and it looks
    at the copy the watch delivered, not at the API; it binds once the lock is released."""
    proxy, kubeconfig = slow_api
    scheduler = start_scheduler(kubeconfig=kubeconfig, lock_wait=20.0)
    kube.add_node(make.node("n1"))
    kube.add_pod(make.npu_pod("other", annotations={"hami.io/bind-phase": "allocating"}))
    kube.annotate_node("n1", {LOCK: _lock((kube.namespace, "other"), ahead_seconds=0)})
    kube.add_pod(make.npu_pod("job", memory=4000))
    answers: list[str] = []
    waiting = threading.Thread(target=lambda: answers.append(_bind(scheduler, kube, "job")))
    waiting.start()
    scheduler.wait_for(lambda: scheduler.service.locks.busy("n1"))
    time.sleep(0.3)
    reads_before = sum(" /api/v1/nodes/n1 " in line for line in proxy.seen)
    for beat in range(40):  # two seconds of changes, as heartbeats and other writers make
        kube.annotate_node("n1", {"example.com/beat": str(beat)})
        time.sleep(0.05)
    reads = sum(" /api/v1/nodes/n1 " in line for line in proxy.seen) - reads_before
    kube.annotate_node("n1", {LOCK: None})
    waiting.join(timeout=30)
    assert answers == [""]
    # Fallback reads only (at most every 2 s once backed off), not one per change.
    assert reads <= 3, reads


# --- abandoned binds: a replica that died between its lock and its Binding -----------------------


def _bind_until_bound(scheduler: Any, kube: Any, name: str) -> tuple[list[str], float]:
    """Bind ``name`` until a bind succeeds: the refusals before, and when it succeeded."""
    refused: list[str] = []

    def bound() -> bool:
        error = _bind(scheduler, kube, name)
        if error:
            refused.append(error)
        return not error

    scheduler.wait_for(bound, timeout=25.0)
    return refused, time.monotonic()


@pytest.mark.parametrize("scheduler_started", ["before the lock", "after the lock"])
def test_the_lock_of_an_abandoned_bind_is_taken_over_after_bind_timeout(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None, scheduler_started: str
) -> None:
    """The lock a dead replica left: its pod exists, unbound, and the lock is dated 20 s ago,
    older than --bind-timeout (by its writer's clock). It is taken over --bind-timeout after
    the scheduler first saw it (the watch, or its first list), not at --lock-ttl, not before."""
    options = {"bind_timeout": 6.0, "lock_wait": 1.0, "lock_ttl": 300.0}
    kube.add_pod(make.npu_pod("crashed", memory=4000))
    held = _lock((kube.namespace, "crashed"), ahead_seconds=-20)
    if scheduler_started == "before the lock":
        scheduler = start_scheduler(**options)
        seen_from = time.monotonic()
        kube.annotate_node("n1", {LOCK: held})
    else:
        kube.annotate_node("n1", {LOCK: held})
        seen_from = time.monotonic()
        scheduler = start_scheduler(**options)
    refused, bound_at = _bind_until_bound(scheduler, kube, "job")
    assert bound_at - seen_from >= 6.0  # never while the dead bind could still be running
    assert refused, "the first bind came within --bind-timeout and must have been refused"
    assert refused[0].startswith(
        f"node n1 is locked by pod {kube.namespace}/crashed, not bound yet (waited "
    )
    waiting = "its bind may still be running; if the pod stays unbound the lock is taken over in "
    assert waiting in refused[0]
    assert _notes(kube)[LOCK].endswith(f",{kube.namespace},job")
    assert kube.pod("job")["spec"]["nodeName"] == "n1"
    assert not kube.pod("crashed")["spec"].get("nodeName")
    assert scheduler.sample("vnpu_scheduler_lock_takeovers_total", why="bind_abandoned") == 1
    assert scheduler.sample("vnpu_scheduler_lock_takeovers_total", why="expired") == 0
    scheduler.wait_for(lambda: any(e["reason"] == "NPULockTakenOver" for e in kube.events("job")))
    event = next(e for e in kube.events("job") if e["reason"] == "NPULockTakenOver")
    assert event["message"].startswith(
        f"node n1: took over {LOCK}={held}: its owner pod is not bound and the bind that took "
        "the lock has ended (the lock was seen for "
    )
    assert event["message"].endswith("more than --bind-timeout 6 s)")


def test_a_lock_dated_before_bind_timeout_and_the_clock_skew_is_taken_at_once(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None
) -> None:
    """Even by a clock as wrong as --lock-clock-skew allows, that bind has ended: a replica
    that starts after the crash need not wait --bind-timeout more."""
    scheduler = start_scheduler(bind_timeout=6.0, lock_wait=1.0, lock_clock_skew=30.0)
    kube.add_pod(make.npu_pod("crashed", memory=4000))
    held = _lock((kube.namespace, "crashed"), ahead_seconds=-60)
    kube.annotate_node("n1", {LOCK: held})
    assert _bind(scheduler, kube, "job") == ""  # within --lock-wait 1 s: no waiting 6 s
    assert scheduler.sample("vnpu_scheduler_lock_takeovers_total", why="bind_abandoned") == 1
    scheduler.wait_for(lambda: any(e["reason"] == "NPULockTakenOver" for e in kube.events("job")))
    event = next(e for e in kube.events("job") if e["reason"] == "NPULockTakenOver")
    assert re.search(
        r"\(the lock is dated 6[0-9] s ago, more than --bind-timeout 6 s plus the allowed clock "
        r"skew of 30 s\)$",
        event["message"],
    ), event["message"]


@pytest.mark.parametrize("phase", ["allocating", "success"])
def test_the_lock_of_a_bound_pod_outlasts_bind_timeout(
    kube: Any, make: Any, start_scheduler: Any, node_and_pod: None, phase: str
) -> None:
    """Its owner is bound to the node: bound but not yet allocated, the device plugin still
    finds the pod by this lock, so it is never taken over as abandoned, however long it has
    been seen or however old its date (200 s: past --bind-timeout and the clock skew), only
    by the --lock-ttl rules."""
    scheduler = start_scheduler(bind_timeout=3.0, lock_wait=0.5, lock_ttl=300.0)
    owner = make.holder("owner", "n1", "n1-Ascend310P-0,Ascend310P,3072,0:;")
    owner["metadata"]["annotations"]["hami.io/bind-phase"] = phase
    kube.add_pod(owner)
    held = _lock((kube.namespace, "owner"), ahead_seconds=-200)
    written = time.monotonic()
    kube.annotate_node("n1", {LOCK: held})
    looks = 0
    while time.monotonic() - written < 3.0 + 1.0:  # binds until past --bind-timeout
        error = _bind(scheduler, kube, "job")
        assert error.startswith(f"node n1 is locked by pod {kube.namespace}/owner (waited "), error
        looks += 1
    assert looks >= 2
    assert _notes(kube)[LOCK] == held
    assert not kube.pod("job")["spec"].get("nodeName")
    assert scheduler.sample("vnpu_scheduler_lock_takeovers_total", why="bind_abandoned") == 0


@pytest.mark.timeout(60)  # two scheduler processes start; a guard, not a speed claim
@pytest.mark.parametrize("slow_api", [{"swallow": "/binding"}], indirect=True)
def test_a_replica_killed_mid_bind_frees_its_node_after_bind_timeout(
    kube: Any,
    make: Any,
    slow_api: Any,
    launch_replica: Any,
    tmp_path: Path,
    node_and_pod: None,
) -> None:
    """kill -9 of a replica whose Binding is on its way (held by the proxy): its lock names an
    unbound pod. The other replica, running all along, binds to the node once --bind-timeout
    has passed since the lock appeared, logs and counts the take-over."""
    proxy, through_proxy = slow_api
    flags = ("--lock-namespace", kube.namespace, "--bind-timeout", "6", "--lock-wait", "2")
    doomed, doomed_url = launch_replica(through_proxy, tmp_path / "doomed.log", *flags)
    survivor_log = tmp_path / "survivor.log"
    _, survivor_url = launch_replica(kube.kubeconfig, survivor_log, *flags)
    kube.add_pod(make.npu_pod("crashed", memory=4000))
    crashed = kube.pod("crashed")["metadata"]["uid"]

    def bind(url: str, name: str, uid: str) -> str:
        body = {"PodName": name, "PodNamespace": kube.namespace, "PodUID": uid, "Node": "n1"}
        with httpx.Client(timeout=30) as client:
            answer = client.post(f"{url}/bind", json=body)
        assert answer.status_code == 200
        error: str = answer.json()["Error"]
        return error

    def doomed_bind() -> None:
        with contextlib.suppress(httpx.HTTPError):  # its replica dies under it
            bind(doomed_url, "crashed", crashed)

    started = time.monotonic()
    mid_bind = threading.Thread(target=doomed_bind)
    mid_bind.start()
    deadline = time.monotonic() + 10
    while not any("/binding" in line for line in proxy.seen):
        assert time.monotonic() < deadline, "the doomed replica never sent its Binding"
        time.sleep(0.02)
    doomed.kill()  # SIGKILL: no rollback, no release
    doomed.wait()
    mid_bind.join(timeout=10)
    assert _notes(kube)[LOCK].endswith(f",{kube.namespace},crashed")

    job = kube.pod("job")["metadata"]["uid"]
    refused: list[str] = []
    until = time.monotonic() + 25
    while error := bind(survivor_url, "job", job):
        refused.append(error)
        assert time.monotonic() < until, refused[-1]
    assert time.monotonic() - started >= 6.0
    assert all("not bound yet" in error for error in refused), refused
    assert kube.pod("job")["spec"]["nodeName"] == "n1"
    assert not kube.pod("crashed")["spec"].get("nodeName")
    assert _notes(kube)[LOCK].endswith(f",{kube.namespace},job")
    taken = [
        json.loads(line)
        for line in survivor_log.read_text().splitlines()
        if '"node_lock_taken_over"' in line
    ]
    assert [(t["why"], t["node"], t["pod"]) for t in taken] == [
        ("bind_abandoned", "n1", f"{kube.namespace}/job")
    ]
    with httpx.Client(timeout=10) as client:
        scraped = client.get(f"{survivor_url}/metrics").text
    assert 'vnpu_scheduler_lock_takeovers_total{why="bind_abandoned"} 1.0' in scraped


def test_a_write_whose_deadline_passed_is_never_sent() -> None:
    """What a bind's Binding and lock write go through: a call that reaches its thread after
    the deadline (queued behind busy API threads) is refused, not sent late."""
    sent: list[str] = []
    write = cluster.in_time(sent.append)
    with cluster.deadline_at(time.monotonic() - 0.001), pytest.raises(kubeapi.ApiError) as late:
        write("late")
    assert (late.value.status, late.value.reason) == (0, "DeadlineExceeded")
    with cluster.deadline_at(time.monotonic() + 60):
        write("in time")
    write("no deadline")
    assert sent == ["in time", "no deadline"]
