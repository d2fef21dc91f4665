"""Bringing the platform up around a real Kubernetes control plane, for ``vnpu-sandbox up``.

``up`` chooses the ports and calls ``bring_up``. In order: certificates and kubeconfigs
(``controlplane.prepare``), etcd, kube-apiserver, vnpu's service accounts and their binding,
the webhook configurations (``https`` URLs of vnpu-scheduler's webhook listener with the
sandbox CA as ``caBundle``), kube-scheduler's configuration (the chart's document plus
``clientConnection``), the simulated chips, kube-controller-manager, kube-scheduler, then
vnpu-scheduler and every node's kubelet, device plugin and exporter, each with its own
identity. With ``up --kueue`` (``kueue``), Kueue's CRDs are created and established and its
webhook configurations registered right after vnpu's, and its manager starts after
kube-scheduler. With ``up --scheduler volcano|hami`` (``volcano``, ``hami``) no vnpu-scheduler
and no vnpu webhook run: vnpu's RBAC, admission policies and device ConfigMap come from the
chart rendered for the peer, then what the sandbox uses of the peer's chart is created, and
the peer's processes start last, once the nodes are there (each module says what it waits
for).

Ready means usable (``probes.usable``): every HTTP endpoint answers, every node is Ready with
its NPUs published, and kube-apiserver admits an NPU pod in ``default`` (a server-side dry
run: the ``default`` ServiceAccount exists and vnpu's mutating webhook answered), so a
``kubectl apply`` right after ``up`` is admitted and scheduled; with Kueue, also that a Job
for a queue comes back suspended from Kueue's webhooks (``kueue.problems``). Failures are
``startup.StartError``.
"""

from __future__ import annotations

import dataclasses
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from vnpu_core import catalog, draclasses
from vnpu_sandbox.platform import (
    clusterfile,
    components,
    controlplane,
    hami,
    kueue,
    layout,
    manifests,
    peers,
    probes,
    startup,
    volcano,
)


