"""The kubelet's DRA manager: prepare a pod's ResourceClaims before its containers start,
unprepare them once no pod on the node uses them, and say which CDI devices each container gets.

``podworker`` calls :meth:`DraManager.prepare` after admission and before a pod is marked
running, and :meth:`DraManager.unprepare` once the pod's containers have stopped (deleted or
finished); ``podresources`` reads :meth:`DraManager.container_claims` for DynamicResources.
The logic and the error texts follow ``pkg/kubelet/cm/dra/manager.go``:

1. for each ``spec.resourceClaims`` entry (``resourceClaimName``, or a template whose claim
   name is in ``status.resourceClaimStatuses``) and ``status.extendedResourceClaimStatus``:
   read the ResourceClaim, check it was made for the pod (template claims), that
   ``status.reservedFor`` holds the pod and that it is allocated, and find the drivers of its
   allocation results among the registered ones;
2. add the pod to each claim's cache entry; claims already prepared are skipped, so a claim
   that several pods share is prepared once;
3. one ``NodePrepareResources`` per driver with all of the pod's unprepared claims of that
   driver; per-claim errors, unknown and missing answers fail the whole call; the devices of
   each answer are stored, and the claims are marked prepared only once every driver is done.

Any failure raises ``errors.DraError`` (``prepare dynamic resources: ...``); the caller keeps
the pod Pending and tries again later. Unpreparing drops the pod from each claim; a claim that
no pod references any more gets ``NodeUnprepareResources`` from each of its drivers and leaves
the cache only when they all succeeded.

The cache is the kubelet's in-memory claim info cache. It survives ``Kubelet.restart()``
(the real kubelet keeps it in a checkpoint); a new process starts with it empty and prepares
the claims of the running pods it adopts again, which drivers must take as a no-op.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from vnpu_kubelet_api.dra.v1 import api_pb2 as dra_pb2
from vnpu_sandbox.kubelet import apiclient, draplugins, errors

log = logging.getLogger(__name__)

Json = dict[str, Any]


@dataclass(frozen=True)
class PreparedDevice:
    """One device a driver prepared for a claim."""

    driver: str
    pool: str
    device: str
    request_names: tuple[str, ...]
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass
class ClaimInfo:
    namespace: str
    name: str
    uid: str
    drivers: tuple[str, ...]
    pods: set[str] = field(default_factory=set)
    devices: dict[str, list[PreparedDevice]] = field(default_factory=dict)
    prepared: bool = False
    unpreparing: bool = False


@dataclass(frozen=True)
class ContainerClaim:
    """What a container gets from one claim (for allocation records and PodResources)."""

    claim: str
    namespace: str
    devices: tuple[PreparedDevice, ...]

    @property
    def cdi_device_ids(self) -> tuple[str, ...]:
        return tuple(cdi for d in self.devices for cdi in d.cdi_device_ids)


def _meta(obj: Json) -> Json:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _pod_name(pod: Json) -> str:
    return f"{_meta(pod).get('namespace', '')}/{_meta(pod).get('name', '')}"


def claim_name(pod: Json, pod_claim: Json) -> tuple[str | None, bool]:
    """(claim name or None when no claim is needed, must the claim be owned by the pod)."""
    if pod_claim.get("resourceClaimName"):
        return str(pod_claim["resourceClaimName"]), False
    if pod_claim.get("resourceClaimTemplateName"):
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if status.get("name") == pod_claim.get("name"):
                name = status.get("resourceClaimName")
                return (str(name) if name else None), True
        raise errors.DraError(f'pod "{_pod_name(pod)}": ResourceClaim not created yet')
    raise errors.DraError(
        f'pod "{_pod_name(pod)}", spec.resourceClaim "{pod_claim.get("name", "")}": '
        "none of the supported fields are set"
    )


def claim_names(pod: Json) -> list[tuple[str, bool]]:
    """Every claim the pod uses, spec order, then the extended resource claim."""
    out = []
    for pod_claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        name, owned = claim_name(pod, pod_claim)
        if name is not None:
            out.append((name, owned))
    extended = (pod.get("status") or {}).get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        out.append((str(extended["resourceClaimName"]), False))
    return out


def uses_claims(pod: Json) -> bool:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return bool(spec.get("resourceClaims") or status.get("extendedResourceClaimStatus"))


def _check_claim(pod: Json, claim: Json, name: str, must_own: bool) -> tuple[str, ...]:
    """The drivers of an allocated claim reserved for the pod; ``DraError`` otherwise."""
    meta, pod_meta = _meta(claim), _meta(pod)
    pod_uid = str(pod_meta.get("uid", ""))
    if must_own and not any(
        ref.get("controller") and ref.get("uid") == pod_uid
        for ref in meta.get("ownerReferences") or []
    ):
        raise errors.DraError(
            f"ResourceClaim {meta.get('namespace')}/{name} was not created for Pod "
            f"{_pod_name(pod)} (Pod is not owner)",
            name,
        )
    status = claim.get("status") or {}
    if not any(ref.get("uid") == pod_uid for ref in status.get("reservedFor") or []):
        raise errors.DraError(
            f"pod {pod_meta.get('name')} ({pod_uid}) is not allowed to use ResourceClaim "
            f"{name} ({meta.get('uid')})",
            name,
        )
    allocation = status.get("allocation")
    if not allocation:
        raise errors.DraError(f"ResourceClaim {name}: not allocated", name)
    results = (allocation.get("devices") or {}).get("results") or []
    return tuple(sorted({str(r.get("driver", "")) for r in results}))


class DraManager:
    """Claim cache plus the prepare / unprepare calls; thread-safe."""

    def __init__(self, api: apiclient.KubeApi, drivers: draplugins.Drivers) -> None:
        self._api = api
        self._drivers = drivers
        self._cache: dict[tuple[str, str], ClaimInfo] = {}
        self._lock = threading.Lock()

    # -- prepare -------------------------------------------------------------------------

    def prepare(self, pod: Json) -> None:
        """Prepare every claim of the pod not prepared yet; ``DraError`` on any failure."""
        try:
            self._prepare(pod)
        except errors.DraError as exc:
            raise errors.DraError(f"prepare dynamic resources: {exc}", exc.claim) from exc

    def _prepare(self, pod: Json) -> None:
        namespace = str(_meta(pod).get("namespace", ""))
        pod_uid = str(_meta(pod).get("uid", ""))
        found: list[tuple[Json, tuple[str, ...]]] = []
        for name, must_own in claim_names(pod):
            try:
                claim = self._api.get_resource_claim(namespace, name)
            except errors.ApiError as exc:
                raise errors.DraError(f"fetch ResourceClaim {name}: {exc.message}", name) from exc
            drivers = _check_claim(pod, claim, name, must_own)
            for driver in drivers:
                self._drivers.get(driver)  # DraError: not registered
            found.append((claim, drivers))
        batches: dict[str, list[dra_pb2.Claim]] = {}
        with self._lock:
            for claim, drivers in found:
                meta = _meta(claim)
                key = (namespace, str(meta.get("name")))
                info = self._cache.get(key)
                if info is None:
                    info = ClaimInfo(namespace, key[1], str(meta.get("uid")), drivers)
                    self._cache[key] = info
                elif info.uid != str(meta.get("uid")):
                    raise errors.DraError(
                        f"old ResourceClaim with same name {key[1]} and different UID "
                        f"{info.uid} still exists (previous pod force-deleted?!)",
                        key[1],
                    )
                elif info.unpreparing:
                    raise errors.DraError(f"ResourceClaim {key[1]} is being unprepared", key[1])
                info.pods.add(pod_uid)
                if info.prepared:
                    continue
                request = dra_pb2.Claim(namespace=namespace, uid=info.uid, name=info.name)
                for driver in info.drivers:
                    batches.setdefault(driver, []).append(request)
        for driver_name, claims in sorted(batches.items()):
            response = self._drivers.get(driver_name).prepare(claims)
            for uid, result in response.claims.items():
                asked = next((c for c in claims if c.uid == uid), None)
                if asked is None:
                    raise errors.DraError(
                        f"NodePrepareResources returned result for unknown claim UID {uid}"
                    )
                if result.error:
                    raise errors.DraError(
                        f"NodePrepareResources failed for ResourceClaim {asked.name}: "
                        f"{result.error}",
                        asked.name,
                    )
                devices = [
                    PreparedDevice(
                        driver_name,
                        d.pool_name,
                        d.device_name,
                        tuple(d.request_names),
                        tuple(d.cdi_device_ids),
                        d.share_id if d.HasField("share_id") else None,
                    )
                    for d in result.devices
                ]
                with self._lock:
                    info = self._cache.get((namespace, asked.name))
                    if info is None:
                        raise errors.DraError(
                            f"internal error: unable to get claim info for ResourceClaim "
                            f"{asked.name} in namespace {namespace}"
                        )
                    info.devices[driver_name] = devices
            unfinished = len(claims) - len(response.claims)
            if unfinished:
                raise errors.DraError(f"NodePrepareResources skipped {unfinished} ResourceClaims")
        with self._lock:
            for claims in batches.values():
                for request in claims:
                    info = self._cache.get((namespace, request.name))
                    if info is not None:
                        info.prepared = True
        if batches:
            log.info(
                "dra_claims_prepared pod=%s claims=%s",
                _pod_name(pod),
                sorted({c.name for claims in batches.values() for c in claims}),
            )

    # -- unprepare -----------------------------------------------------------------------

    def needs_unprepare(self, pod_uid: str) -> bool:
        """Whether some claim still references the pod (PodMightNeedToUnprepareResources)."""
        with self._lock:
            return any(pod_uid in info.pods for info in self._cache.values())

    def unprepare(self, pod: Json) -> None:
        """Release the pod's claims; ``DraError`` when a driver call fails (retry later)."""
        try:
            self._unprepare(pod)
        except errors.DraError as exc:
            raise errors.DraError(f"unprepare dynamic resources: {exc}", exc.claim) from exc

    def _unprepare(self, pod: Json) -> None:
        namespace = str(_meta(pod).get("namespace", ""))
        pod_uid = str(_meta(pod).get("uid", ""))
        batches: dict[str, list[dra_pb2.Claim]] = {}
        done: list[tuple[str, str]] = []
        with self._lock:
            names = [i.name for i in self._cache.values() if pod_uid in i.pods]
            for name in names:
                info = self._cache[(namespace, name)]
                if len(info.pods) > 1:
                    info.pods.discard(pod_uid)
                    continue
                info.unpreparing = True
                done.append((namespace, name))
                request = dra_pb2.Claim(namespace=namespace, uid=info.uid, name=info.name)
                for driver in info.drivers:
                    batches.setdefault(driver, []).append(request)
        for driver_name, claims in sorted(batches.items()):
            response = self._drivers.get(driver_name).unprepare(claims)
            for uid, result in response.claims.items():
                asked = next((c for c in claims if c.uid == uid), None)
                if asked is None:
                    raise errors.DraError(
                        f"NodeUnprepareResources returned result for unknown claim UID {uid}"
                    )
                if result.error:
                    raise errors.DraError(
                        f"NodeUnprepareResources failed for ResourceClaim {asked.name}: "
                        f"{result.error}",
                        asked.name,
                    )
            unfinished = len(claims) - len(response.claims)
            if unfinished:
                raise errors.DraError(f"NodeUnprepareResources skipped {unfinished} ResourceClaims")
        with self._lock:
            for key in done:
                self._cache.pop(key, None)
        if done:
            log.info("dra_claims_unprepared pod=%s claims=%s", _pod_name(pod), [n for _, n in done])

    # -- what containers get -------------------------------------------------------------

    def container_claims(self, pod: Json, container: str) -> list[ContainerClaim]:
        """The prepared claims a container references (``resources.claims``, and the extended
        resource claim's request mappings), with the devices of the requests it names."""
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        namespace = str(_meta(pod).get("namespace", ""))
        item = next(
            (
                c
                for kind in ("initContainers", "containers")
                for c in spec.get(kind) or []
                if c.get("name") == container
            ),
            None,
        )
        if item is None:
            return []
        requests: dict[str, list[str]] = {}
        for ref in (item.get("resources") or {}).get("claims") or []:
            requests.setdefault(str(ref.get("name", "")), []).append(str(ref.get("request", "")))
        wanted: dict[str, list[str]] = {}
        for pod_claim in spec.get("resourceClaims") or []:
            if pod_claim.get("name") not in requests:
                continue
            try:
                name, _owned = claim_name(pod, pod_claim)
            except errors.DraError:
                continue
            if name is not None:
                wanted.setdefault(name, []).extend(requests[str(pod_claim["name"])])
        extended = status.get("extendedResourceClaimStatus") or {}
        for mapping in extended.get("requestMappings") or []:
            if mapping.get("containerName") == container:
                name = str(extended.get("resourceClaimName", ""))
                wanted.setdefault(name, []).append(str(mapping.get("requestName", "")))
        out = []
        with self._lock:
            for name, names in wanted.items():
                info = self._cache.get((namespace, name))
                if info is None or not info.prepared:
                    continue
                devices = tuple(
                    device
                    for driver in sorted(info.devices)
                    for device in info.devices[driver]
                    if any(
                        not r or not device.request_names or r in device.request_names
                        for r in names
                    )
                )
                out.append(ContainerClaim(name, namespace, devices))
        return out

    def forget(self) -> None:
        """Drop the cache (a new kubelet process without a DRA checkpoint)."""
        with self._lock:
            self._cache.clear()
