"""The ResourceClaimTemplates a DRA-mode pod names, made to exist before the pod is let in.

kube-controller-manager makes a pod's claim from its template when the pod is created; a
template that is missing then leaves the pod waiting. So the webhook, before it admits a pod
that names one of ``vnpu_core.draclaims``'s templates, creates it in the pod's namespace:

* a template created before (by this replica: remembered; by another: 409) is read back
  and must hold everything vnpu's ``spec`` says (kube-apiserver adds defaults and writes
  quantities in its own form, ``4Gi`` for ``4096Mi``); one that
  holds something else (someone made their own under vnpu's name) refuses the pod, naming it;
* a dry-run admission creates nothing (the webhook's ``sideEffects`` is NoneOnDryRun);
* an API failure refuses the pod with the failure's words; the user retries.

Templates are small, shared by every pod of the namespace that asks the same, and stay.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import structlog

from vnpu_core import draclaims, quantities
from vnpu_core import errors as core_errors
from vnpu_scheduler import cluster
from vnpu_service import kubeapi

log = structlog.get_logger(__name__)


def _covers(found: object, ours: object) -> bool:
    """Whether ``found`` holds everything ``ours`` says (kube-apiserver adds its defaults)."""
    if isinstance(ours, dict):
        return isinstance(found, dict) and all(
            key in found and _covers(found[key], value) for key, value in ours.items()
        )
    if isinstance(ours, list):
        return (
            isinstance(found, list)
            and len(found) == len(ours)
            and all(_covers(f, o) for f, o in zip(found, ours, strict=True))
        )
    if isinstance(ours, str) and isinstance(found, str) and found != ours:
        return _same_amount(found, ours)  # kube-apiserver writes 4096Mi as 4Gi
    return found == ours


def _same_amount(found: str, ours: str) -> bool:
    try:
        return quantities.parse(found).value == quantities.parse(ours).value
    except core_errors.QuantityError:
        return False


class Templates:
    """Creates claim templates through ``api`` and remembers the ones known to be right."""

    def __init__(self, api: cluster.Cluster) -> None:
        self._api = api
        self._known: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def ensure(
        self, namespace: str, claims: Iterable[draclaims.Claim], dry_run: bool = False
    ) -> str:
        """Make every claim template exist in ``namespace``; a refusal message, or ""."""
        for claim in claims:
            key = (namespace, claim.name)
            with self._lock:
                if key in self._known:
                    continue
            if dry_run:
                continue
            problem = self._create(namespace, claim)
            if problem:
                return problem
            with self._lock:
                self._known.add(key)
        return ""

    def _create(self, namespace: str, claim: draclaims.Claim) -> str:
        what = f"ResourceClaimTemplate {namespace}/{claim.name}"
        try:
            self._api.create_claim_template(namespace, claim.body)
            log.info("claim_template_created", namespace=namespace, name=claim.name)
            return ""
        except kubeapi.Conflict:
            pass
        except kubeapi.ApiError as exc:
            return f"cannot create {what}: {exc}"
        try:
            found = self._api.get_claim_template(namespace, claim.name)
        except kubeapi.ApiError as exc:
            return f"cannot read {what}: {exc}"
        if found is None:
            return f"{what} was deleted while it was being made; create the pod again"
        if not _covers(found.get("spec"), claim.body["spec"]):
            return (
                f"{what} exists with a spec vnpu did not write: delete it and vnpu makes it "
                "again with the next pod"
            )
        return ""
