"""HTTP bodies: kube-scheduler's extender messages and the admission.k8s.io/v1 AdmissionReview.

The extender types (``k8s.io/kube-scheduler/extender/v1``) have no JSON tags, so the keys
on the wire are the Go field names: ``Pod``, ``Nodes``, ``NodeNames``, ``FailedNodes``,
``FailedAndUnresolvableNodes``, ``Error``, ``Host``, ``Score``, ``PodName``... ``app`` calls
the ``read_*`` functions on raw bodies; they raise ``errors.BadRequest`` naming the JSON
path and the value for anything malformed: a body that is not JSON, a pod or node nested
deeper than ``MAX_DEPTH``, or holding a value of the wrong JSON type anywhere the scheduler reads
(``shapes``). The ``*_result`` functions build the replies; ``refusal`` is each verb's reply
to a request it cannot serve (HTTP 4xx), in the verb's own shape.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pydantic

from vnpu_scheduler import errors, shapes

Json = dict[str, Any]
ADMISSION_VERSION = "admission.k8s.io/v1"
MAX_DEPTH = 64
_SCAN_ALONE = 16  # containers longer than this are checked for containers in one pass first
"""Deepest JSON nesting read (a pod with node affinity and managed fields is below 25)."""

_REASONS = {400: "BadRequest", 403: "Forbidden", 408: "Timeout", 413: "RequestEntityTooLarge"}


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
    """Bind request; kube-scheduler always sends the pod's UID, and the bind is for that pod only."""

    PodName: str = pydantic.Field(min_length=1)
    PodNamespace: str = pydantic.Field(min_length=1)
    PodUID: str = pydantic.Field(min_length=1)
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


def nested_deeper(value: object, limit: int) -> bool:
    """Whether the parsed JSON ``value`` nests arrays and objects more than ``limit`` deep.

    Level by level, never recursing, so no depth can exhaust the interpreter's stack. A long
    container is first looked at through the set of its children's types (one C loop), so a
    list of a thousand node names costs little more than nothing.
    """
    level: list[Any] = [value] if type(value) is dict or type(value) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if type(item) is dict else item
            if len(children) > _SCAN_ALONE:
                kinds = set(map(type, children))
                if dict not in kinds and list not in kinds:
                    continue
            for child in children:
                if type(child) is dict or type(child) is list:
                    below.append(child)
        level = below
    return False


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)  # NaN and Infinity are not JSON


def document(body: bytes) -> Any:
    """The JSON value of ``body``; BadRequest for anything that is not JSON.

    The parser recurses once per level and stops with RecursionError near the interpreter's
    limit (about 1,000 levels), long before it runs out of stack: that is refused here as
    too deep. What the scheduler keeps of a body is then held to ``MAX_DEPTH`` (``bounded``).
    """
    shown = body[:60].decode(errors="replace")
    try:
        return _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except RecursionError as exc:
        raise errors.BadRequest("(body)", shown, f"nested deeper than {MAX_DEPTH} levels") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest("(body)", shown, f"not JSON: {exc}") from exc


def bounded(value: object, path: str, below: int) -> None:
    """Refuse ``value`` (at ``path``, ``below`` levels under the body) if the body gets too deep.

    Only what the scheduler keeps is measured: the pod, the nodes, the reviewed object; the
    rest of a body is dropped unread by the models.
    """
    if nested_deeper(value, MAX_DEPTH - below):
        raise errors.BadRequest(path, ..., f"nested deeper than {MAX_DEPTH} levels (from the body)")


def _validate(found: Any, model: type[_Model]) -> Any:
    if not isinstance(found, dict):
        raise errors.BadRequest("(body)", found, f"must be a JSON object ({model.__name__})")
    try:
        return model.model_validate(found)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"]) or "(body)"
        raise errors.BadRequest(path, first.get("input"), first["msg"]) from exc


def read_extender_args(body: bytes) -> ExtenderArgs:
    args: ExtenderArgs = _validate(document(body), ExtenderArgs)
    if args.Nodes is None and args.NodeNames is None:
        raise errors.BadRequest("NodeNames", None, "one of Nodes or NodeNames must be given")
    bounded(args.Pod, "Pod", 1)
    if args.Nodes is not None:
        bounded(args.Nodes.items, "Nodes.items", 2)
    shapes.check_object(args.Pod, shapes.POD, "Pod")
    metadata = args.Pod.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        raise errors.BadRequest("Pod.metadata.name", metadata, "the pod must have a name")
    if not isinstance(args.Pod.get("spec"), dict):
        raise errors.BadRequest("Pod.spec", args.Pod.get("spec"), "the pod must have a spec")
    if args.Nodes is not None:
        for i, node in enumerate(args.Nodes.items):
            shapes.check_object(node, shapes.NODE, f"Nodes.items.{i}")
            if not (node.get("metadata") or {}).get("name"):
                raise errors.BadRequest(
                    f"Nodes.items.{i}.metadata.name", None, "a node needs a name"
                )
    return args


def read_binding_args(body: bytes) -> ExtenderBindingArgs:
    result: ExtenderBindingArgs = _validate(document(body), ExtenderBindingArgs)
    return result


def read_admission_review(body: bytes) -> AdmissionReview:
    """The review; BadReview (with the request's uid when it could be read) for a bad body."""
    found = document(body)
    try:
        review: AdmissionReview = _validate(found, AdmissionReview)
        if review.apiVersion != ADMISSION_VERSION:
            raise errors.BadRequest(
                "apiVersion", review.apiVersion, f"only {ADMISSION_VERSION} is served"
            )
        pod = review.request.object
        bounded(pod, "request.object", 2)
        creating = review.request.operation == "CREATE"
        if creating and pod is not None and pod.get("kind") in (None, "Pod"):
            shapes.check_object(pod, shapes.POD, "request.object")
    except errors.BadRequest as exc:
        raise errors.BadReview(_review_uid(found), exc.field, exc.value, exc.problem) from exc
    return review


def _review_uid(found: Any) -> str:
    request = found.get("request") if isinstance(found, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else ""


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
        code = code or 403
        reason = _REASONS.get(code, "Forbidden")
        response["status"] = {"code": code, "message": message, "reason": reason}
    elif message:
        response["warnings"] = [message]
    if allowed and patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return {"apiVersion": ADMISSION_VERSION, "kind": "AdmissionReview", "response": response}


def refusal(verb: str, message: str, code: int = 400, uid: str = "") -> object:
    """The reply of ``verb`` to a request it cannot serve, in the shape its caller decodes.

    kube-scheduler reads no body from a reply whose status is not 200, so the shape matters
    to other callers; a prioritize reply has no room for a message (it is a bare
    HostPriorityList), so ``ERROR_HEADER`` carries it on every refusal.
    """
    if verb == "filter":
        return filter_result(None, [], {}, {}, message)
    if verb == "prioritize":
        return priority_list({})
    if verb == "bind":
        return binding_result(message)
    if verb in ("mutate", "validate"):
        return admission_response(uid, False, message, code=code)
    return {"error": message}


ERROR_HEADER = "vnpu-error"


def header_text(message: str) -> str:
    """``message`` as an HTTP header value: ASCII, no control characters, at most 1,000 bytes."""
    text = message.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if " " <= c <= "~" else " " for c in text)
    return text[:1000]
