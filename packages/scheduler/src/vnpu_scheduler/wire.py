"""HTTP bodies: kube-scheduler's extender messages and the admission.k8s.io/v1 AdmissionReview.

The extender types (``k8s.io/kube-scheduler/extender/v1``) have no JSON tags, so the keys
on the wire are the Go field names: ``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes``,
``FailedAndUnresolvableNodes``, ``Error``, ``Host``, ``Score``, ``PodName``... ``app`` calls
the ``read_*`` functions on raw bodies; they raise ``errors.BadRequest`` naming the JSON
path and the value for anything malformed. The ``*_result`` functions build the replies.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pydantic

from vnpu_scheduler import errors

Json = dict[str, Any]
ADMISSION_VERSION = "admission.k8s.io/v1"


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="ignore", frozen=True)


class NodeList(_Model):
    items: list[Json] = []


class ExtenderArgs(_Model):
    """Filter and prioritize request: the pod, and the candidates in one of two forms."""

    Pod: Json
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


class ExtenderBindingArgs(_Model):
    """Bind request."""

    PodName: str = pydantic.Field(min_length=1)
    PodNamespace: str = pydantic.Field(min_length=1)
    PodUID: str = ""
    Node: str = pydantic.Field(min_length=1)


class AdmissionRequest(_Model):
    uid: str = pydantic.Field(min_length=1)
    operation: str = "CREATE"
    namespace: str = ""
    object: Json | None = None
    dryRun: bool = False


class AdmissionReview(_Model):
    apiVersion: str = ADMISSION_VERSION
    kind: str = "AdmissionReview"
    request: AdmissionRequest


def _parse(body: bytes, model: type[_Model]) -> Any:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest(
            "(body)", body[:60].decode(errors="replace"), f"not JSON: {exc}"
        ) from exc
    if not isinstance(document, dict):
        raise errors.BadRequest("(body)", document, f"must be a JSON object ({model.__name__})")
    try:
        return model.model_validate(document)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"]) or "(body)"
        raise errors.BadRequest(path, first.get("input"), first["msg"]) from exc


def read_extender_args(body: bytes) -> ExtenderArgs:
    args: ExtenderArgs = _parse(body, ExtenderArgs)
    if args.Nodes is None and args.NodeNames is None:
        raise errors.BadRequest("NodeNames", None, "one of Nodes or NodeNames must be given")
    metadata = args.Pod.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        raise errors.BadRequest("Pod.metadata.name", metadata, "the pod must have a name")
    if not isinstance(args.Pod.get("spec"), dict):
        raise errors.BadRequest("Pod.spec", args.Pod.get("spec"), "the pod must have a spec")
    if args.Nodes is not None:
        for i, node in enumerate(args.Nodes.items):
            if not (node.get("metadata") or {}).get("name"):
                raise errors.BadRequest(
                    f"Nodes.items.{i}.metadata.name", None, "a node needs a name"
                )
    return args


def read_binding_args(body: bytes) -> ExtenderBindingArgs:
    result: ExtenderBindingArgs = _parse(body, ExtenderBindingArgs)
    return result


def read_admission_review(body: bytes) -> AdmissionReview:
    review: AdmissionReview = _parse(body, AdmissionReview)
    if review.apiVersion != ADMISSION_VERSION:
        raise errors.BadRequest(
            "apiVersion", review.apiVersion, f"only {ADMISSION_VERSION} is served"
        )
    return review


def candidate_names(args: ExtenderArgs) -> list[str]:
    if args.NodeNames is not None:
        return list(args.NodeNames)
    assert args.Nodes is not None
    return [str(n["metadata"]["name"]) for n in args.Nodes.items]


def filter_result(
    args: ExtenderArgs | None,
    passed: list[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str = "",
) -> Json:
    """``ExtenderFilterResult`` in the form the request used (``Nodes`` or ``NodeNames``)."""
    result: Json = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }
    if args is None or error:
        return result
    if args.NodeNames is not None:
        result["NodeNames"] = passed
    else:
        assert args.Nodes is not None
        keep = set(passed)
        items = [n for n in args.Nodes.items if n["metadata"]["name"] in keep]
        result["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}
    return result


def priority_list(scores: dict[str, int]) -> list[Json]:
    """``HostPriorityList``: one ``{"Host", "Score"}`` per node, scores 0-10."""
    return [{"Host": host, "Score": score} for host, score in scores.items()]


def binding_result(error: str = "") -> Json:
    return {"Error": error}


def admission_response(
    uid: str, allowed: bool, message: str = "", patch: list[Json] | None = None, code: int = 0
) -> Json:
    """An AdmissionReview reply; a denial carries ``message`` with ``code`` (403 by default)."""
    response: Json = {"uid": uid, "allowed": allowed}
    if not allowed:
        reason = "BadRequest" if code == 400 else "Forbidden"
        response["status"] = {"code": code or 403, "message": message, "reason": reason}
    elif message:
        response["warnings"] = [message]
    if allowed and patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": ADMISSION_VERSION, "kind": "AdmissionReview", "response": response}
