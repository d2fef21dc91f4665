"""The FastAPI application: routes, start-up and shutdown of the caches, one log line per request.

``build`` wires the parts from ``settings.Settings``: the API adapter (``cluster``), the node
cache and its informers, the device-config source, the extender, the binder with its node
locks, the webhook, the metrics and, with quotas and a tenants config, the reclaimer (run
in the lifespan; it idles while there are no teams). ``server`` serves the app with
uvicorn. Routes:

* ``POST /filter``, ``/prioritize``, ``/bind``: kube-scheduler's extender verbs;
* ``POST /mutate``, ``/validate``: admission.k8s.io/v1 webhooks for pods;
* ``GET /healthz`` (the process answers), ``/readyz`` (caches synced, config loaded;
  the body says which and shows a rejected config reload), ``/metrics``.

A malformed body (not JSON, nested too deep, a value of the wrong JSON type where the
scheduler reads one) is answered with HTTP 400 in the verb's own reply shape
(``wire.refusal``) naming the JSON path, with the message in the ``vnpu-error`` header too;
nothing about the request is written anywhere. Which listener serves which route, and how
large a body may be, is decided in front of the app (``intake``); its refusals are logged
and counted here (``Service.refused``). Blocking Kubernetes calls run in a thread pool of
``api_threads`` workers, never on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import json
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import fastapi
import prometheus_client
import structlog
from fastapi import responses

from vnpu_core import catalog, inventory, requests
from vnpu_core import errors as core_errors
from vnpu_scheduler import (
    binder,
    cache,
    claimtemplates,
    cluster,
    configsource,
    errors,
    events,
    extender,
    gang,
    inflight,
    informer,
    leader,
    metrics,
    nodelock,
    notices,
    quotagate,
    quotalock,
    reclaimer,
    settings,
    tenancy,
    webhook,
    wire,
)
from vnpu_service import kubeapi

Json = dict[str, Any]
log = structlog.get_logger(__name__)
NOTICED_LIMIT = 100_000


def _json(document: object, status: int = 200) -> fastapi.Response:
    return fastapi.Response(json.dumps(document), status, media_type="application/json")


def _refusal(verb: str, exc: errors.BadRequest, uid: str = "") -> fastapi.Response:
    """HTTP 400 in ``verb``'s reply shape, the message also in the ``vnpu-error`` header."""
    text = str(exc)
    response = _json(wire.refusal(verb, text, 400, uid), 400)
    response.headers[wire.ERROR_HEADER] = wire.header_text(text)
    return response


