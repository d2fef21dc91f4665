"""Admission webhooks: the stored Mutating/ValidatingWebhookConfigurations, called on CREATE.

``routes`` calls ``Admission.mutate`` on a decoded and defaulted object before
``registry.prepare_create``, and ``Admission.validate`` on the prepared object before
``registry.insert``, the real server's order. For each webhook whose ``rules`` (operations,
apiGroups, apiVersions, resources, scope), ``namespaceSelector`` and ``objectSelector``
match, an ``admission.k8s.io/v1`` AdmissionReview is POSTed to ``clientConfig.url``
(HTTPS verified against ``clientConfig.caBundle``, or the system roots without one; plain
HTTP is accepted too) within ``timeoutSeconds``. Mutating configurations run in name order,
each JSONPatch is applied and defaults are filled again; a denial becomes the real server's
``admission webhook "<name>" denied the request: <message>`` Status; a call that fails
obeys ``failurePolicy`` (Fail: 500 InternalError, Ignore: skipped). Not done here:
``clientConfig.service`` (there is no service network: use ``url``), ``matchConditions``
(CEL; not evaluated), reinvocation, and UPDATE/DELETE/CONNECT operations.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import json
import logging
import ssl
import urllib.error
import urllib.request
import uuid
from typing import Any

from vnpu_sandbox.apiserver import (
    errors,
    patches,
    resources,
    schemas,
    selectors,
    store,
    strategies,
)

Json = dict[str, Any]
log = logging.getLogger(__name__)

USER_INFO = {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]}


@dataclasses.dataclass(frozen=True)
class Request:
    """What is being admitted: the attributes a webhook's rules and selectors look at."""

    resource: resources.Resource
    namespace: str
    name: str
    operation: str
    obj: Json
    subresource: str = ""
    dry_run: bool = False


@dataclasses.dataclass
class Outcome:
    """The admitted object and the warnings webhooks returned for the client."""

    obj: Json
    warnings: list[str] = dataclasses.field(default_factory=list)


class CallFailed(Exception):
    """A webhook could not be called or answered nonsense: ``failurePolicy`` decides."""


