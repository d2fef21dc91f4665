"""The admission webhook: round NPU requests to what will be created, route pods, deny bad ones.

``app`` calls ``Webhook.mutate`` for ``POST /mutate`` and ``Webhook.validate`` for
``POST /validate`` with a parsed ``wire.AdmissionReview`` (pod CREATE). Mutation, for a pod
that asks for Ascend resources:

* rounds ``huawei.com/<CW>-memory`` in every section that names the chip count to the
  template (or soft quota) the pod will really get, and fills it with the chip's memory
  for whole-chip requests, so ResourceQuota and accounting see what is held; a figure
  above what a whole chip gives a pod (22000 on a 310P, which gives 21527 of its 24576
  MiB) is never cut: it stays as written and a warning says what the pod gets;
* sets ``spec.schedulerName`` when it is empty or ``default-scheduler``; a pod sent to
  another scheduler (Volcano, say) is left untouched, with a warning (``notices``), as is a
  pod asking for an NPU resource vnpu does not schedule (``huawei.com/npu``);
* denies a request no chip can serve or that is malformed, naming the container, the
  resource and the value; a pod with ``spec.nodeName`` preset (it would skip the
  scheduler) and a privileged container holding NPUs are denied too, and so is a pod
  whose request alone exceeds one of its NPU quotas (``quota``: it could never be bound);
* reads the request as HAMi's webhook does where vnpu follows it (memory 0 is the
  smallest template, a core percentage above 100 is 100, a one-die request of a super-pod
  910C is a die pair), writes the adjusted figures into the pod, and returns what it
  changed as AdmissionReview ``warnings`` (kubectl prints them).

A patch is only sent if the patched pod parses to the same request (so rounding is
idempotent and never changes the template). ``validate`` runs the same checks without
patching. Pods labelled or annotated ``hami.io/webhook: ignore`` are let through. The
scheduler never relies on any of this: ``/filter`` and ``/bind`` parse and round again.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import structlog

from vnpu_core import catalog, protocol, requests
from vnpu_core import errors as core_errors
from vnpu_scheduler import claimtemplates, dramode, extender, notices, wire

Json = dict[str, Any]
DEFAULT_SCHEDULER = notices.DEFAULT_SCHEDULER
log = structlog.get_logger(__name__)


def _pointer(*parts: object) -> str:
    """A JSON pointer from its unescaped parts (``huawei.com/x`` becomes ``huawei.com~1x``)."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _above(item: requests.ContainerRequest, asked: object, rounded: str) -> bool:
    """Whether ``asked`` is more memory than the whole chips ``item`` gets: it stays as asked
    (never cut to less than the pod wrote); the request's note warns what it gets."""
    return item.whole and requests.parse_quantity(
        item.container, item.model.memory_resource, asked
    ) > int(rounded)


def _apply(pod: Json, patch: list[Json]) -> Json:
    """The pod after our own ``add`` operations (only object members, which all exist)."""
    result = copy.deepcopy(pod)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target: Any = result
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[parts[-1]] = op["value"]
    return result


def _adjusted(
    where: tuple[object, ...], values: Json, item: requests.ContainerRequest
) -> list[Json]:
    """Patch operations for a count or core percentage read differently from what is written.

    A super-pod one-die request becomes 2 (limits, and requests where they name it, as
    HAMi's webhook writes them); a core percentage above 100 becomes 100.
    """
    model = item.model
    wanted = {model.resource_name: item.count}
    if item.soft:
        wanted[model.core_resource] = item.core_percent
    patch: list[Json] = []
    for resource, number in wanted.items():
        if resource not in values:
            continue
        try:
            written = requests.parse_quantity(item.container, resource, values[resource])
        except core_errors.RequestError:
            continue  # parsed once already; a second reading cannot fail
        if written != number:
            path = _pointer(*where, resource)
            patch.append({"op": "add", "path": path, "value": str(number)})
    return patch


def _warned(reply: Json, notes: tuple[str, ...]) -> Json:
    """The AdmissionReview reply with ``notes`` as its warnings (shown by kubectl)."""
    if notes:
        response = reply["response"]
        response["warnings"] = [*response.get("warnings", []), *notes]
    return reply