class Service:
    """The scheduler's parts, built once per process (or per test)."""

    def __init__(
        self,
        config: settings.Settings,
        api: cluster.Cluster,
        registry: prometheus_client.CollectorRegistry,
        tune_gc: bool = False,
    ) -> None:
        self.settings = config
        self.api = api
        self.warm = False  # every node's state computed once after the first list
        self.tune_gc = tune_gc
        self.stats = metrics.Metrics(registry)
        timeout = timedelta(seconds=config.handshake_timeout)
        self.config = configsource.ConfigSource(config.device_config, self.stats)
        self.cache = cache.ClusterCache(self.config.catalog, timeout)
        self.cache.on_disagreement = self.disagreement
        self.quotas: quotagate.QuotaGate | None = None
        if config.quotas:
            book = tenancy.QuotaBook(self.config.catalog, config.tenants_config)
            self.quotas = quotagate.QuotaGate(book, self.cache, self.stats, config.scheduler_name)
        self.config.on_change = self._new_catalog
        self.executor = ThreadPoolExecutor(config.api_threads, thread_name_prefix="kube-api")
        self.locks = nodelock.NodeLocks(
            api,
            self.run,
            self.stats,
            config.lock_ttl,
            config.lock_wait,
            config.bind_attempts,
            skew=config.lock_clock_skew,
            watched=self.cache.node_object,
            bind_timeout=config.bind_timeout,
        )
        self.in_flight = inflight.InFlight()
        self.extender = extender.Extender(
            self.cache,
            config.policy,
            self.stats,
            config.fit_memo,
            self.locks.busy,
            *((self.quotas.filter_refusal, self.quotas.filtered) if self.quotas else ()),
            in_flight=self.in_flight,
            reservation_seconds=config.gang_reservation,
        )
        self.extender.reserved = self._reserved
        self._writes: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None  # set once the service runs
        self._noticed: set[str] = set()  # pod uids told why vnpu does not place them
        self.binder = binder.Binder(
            api,
            self.cache,
            self.locks,
            self.run,
            self.stats,
            config.policy,
            timeout,
            config.bind_attempts,
            config.release_lock_after_bind,
            self.extender.recent,
            config.scheduler_name,
            config.bind_timeout,
            None
            if self.quotas is None
            else (
                self.quotas.book,
                quotalock.QuotaLocks(api, self.run, config.lock_namespace, config.bind_timeout),
            ),
            self.in_flight,
        )
        self.events = events.Recorder(api, self.stats)
        self.binder.event = self.events.record
        self.reclaimer: reclaimer.Reclaimer | None = None
        if self.quotas is not None:
            self.quotas.event = self.events.record
            if config.reclaim and config.tenants_config:
                lease = leader.LeaderLease(
                    api,
                    self.run,
                    config.lock_namespace,
                    reclaimer.LEASE_NAME,
                    config.reclaim_lease_seconds,
                )
                self.reclaimer = reclaimer.Reclaimer(
                    self.quotas,
                    self.cache,
                    api,
                    self.run,
                    self.stats,
                    config.policy,
                    lease,
                    config.reclaim_interval,
                    self.events.record,
                )
        self.webhook = webhook.Webhook(
            lambda: self.cache.catalog,
            config.scheduler_name,
            *((self.quotas.admission_refusal,) if self.quotas else ()),
            dra=config.mode is settings.Mode.DRA,
            templates=claimtemplates.Templates(api),
        )
        self.informers = [
            informer.Informer(
                "nodes",
                api,
                self._nodes_listed,
                self.cache.upsert_node,
                self.cache.remove_node,
                self.stats,
                config.watch_timeout,
            ),
            informer.Informer(
                "pods",
                api,
                self._pods_listed,
                self._pod_changed,
                self._pod_removed,
                self.stats,
                config.watch_timeout,
            ),
        ]
        if self.quotas is not None:
            book = self.quotas.book
            self.informers.append(
                informer.Informer(
                    "resourcequotas",
                    api,
                    book.replace,
                    book.upsert,
                    book.remove,
                    self.stats,
                    config.watch_timeout,
                )
            )
            registry.register(metrics.QuotaCollector(self.quotas.snapshot))
        registry.register(metrics.AllocationCollector(self.allocations))

    def _nodes_listed(self, items: Iterable[Json]) -> None:
        """The node informer listed the nodes: the cache, and when each lock was first seen."""
        listed = list(items)
        self.cache.replace_nodes(listed)
        for obj in listed:
            self.locks.saw(str((obj.get("metadata") or {}).get("name")), obj)

    # The pod informer's callbacks: the cache, and the quota gate's pending pods.

    def _pods_listed(self, items: Iterable[Json]) -> None:
        listed = list(items)
        self.cache.replace_pods(listed)
        for pod in listed:
            self._gang_member(pod)
        if self.quotas is not None:
            self.quotas.pods_listed(listed)

    def _pod_changed(self, pod: Json) -> None:
        self.cache.upsert_pod(pod)
        self._gang_member(pod)
        self._notice(pod)
        if self.quotas is not None:
            self.quotas.pod_changed(pod)

    def _pod_removed(self, pod: Json) -> None:
        self.cache.remove_pod(pod)
        self.in_flight.release(inflight.name_of(pod))
        if self.quotas is not None:
            self.quotas.pod_removed(pod)

    def _notice(self, pod: Json) -> None:
        """One Event on an unbound pod vnpu will not place (``notices``), from the pod
        informer's thread. Its name is the pod's, so of several replicas one writes it."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if not uid or uid in self._noticed or self._loop is None:
            return
        if (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
            return
        said = notices.notices(pod, self.cache.catalog, self.settings.scheduler_name)
        if not said:
            return
        if len(self._noticed) >= NOTICED_LIMIT:
            self._noticed.clear()  # a pod told twice is better than memory without end
        self._noticed.add(uid)
        name = f"{meta.get('name')}.{uid[:8]}.{notices.REASON.lower()}"
        record = functools.partial(self.events.record, name=name)
        self._loop.call_soon_threadsafe(record, pod, "Warning", notices.REASON, "; ".join(said))

    # Gang members' reservations (``gang``): written by the filter, read from every pod seen.

    def _gang_member(self, pod: Json) -> None:
        """A bound pod's reservation ends; an unbound member's annotation (another replica's
        filter, or ours echoed back) is kept for what is left of it, never longer than
        ``--gang-reservation``."""
        who = inflight.name_of(pod)
        if (pod.get("spec") or {}).get("nodeName"):
            self.in_flight.release(who)
            return
        held, group = gang.reserved(pod), gang.group_of(pod)
        if held is None or not group:
            return
        node, expiry = held
        seconds = min(expiry - time.time(), self.settings.gang_reservation)
        if seconds <= 0:
            return
        try:
            request = requests.from_pod(pod, self.cache.catalog)
        except core_errors.RequestError:
            return  # the filter refuses it anyway
        self.in_flight.reserve(node, who, request, group, seconds)

    def _reserved(self, pod: Json, node: str) -> None:
        """Write the reservation the filter just made into the pod, for the other replicas.

        Not awaited: the filter answers at once; this replica has the reservation already. A
        failed write is logged and leaves the other replicas blind to it until the member binds.
        """
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        value = gang.encode(node, time.time() + self.settings.gang_reservation)

        async def write() -> None:
            try:
                await self.run(
                    self.api.patch_pod_annotations, namespace, name, {gang.RESERVED_KEY: value}
                )
            except kubeapi.ApiError as exc:
                log.warning(
                    "gang_reservation_not_written", pod=f"{namespace}/{name}", error=str(exc)
                )

        task = asyncio.get_running_loop().create_task(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def _new_catalog(self, models: catalog.Catalog) -> None:
        self.cache.set_catalog(models)
        if self.quotas is not None:
            self.quotas.book.set_catalog(models)

    async def run(self, call: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking call in the API thread pool, in a copy of the caller's context.

        The copy carries the caller's API deadline (``cluster.deadline_at``) into the thread.
        """
        loop = asyncio.get_running_loop()
        context = contextvars.copy_context()
        work = functools.partial(context.run, call, *args)
        return await loop.run_in_executor(self.executor, work)

    def refused(self, verb: str, outcome: str, message: str) -> None:
        """A listener's intake refused a request before the app saw it: count it, log it."""
        if verb:
            self.stats.requests.labels(verb, outcome).inc()
        log.info("request", verb=verb or "other", outcome=outcome, error=message)

    def allocations(self) -> metrics.Snapshot:
        """Per-chip usage of every available node and the node counts (read on each scrape)."""
        counts = dict.fromkeys(("available", "unavailable", "usage_unknown"), 0)
        reports = dict.fromkeys(metrics.GRANT_REPORTS, 0)
        mismatches: dict[str, int] = {}
        doubles = 0
        found: list[metrics.ChipAllocation] = []
        for state in self.cache.all_states():
            node = state.read.node
            if node is None:
                counts["unavailable"] += 1
                continue
            counts["usage_unknown" if state.usage.problems else "available"] += 1
            reports[state.report] += 1
            for mismatch in state.mismatches:
                mismatches[mismatch.reason] = mismatches.get(mismatch.reason, 0) + 1
            doubles += len(state.clashes)
            for chip in node.chips:
                used = state.usage.usage.get(chip.uuid)
                found.append(metrics.ChipAllocation(state.name, chip, used or inventory.IDLE))
        return metrics.Snapshot(found, counts, self.cache.synced, reports, mismatches, doubles)

    def readiness(self) -> tuple[bool, Json]:
        status = self.config.status
        ready = self.cache.synced and self.warm and status.loaded
        body: Json = {
            "ready": ready,
            "cache": {
                "nodes_synced": self.cache.nodes_synced.is_set(),
                "pods_synced": self.cache.pods_synced.is_set(),
                "states_computed": self.warm,
            },
            "device_config": {
                "source": status.source,
                "loaded": status.loaded,
                "digest": status.digest[: configsource.SHOWN_DIGEST],
                "source_rejected": status.source_rejected,
                "rejected_digest": status.rejected_digest[: configsource.SHOWN_DIGEST],
                "last_reload_error": status.error,
            },
        }
        if self.quotas is not None:
            book = self.quotas.book
            tenants = book.tenants_status
            ready = ready and book.synced.is_set() and tenants.loaded
            body["ready"] = ready
            body["quotas"] = {
                "resource_quotas_synced": book.synced.is_set(),
                "tenants_config": tenants.source,
                "tenants_loaded": tenants.loaded,
                "last_tenants_error": tenants.error,
            }
        return ready, body

    async def poll_config(self) -> None:
        """Read the tenants and device configs every ``config_poll_seconds`` while the service
        runs; no failure of one round, ``MemoryError`` included, ends the loop."""
        while True:
            if self.quotas is not None:
                await self._poll_once("tenants_config", self.quotas.poll_tenants, self.api)
            await asyncio.sleep(self.settings.config_poll_seconds)
            await self._poll_once("device_config", self.config.poll)

    async def _poll_once(self, config: str, poll: Callable[..., Any], *args: Any) -> None:
        try:
            await self.run(poll, *args)
        except Exception:  # the sources record what they reject; this is anything else
            log.exception("config_poll_failed", config=config)

    async def _warm_when_synced(self) -> None:
        """Once the cache holds the cluster, compute every state and (``tune_gc``) freeze it.

        The cache is hundreds of thousands of long-lived objects; without ``gc.freeze`` every
        full collection walks them all, a pause of tens of milliseconds inside a filter. The
        collector is process-wide, so only the service's own process (``__main__``) tunes it.
        """
        while not self.cache.synced:
            await asyncio.sleep(0.1)
        self.cache.all_states()  # compute every node's state now, not in the first filter
        if self.tune_gc:
            gc.collect()
            gc.freeze()
            gc.set_threshold(50_000, 50, 100)  # a filter allocates in bursts; collect less often
            log.info("cache_frozen", objects=gc.get_freeze_count())
        self.warm = True

    @staticmethod
    def disagreement(node: str, found: cache.Disagreements) -> None:
        """Log what a node's pods and its grant report disagree on, each time it changes."""
        mismatches, clashes = found
        if not (mismatches or clashes):
            log.info("grant_report_agrees", node=node)
            return
        log.warning(
            "grant_mismatch",
            node=node,
            pods=[f"{m.pod} {m.reason.value} {','.join(m.chips)}" for m in mismatches],
            chips_given_twice=[f"{uuid}: {why}" for uuid, why in clashes],
            effect="each pod is counted as holding what its node granted",
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, _: fastapi.FastAPI) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()

        def node_changed(name: str) -> None:  # called from the node informer's thread
            self.locks.saw(name, self.cache.node_object(name))  # None: the node was deleted
            loop.call_soon_threadsafe(self.locks.wake, name)

        self.cache.on_node_change = node_changed
        self._loop = loop
        for item in self.informers:
            item.start()
        poller = asyncio.get_running_loop().create_task(self.poll_config())
        warmer = asyncio.get_running_loop().create_task(self._warm_when_synced())
        tasks = [poller, warmer]
        if self.reclaimer is not None:
            tasks.append(loop.create_task(self.reclaimer.run()))
        log.info(
            "scheduler_started",
            policy=self.settings.policy.value,
            reclaimer=self.reclaimer.lease.identity if self.reclaimer else "",
        )
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.events.drain()
            for item in self.informers:
                await asyncio.to_thread(item.stop)
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.events.close()


