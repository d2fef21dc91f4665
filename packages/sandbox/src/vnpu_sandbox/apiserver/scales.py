"""The ``/scale`` subresource of deployments and replicasets, as an ``autoscaling/v1`` Scale.

``registry`` answers GET, PUT and PATCH on ``.../<name>/scale`` with ``scale_of`` (the Scale
view of the stored object: its name, uid and resourceVersion, ``spec.replicas``, and the
observed ``status.replicas`` with the selector in string form) and reads the replica count a
PUT or a patched Scale asks for with ``wanted_replicas``, refused as the real server does.
kubectl uses both verbs: ``kubectl scale`` patches the Scale, and with ``--current-replicas``
or ``--resource-version`` it reads the Scale and puts it back.
"""

from __future__ import annotations

from typing import Any

from vnpu_sandbox.apiserver import errors, selectors

Json = dict[str, Any]

API_VERSION = "autoscaling/v1"
KIND = "Scale"


def scale_of(obj: Json) -> Json:
    """The Scale of a Deployment or ReplicaSet."""
    metadata, spec = obj["metadata"], obj.get("spec") or {}
    status = obj.get("status") or {}
    view: Json = {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": {
            key: metadata[key]
            for key in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if key in metadata
        },
        "spec": {},
        "status": {
            "replicas": int(status.get("replicas") or 0),
            "selector": selectors.label_selector_text(spec.get("selector")),
        },
    }
    if spec.get("replicas"):
        view["spec"]["replicas"] = int(spec["replicas"])  # omitted when 0, as in Go
    return view


def wanted_replicas(scale: Json, name: str) -> int:
    """``spec.replicas`` of a Scale sent by a client (absent means 0); 422 when negative."""
    replicas = int((scale.get("spec") or {}).get("replicas") or 0)
    if replicas < 0:
        raise errors.Invalid(
            "autoscaling",
            KIND,
            name,
            [
                errors.FieldError(
                    "spec.replicas", "Invalid", replicas, "must be greater than or equal to 0"
                )
            ],
        )
    return replicas