def _write_yaml(path: Path, document: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def _progress(line: str) -> None:
    print(f"vnpu-sandbox up: {line}", file=sys.stderr)


def _models(nodes: Sequence[clusterfile.NodeSpec]) -> list[catalog.ChipModel]:
    """The chip models of the cluster's nodes, once each, in node order."""
    found: dict[str, catalog.ChipModel] = {}
    for node in nodes:
        model = catalog.BUILTIN.by_chip_name(node.model)
        if model is not None:
            found.setdefault(model.common_word, model)
    return list(found.values())


def bring_up(
    run_: startup.Startup,
    where: layout.Layout,
    nodes: Sequence[clusterfile.NodeSpec],
    ports: components.Ports,
    plane: controlplane.Plane,
    timeout: float,
    *,
    prometheus: str | None = None,
    rules: Path | None = None,
    replicas: Sequence[tuple[int, int]] = (),
    rbac: Path | None = None,
    queueing: kueue.Kueue | None = None,
    dra: bool = False,
    peer: volcano.Volcano | hami.Hami | None = None,
) -> None:
    """Start everything; ``prometheus``: its binary (None: none), loading the alert ``rules``;
    ``replicas``: the ports (vnpu-scheduler's, kube-scheduler's) of more pairs of
    kube-scheduler and vnpu-scheduler (see ``_more_schedulers``); ``rbac``: the rendered chart
    whose RBAC objects to apply; ``queueing``: Kueue to run beside it all (None: none);
    ``dra``: DRA mode (the DeviceClasses, kube-scheduler without the extender, the webhook's
    ``--mode dra`` and a DRA driver on each node instead of the device plugin); ``peer``: the
    peer's scheduler that places NPU pods instead of vnpu-scheduler (``_start_volcano``,
    ``_start_hami``)."""
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(deadline - time.monotonic(), 1.0)

    controlplane.prepare(plane, where, nodes)
    run_.tls = controlplane.tls_context(plane.pki)
    run_.start(controlplane.etcd(plane))
    run_.wait_ready(left(), names=["etcd"])
    run_.start(controlplane.api_server(plane))
    run_.wait_ready(left(), names=["kube-apiserver"], progress=_progress)
    try:
        documents = _documents(plane, rbac, dra, peer)
        for document in documents:
            controlplane.create(plane.api_url, run_.tls, document)
    except (controlplane.ControlPlaneError, peers.PeerError) as exc:
        raise startup.StartError("kube-apiserver", str(exc)) from exc
    if queueing is not None:
        _install_kueue(run_, plane, run_.tls, queueing, left())
    if peer is not None:
        crds = [d["metadata"]["name"] for d in documents if d["kind"] == "CustomResourceDefinition"]
        run_.wait_ready(
            left(),
            names=[],
            extra=lambda: controlplane.unestablished(plane.api_url, run_.tls, crds),
            progress=_progress,
        )
    if dra:
        extender = manifests.dra_scheduler_config(_models(nodes))
    elif peer is not None:
        extender = manifests.plain_scheduler_config()
    else:
        extender = manifests.kube_scheduler_config(components.url(ports.scheduler))
    _write_yaml(where.kube_scheduler_config, controlplane.scheduler_config(plane, extender))
    if prometheus is not None:
        config = _prometheus_config(ports, rules, scheduler=peer is None)
        _write_yaml(where.prometheus / "prometheus.yml", config)
    for node in nodes:
        components.write_chips(where.node(node.name), node)
    run_.start(controlplane.controller_manager(plane))
    run_.start(controlplane.scheduler(plane, where.kube_scheduler_config))
    if queueing is not None:
        # The sandbox's admin identity: the sandbox applies none of Kueue's RBAC objects.
        run_.start(kueue.component(queueing, plane.kubeconfig(controlplane.ADMIN)))
    for component in components.services(
        where,
        nodes,
        ports,
        prometheus,
        controlplane.credentials(plane),
        scheduler_flags=controlplane.scheduler_flags(plane),
        dra=dra,
        scheduler=peer is None,
    ):
        run_.start(component)
    for extra in _more_schedulers(run_, where, ports, plane, replicas):
        run_.start(extra)
    # The probe pod: what it names and where it must be routed (``probes.usable``).
    named: str | None = None
    routed: str | None = manifests.SCHEDULER_NAME
    if isinstance(peer, volcano.Volcano):
        _start_volcano(run_, plane, nodes, peer, left)
        named, routed = volcano.SCHEDULER_NAME, None
    elif isinstance(peer, hami.Hami):
        assert rbac is not None  # up refuses a peer without the rendered chart
        _start_hami(run_, plane, nodes, peer, left, controlplane.device_config(rbac))
        routed = hami.SCHEDULER_NAME
    run_.wait_ready(
        left(),
        extra=lambda: (
            probes.node_problems(plane.api_url, nodes, run_.tls, dra)
            or probes.usable(plane.api_url, nodes, run_.tls, dra, named, routed)
            or (kueue.problems(plane.api_url, run_.tls) if queueing is not None else {})
            or (
                volcano.problems(plane.api_url, run_.tls)
                if isinstance(peer, volcano.Volcano)
                else {}
            )
        ),
        progress=_progress,
    )


def _documents(
    plane: controlplane.Plane,
    rbac: Path | None,
    dra: bool,
    peer: volcano.Volcano | hami.Hami | None,
) -> list[dict[str, Any]]:
    """What ``bring_up`` creates once kube-apiserver answers, in order. With a peer, the
    chart rendered with ``scheduler.enabled=false`` (no vnpu-scheduler, no webhooks): its RBAC,
    policies and device ConfigMap, then what the peer's chart installs."""
    if peer is None:
        webhooks = manifests.webhook_configurations(
            controlplane.https(plane.ports.webhook), controlplane.ca_bundle(plane)
        )
        classes = draclasses.device_classes(catalog.BUILTIN) if dra else []
        return [*controlplane.rbac_documents(rbac), *webhooks, *classes]
    assert rbac is not None  # up refuses a peer without the rendered chart
    device_config = controlplane.device_config(rbac)
    documents = [*controlplane.rbac_documents(rbac), device_config]
    if isinstance(peer, volcano.Volcano):
        return documents + volcano.install_documents(peer)
    name = device_config["metadata"]["name"]
    return documents + hami.install_documents(peer, controlplane.ca_bundle(plane), name)


def _start_volcano(
    run_: startup.Startup,
    plane: controlplane.Plane,
    nodes: Sequence[clusterfile.NodeSpec],
    peer: volcano.Volcano,
    left: Callable[[], float],
) -> None:
    """The peer's processes, once every node has published its chips, each with a fresh
    token of its service account; then, once vc-scheduler has run a session, every node's next
    report (``volcano``'s docstring says why)."""
    run_.wait_ready(
        left(),
        extra=lambda: probes.node_problems(plane.api_url, nodes, run_.tls),
        progress=_progress,
    )
    assert run_.tls is not None
    try:
        volcano.prepare(peer, plane.pki.ca.cert, plane.api_url, run_.tls)
    except peers.PeerError as exc:
        raise startup.StartError(volcano.PEER, str(exc)) from exc
    names = []
    for component in volcano.components_(peer, plane.ports.api):
        run_.start(component)
        names.append(component.name)
    run_.wait_ready(
        left(),
        names=names,
        extra=lambda: {} if volcano.sessions(peer) else {volcano.SCHEDULER: "no session yet"},
        progress=_progress,
    )
    before = volcano.reports(plane.api_url, run_.tls, nodes)
    run_.wait_ready(
        left(),
        names=[],
        extra=lambda: {
            name: "waiting for its device plugin's next report (Volcano reads devices then)"
            for name, seen in volcano.reports(plane.api_url, run_.tls, nodes).items()
            if seen == before.get(name)
        },
        progress=_progress,
    )


def _install_kueue(
    run_: startup.Startup,
    plane: controlplane.Plane,
    tls: ssl.SSLContext,
    queueing: kueue.Kueue,
    timeout: float,
) -> None:
    """Kueue's files, CRDs (waiting until kube-apiserver serves them: the manager's caches
    need them from its start) and webhook configurations, all on the sandbox's CA."""
    bundle = controlplane.ca_bundle(plane)
    try:
        kueue.prepare(queueing, plane.pki)
        crds = kueue.crd_documents(queueing.build, queueing.webhook_url, bundle)
        kueue.create_crds(plane.api_url, tls, crds)
        for document in kueue.webhook_configurations(queueing.build, queueing.webhook_url, bundle):
            controlplane.create(plane.api_url, tls, document)
    except (kueue.KueueError, controlplane.ControlPlaneError) as exc:
        raise startup.StartError("kueue", str(exc)) from exc
    names = [crd["metadata"]["name"] for crd in crds]
    run_.wait_ready(
        timeout,
        names=[],
        extra=lambda: controlplane.unestablished(plane.api_url, tls, names),
        progress=_progress,
    )


def _start_hami(
    run_: startup.Startup,
    plane: controlplane.Plane,
    nodes: Sequence[clusterfile.NodeSpec],
    peer: hami.Hami,
    left: Callable[[], float],
    device_config: dict[str, Any],
) -> None:
    """HAMi's extender and kube-scheduler with a fresh token of the chart's service account,
    then until HAMi has read every node's chips."""
    assert run_.tls is not None
    try:
        hami.prepare(peer, plane.pki.ca.cert, plane.api_url, run_.tls, device_config)
    except peers.PeerError as exc:
        raise startup.StartError(hami.PEER, str(exc)) from exc
    for component in hami.components_(
        peer, plane.ports.api, plane.pki.serving, plane.bins["kube-scheduler"]
    ):
        run_.start(component)
    seen: set[str] = set()
    run_.wait_ready(
        left(),
        extra=lambda: hami.registered(plane.api_url, run_.tls, nodes, seen),
        progress=_progress,
    )


def _prometheus_config(
    ports: components.Ports, rules: Path | None, scheduler: bool = True
) -> dict[str, object]:
    loopback = components.LOOPBACK
    return manifests.prometheus_config(
        f"{loopback}:{ports.scheduler}" if scheduler else None,
        [(n, f"{loopback}:{p}") for n, p in ports.device_plugins.items()],
        [(n, f"{loopback}:{p}") for n, p in ports.exporters.items()],
        [str(rules)] if rules is not None else [],
    )


def _more_schedulers(
    run_: startup.Startup,
    where: layout.Layout,
    ports: components.Ports,
    plane: controlplane.Plane,
    replicas: Sequence[tuple[int, int]],
) -> list[components.Component]:
    """Replicas 2..N: each a vnpu-scheduler and a kube-scheduler calling it as its extender.

    Every kube-scheduler runs without leader election, so all of them schedule the same
    pending pods at once and race to bind them: the case the node locks must hold. Only the
    first vnpu-scheduler serves the webhooks (any replica would answer them alike).
    """
    found: list[components.Component] = []
    for index, (port, secure) in enumerate(replicas, start=2):
        replica = components.services(
            where,
            (),
            dataclasses.replace(ports, scheduler=port),
            None,
            controlplane.credentials(plane),
        )[0]
        config = where.root / f"kube-scheduler-{index}.yaml"
        extender = manifests.kube_scheduler_config(components.url(port))
        _write_yaml(config, controlplane.scheduler_config(plane, extender))
        found.append(dataclasses.replace(replica, name=f"vnpu-scheduler-{index}"))
        found.append(controlplane.scheduler(plane, config, f"kube-scheduler-{index}", secure))
        run_.record.ports[f"scheduler-{index}"] = port
        run_.record.ports[f"kube-scheduler-{index}"] = secure
    return found