@contextlib.contextmanager
def _observe(stats: metrics.Metrics, verb: str, **fields: Any) -> Iterator[Json]:
    """Time one request, count it, and log one line with what ``fields`` collected."""
    start = time.perf_counter()
    structlog.contextvars.bind_contextvars(verb=verb, **fields)
    result: Json = {"outcome": "ok"}
    try:
        yield result
    except errors.BadRequest as exc:
        result["outcome"] = "bad_request"
        result["error"] = str(exc)
        raise
    except Exception as exc:
        result["outcome"] = "error"
        result["error"] = f"internal error: {exc!r}"
        log.exception("request_failed", verb=verb)
        raise
    finally:
        took = time.perf_counter() - start
        stats.requests.labels(verb, result["outcome"]).inc()
        stats.duration.labels(verb).observe(took)
        fields_out = {k: v for k, v in result.items() if k != "outcome"}
        log.info(
            "request", outcome=result["outcome"], duration_seconds=round(took, 6), **fields_out
        )
        structlog.contextvars.clear_contextvars()


def _pod_name(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def build(
    config: settings.Settings,
    api: cluster.Cluster,
    registry: prometheus_client.CollectorRegistry | None = None,
    tune_gc: bool = False,
) -> fastapi.FastAPI:
    """The application over ``api``; ``registry`` collects its metrics (a new one when None).

    ``tune_gc`` freezes the synced cache out of the garbage collector's sight: only for a
    process that runs nothing but this service.
    """
    service = Service(config, api, registry or prometheus_client.CollectorRegistry(), tune_gc)
    app = fastapi.FastAPI(
        title="vnpu-scheduler", lifespan=service.lifespan, docs_url=None, redoc_url=None
    )
    app.state.service = service
    app.state.on_refusal = service.refused
    _extender_routes(app, service)
    _admission_routes(app, service)
    _probe_routes(app, service)
    return app


def _extender_routes(app: fastapi.FastAPI, service: Service) -> None:
    stats = service.stats

    @app.post("/filter")
    async def filter_nodes(request: fastapi.Request) -> fastapi.Response:
        with _observe(stats, "filter") as seen:
            try:
                args = wire.read_extender_args(await request.body())
            except errors.BadRequest as exc:
                seen.update(outcome="bad_request", error=str(exc))
                return _refusal("filter", exc)
            seen["pod"] = _pod_name(args.Pod)
            if not service.cache.synced:
                seen.update(outcome="error", error="cache not synced")
                message = "vnpu-scheduler has not listed the cluster yet; retry"
                return _json(wire.filter_result(args, [], {}, {}, message))
            result = service.extender.filter(args)
            seen["nodes"] = len(wire.candidate_names(args))
            seen["fit"] = len(result["NodeNames"] or (result["Nodes"] or {}).get("items") or [])
            return _json(result)

    @app.post("/prioritize")
    async def prioritize(request: fastapi.Request) -> fastapi.Response:
        with _observe(stats, "prioritize") as seen:
            try:
                args = wire.read_extender_args(await request.body())
            except errors.BadRequest as exc:
                seen.update(outcome="bad_request", error=str(exc))
                return _refusal("prioritize", exc)
            seen["pod"] = _pod_name(args.Pod)
            return _json(service.extender.prioritize(args))

    @app.post("/bind")
    async def bind(request: fastapi.Request) -> fastapi.Response:
        with _observe(stats, "bind") as seen:
            try:
                args = wire.read_binding_args(await request.body())
            except errors.BadRequest as exc:
                seen.update(outcome="bad_request", error=str(exc))
                return _refusal("bind", exc)
            seen.update(pod=f"{args.PodNamespace}/{args.PodName}", node=args.Node)
            try:
                seen["chips"] = await service.binder.bind(args)
            except errors.BindError as exc:
                seen.update(outcome="error", error=exc.message, reason=exc.reason)
                return _json(wire.binding_result(exc.message))
            except kubeapi.ApiError as exc:
                seen.update(outcome="error", error=str(exc))
                return _json(wire.binding_result(str(exc)))
            return _json(wire.binding_result())


def _admission_routes(app: fastapi.FastAPI, service: Service) -> None:
    stats = service.stats

    def admission(verb: str, handle: Callable[[wire.AdmissionReview], Json]) -> Any:
        async def route(request: fastapi.Request) -> fastapi.Response:
            with _observe(stats, verb) as seen:
                try:
                    review = wire.read_admission_review(await request.body())
                except errors.BadReview as exc:
                    seen.update(outcome="bad_request", error=str(exc))
                    return _refusal(verb, exc, exc.uid)
                except errors.BadRequest as exc:
                    seen.update(outcome="bad_request", error=str(exc))
                    return _refusal(verb, exc)
                if review.request.object is not None:
                    meta = review.request.object.get("metadata") or {}
                    namespace = meta.get("namespace") or review.request.namespace
                    seen["pod"] = f"{namespace}/{meta.get('name') or meta.get('generateName', '')}"
                # In DRA mode a pod may need a claim template made first: an API call.
                answer = await asyncio.to_thread(handle, review)
                if not answer["response"]["allowed"]:
                    seen.update(outcome="denied", error=answer["response"]["status"]["message"])
                return _json(answer)

        return route

    app.post("/mutate")(admission("mutate", service.webhook.mutate))
    app.post("/validate")(admission("validate", service.webhook.validate))


def _probe_routes(app: fastapi.FastAPI, service: Service) -> None:
    @app.get("/healthz")
    async def healthz() -> fastapi.Response:
        return responses.PlainTextResponse("ok")

    @app.get("/readyz")
    async def readyz() -> fastapi.Response:
        ready, body = service.readiness()
        return _json(body, 200 if ready else 503)

    @app.get("/metrics")
    async def scrape() -> fastapi.Response:
        data = await asyncio.to_thread(prometheus_client.generate_latest, service.stats.registry)
        return fastapi.Response(data, media_type=prometheus_client.CONTENT_TYPE_LATEST)