def _listed(values: object, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def rule_matches(rule: Json, request: Request) -> bool:
    resource = request.resource
    if not _listed(rule.get("operations"), request.operation):
        return False
    if not _listed(rule.get("apiGroups"), resource.group) or not _listed(
        rule.get("apiVersions"), resource.version
    ):
        return False
    wanted = f"{resource.plural}/{request.subresource}" if request.subresource else resource.plural
    names = rule.get("resources") or []
    if request.subresource:
        ok = any(
            n in (wanted, "*/*", f"{resource.plural}/*", f"*/{request.subresource}") for n in names
        )
    else:
        ok = any(n in (wanted, "*", "*/*") for n in names)
    scope = rule.get("scope", "*")
    if scope == "Namespaced" and not resource.namespaced:
        return False
    if scope == "Cluster" and resource.namespaced:
        return False
    return ok


class Admission:
    """Finds the webhooks that apply to a request and calls them."""

    def __init__(self, objects: store.Store) -> None:
        self.store = objects

    def _webhooks(self, kind: resources.Resource, request: Request) -> list[Json]:
        if request.resource in (resources.MUTATING_WEBHOOKS, resources.VALIDATING_WEBHOOKS):
            return []  # the real server never sends webhook configurations to webhooks
        found = []
        for config in self.store.items(kind.key):
            for hook in config.get("webhooks") or []:
                if self._applies(hook, request):
                    found.append(hook)
        return found

    def _applies(self, hook: Json, request: Request) -> bool:
        if not any(
            rule_matches(r, request) for r in hook.get("rules") or [] if isinstance(r, dict)
        ):
            return False
        labels = request.obj.get("metadata", {}).get("labels") or {}
        if not selectors.label_selector_matches(hook.get("objectSelector"), labels):
            return False
        if request.resource is resources.NAMESPACES:
            namespace_labels = labels
        elif request.resource.namespaced:
            namespace = self.store.get(resources.NAMESPACES.key, "", request.namespace) or {}
            namespace_labels = namespace.get("metadata", {}).get("labels") or {}
        else:
            return True
        return selectors.label_selector_matches(hook.get("namespaceSelector"), namespace_labels)

    async def mutate(self, request: Request) -> Outcome:
        outcome = Outcome(request.obj)
        for hook in self._webhooks(resources.MUTATING_WEBHOOKS, request):
            response = await self._call(hook, dataclasses.replace(request, obj=outcome.obj))
            if response is None:
                continue
            outcome.warnings.extend(str(w) for w in response.get("warnings") or [])
            patch = response.get("patch")
            if patch:
                outcome.obj = schemas.without_nulls(
                    self._apply_patch(hook, response, outcome.obj, patch)
                )
                resource = request.resource
                schemas.check(resource.kind, resource.api_version, outcome.obj)
                strategies.defaults(resource, outcome.obj)
        return outcome

    async def validate(self, request: Request) -> list[str]:
        warnings: list[str] = []
        for hook in self._webhooks(resources.VALIDATING_WEBHOOKS, request):
            response = await self._call(hook, request)
            if response is not None:
                warnings.extend(str(w) for w in response.get("warnings") or [])
        return warnings

    def _apply_patch(self, hook: Json, response: Json, obj: Json, patch: object) -> Json:
        name = hook.get("name")
        if response.get("patchType") != "JSONPatch":
            raise errors.InternalError(
                f'admission webhook "{name}" returned a patch with patchType {errors.quote(response.get("patchType"))}, only "JSONPatch" is supported'
            )
        try:
            operations = json.loads(base64.b64decode(str(patch), validate=True))
            patched = patches.json_patch(obj, operations)
        except (ValueError, binascii.Error, patches.PatchError) as exc:
            raise errors.InternalError(
                f'admission webhook "{name}" returned a patch that cannot be applied: {exc}'
            ) from exc
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise errors.InternalError(
                f'admission webhook "{name}" returned a patch that does not leave an object with metadata'
            )
        return patched

    async def _call(self, hook: Json, request: Request) -> Json | None:
        """The webhook's AdmissionResponse if it allowed the request; None if it was skipped."""
        name = str(hook.get("name"))
        timeout = float(hook.get("timeoutSeconds") or 10)
        versions = hook.get("admissionReviewVersions") or ["v1"]
        review_version = "admission.k8s.io/v1" if "v1" in versions else "admission.k8s.io/v1beta1"
        uid = str(uuid.uuid4())
        review = _review(review_version, uid, request)
        url = str((hook.get("clientConfig") or {}).get("url") or "")
        try:
            answer = await asyncio.wait_for(asyncio.to_thread(_post, hook, review), timeout)
            response = _response(answer, review_version, uid)
        except (CallFailed, TimeoutError) as exc:
            why = (
                str(exc)
                if isinstance(exc, CallFailed)
                else f'Post "{url}": context deadline exceeded'
            )
            message = f'failed calling webhook "{name}": failed to call webhook: {why}'
            if hook.get("failurePolicy") == "Ignore":
                log.warning("admission_webhook_ignored webhook=%s error=%s", name, message)
                return None
            raise errors.InternalError(message) from exc
        if not response.get("allowed"):
            raise errors.WebhookDenied(name, response.get("status"))
        return response


def _review(api_version: str, uid: str, request: Request) -> Json:
    resource = request.resource
    kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    resource_id = {
        "group": resource.group,
        "version": resource.version,
        "resource": resource.plural,
    }
    body: Json = {
        "uid": uid,
        "kind": kind,
        "resource": resource_id,
        "requestKind": kind,
        "requestResource": resource_id,
        "name": request.name,
        "operation": request.operation,
        "userInfo": USER_INFO,
        "object": request.obj,
        "oldObject": None,
        "dryRun": request.dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if request.subresource:
        body["subResource"] = request.subresource
    if resource.namespaced:
        body["namespace"] = request.namespace
    return {"apiVersion": api_version, "kind": "AdmissionReview", "request": body}


def _post(hook: Json, review: Json) -> bytes:
    """POST the review to the webhook (runs in a worker thread); raises ``CallFailed``."""
    client = hook.get("clientConfig") or {}
    url = client.get("url")
    if not url:
        raise CallFailed(
            "clientConfig.service cannot be resolved by the vnpu-sandbox API emulator (there is no service network); use clientConfig.url"
        )
    context = None
    if str(url).startswith("https://"):
        try:
            bundle = (
                base64.b64decode(client["caBundle"]).decode() if client.get("caBundle") else None
            )
            context = (
                ssl.create_default_context(cadata=bundle)
                if bundle
                else ssl.create_default_context()
            )
        except (ValueError, binascii.Error, ssl.SSLError) as exc:
            raise CallFailed(f"clientConfig.caBundle cannot be used: {exc}") from exc
    data = json.dumps(review).encode()
    request = urllib.request.Request(
        str(url),
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(
            request, timeout=float(hook.get("timeoutSeconds") or 10), context=context
        ) as answer:
            return bytes(answer.read())
    except urllib.error.HTTPError as exc:
        raise CallFailed(f'Post "{url}": the webhook answered HTTP {exc.code}') from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise CallFailed(f'Post "{url}": {reason}') from exc


def _response(answer: bytes, api_version: str, uid: str) -> Json:
    try:
        review = json.loads(answer)
    except ValueError as exc:
        raise CallFailed(f"the webhook's answer is not JSON: {exc}") from exc
    if not isinstance(review, dict) or not isinstance(review.get("response"), dict):
        raise CallFailed("webhook response was absent")
    if review.get("apiVersion") != api_version or review.get("kind") != "AdmissionReview":
        raise CallFailed(
            f"expected webhook response of {api_version}, Kind=AdmissionReview, got {review.get('apiVersion')}, Kind={review.get('kind')}"
        )
    response: Json = review["response"]
    if response.get("uid") != uid:
        raise CallFailed(f'expected response.uid="{uid}", got "{response.get("uid")}"')
    return response