class Webhook:
    """Mutating and validating admission for pods, with the chip models of ``models``."""

    def __init__(
        self,
        models: Callable[[], catalog.Catalog],
        scheduler_name: str,
        quota: Callable[[str, requests.PodRequest], str] = lambda _namespace, _request: "",
        *,
        dra: bool = False,
        templates: claimtemplates.Templates | None = None,
    ) -> None:
        self._models = models
        self._scheduler_name = scheduler_name
        self._quota = quota
        self._dra = dra
        self._templates = templates

    def _ignored(self, pod: Json) -> bool:
        meta = pod.get("metadata") or {}
        for table in (meta.get("labels") or {}, meta.get("annotations") or {}):
            if table.get(protocol.WEBHOOK_IGNORE_KEY) == protocol.WEBHOOK_IGNORE_VALUE:
                return True
        return False

    def _check(self, pod: Json, namespace: str) -> tuple[requests.PodRequest | None, str]:
        """The parsed request (None: nothing to do) or a denial message."""
        try:
            request = requests.from_pod(pod, self._models(), admission=True)
        except core_errors.RequestError as exc:
            return None, str(exc)
        if not request.wants_npu:
            return None, ""
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            return None, (
                f"spec.nodeName is preset to {spec['nodeName']!r}: a pod that requests NPUs "
                "must be placed by the scheduler, which picks its chips"
            )
        with_npu = {r.container for r in request.requests}
        for section in ("initContainers", "containers"):
            for item in spec.get(section) or []:
                privileged = (item.get("securityContext") or {}).get("privileged")
                if privileged and item.get("name") in with_npu:
                    return None, (
                        f"container {item.get('name')!r}: securityContext.privileged=true with "
                        "NPUs: a privileged container sees every chip of the node"
                    )
        namespace = (pod.get("metadata") or {}).get("namespace") or namespace or "default"
        beyond = self._quota(str(namespace), request)
        if beyond:
            return None, f"the request alone exceeds its NPU quota: {beyond}"
        return request, ""

    def _review(self, review: wire.AdmissionReview) -> tuple[Json | None, str]:
        request = review.request
        pod = request.object
        if request.operation != "CREATE" or pod is None or pod.get("kind") not in (None, "Pod"):
            return None, ""
        if self._ignored(pod):
            return None, ""
        return pod, ""

    def validate(self, review: wire.AdmissionReview) -> Json:
        uid = review.request.uid
        pod, _ = self._review(review)
        if pod is None:
            return wire.admission_response(uid, True)
        _, denial = self._check(pod, review.request.namespace)
        if denial:
            return wire.admission_response(uid, False, denial, code=400)
        return wire.admission_response(uid, True)

    def mutate(self, review: wire.AdmissionReview) -> Json:
        uid = review.request.uid
        pod, _ = self._review(review)
        if pod is None:
            return wire.admission_response(uid, True)
        request, denial = self._check(pod, review.request.namespace)
        if denial:
            return wire.admission_response(uid, False, denial, code=400)
        said = notices.notices(pod, self._models(), self._scheduler_name)
        if request is None:
            return _warned(wire.admission_response(uid, True), said)
        spec = pod.get("spec") or {}
        current = spec.get("schedulerName") or ""
        if current not in ("", DEFAULT_SCHEDULER, self._scheduler_name):
            return _warned(wire.admission_response(uid, True), said)
        if self._dra:  # kube-scheduler allocates: no routing, what DRA serves
            return self._dra_reply(review, spec, request, said)
        patch: list[Json] = []
        if current != self._scheduler_name:
            patch.append(
                {"op": "add", "path": "/spec/schedulerName", "value": self._scheduler_name}
            )
        rounding = self._rounding(spec, request)
        if rounding and self._same_request(pod, patch + rounding, request):
            patch.extend(rounding)
        elif rounding:
            log.warning("webhook_rounding_skipped", pod=request.name, namespace=request.namespace)
        return _warned(wire.admission_response(uid, True, patch=patch), request.notes + said)

    def _dra_reply(
        self,
        review: wire.AdmissionReview,
        spec: Json,
        request: requests.PodRequest,
        said: tuple[str, ...],
    ) -> Json:
        uid = review.request.uid
        converted = dramode.convert(spec, request)
        denial = converted.denial
        if not denial and converted.claims:
            if self._templates is None:
                denial = "this webhook cannot create ResourceClaimTemplates (no API client)"
            else:
                namespace = request.namespace or review.request.namespace or "default"
                dry_run = review.request.dryRun
                denial = self._templates.ensure(namespace, converted.claims, dry_run)
        if denial:
            return wire.admission_response(uid, False, denial, code=400)
        patch, notes = converted.patch, request.notes + converted.said + said
        if spec.get("schedulerName") == self._scheduler_name:  # written for classic mode
            patch = [{"op": "remove", "path": "/spec/schedulerName"}, *patch]
            notes += (
                f"spec.schedulerName {self._scheduler_name!r} removed: in DRA mode the "
                "cluster's kube-scheduler allocates NPUs (default-scheduler)",
            )
        return _warned(wire.admission_response(uid, True, patch=patch), notes)

    def _rounding(self, spec: Json, request: requests.PodRequest) -> list[Json]:
        """Patch operations that set each request's memory to what it rounds to."""
        places: dict[str, tuple[str, int]] = {}
        for section in ("initContainers", "containers"):
            for index, item in enumerate(spec.get(section) or []):
                places.setdefault(str(item.get("name", "")), (section, index))
        patch: list[Json] = []
        for item in request.requests:
            section, index = places[item.container]
            resources = (spec.get(section) or [])[index].get("resources") or {}
            model = item.model
            value = str(math.ceil(item.memory_mib / model.memory_factor))
            for kind in ("limits", "requests"):
                values = resources.get(kind) or {}
                if model.resource_name not in values:
                    continue
                where = ("spec", section, index, "resources", kind)
                patch.extend(_adjusted(where, values, item))
                asked = values.get(model.memory_resource)
                if str(asked) == value or (asked is not None and _above(item, asked, value)):
                    continue
                path = _pointer(*where, model.memory_resource)
                patch.append({"op": "add", "path": path, "value": value})
        return patch

    def _same_request(self, pod: Json, patch: list[Json], before: requests.PodRequest) -> bool:
        try:
            after = requests.from_pod(_apply(pod, patch), self._models(), admission=True)
        except core_errors.RequestError:
            return False
        policy = requests.Policy.DEFAULT
        same = extender.request_key(after, policy) == extender.request_key(before, policy)
        return same and all(
            a.memory_mib == b.memory_mib
            for a, b in zip(after.requests, before.requests, strict=True)
        )
