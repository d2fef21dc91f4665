"""An HTTP scheduler extender, called exactly as kube-scheduler's ``HTTPExtender`` calls it.

``scheduler`` makes one :class:`Extender` per entry of the configuration's ``extenders`` and
calls :meth:`~Extender.filter`, :meth:`~Extender.prioritize` (from the scheduling thread) and
:meth:`~Extender.bind` (from the bind workers; the client is shared and thread-safe). Each
verb is a ``POST <urlPrefix>/<verb>`` with a JSON body whose keys are the Go field names of
``k8s.io/kube-scheduler/extender/v1``:

* ``ExtenderArgs`` ``{"Pod": {...}, "Nodes": null, "NodeNames": ["n1", ...]}`` when
  ``nodeCacheCapable``, else ``{"Pod": {...}, "Nodes": {"metadata": {}, "items": [<Node>...]},
  "NodeNames": null}``;
* ``ExtenderFilterResult`` back: ``Nodes`` / ``NodeNames`` (the survivors), ``FailedNodes``,
  ``FailedAndUnresolvableNodes`` (node -> reason), ``Error``;
* ``HostPriorityList`` back from prioritize: ``[{"Host": "n1", "Score": 0-10}, ...]``;
* ``ExtenderBindingArgs`` ``{"PodName", "PodNamespace", "PodUID", "Node"}`` -> ``{"Error": ""}``.

Answers are decoded like Go's ``encoding/json``: keys match case-insensitively, unknown keys are
ignored, a value of the wrong type is a decode error. Every failure raises
``errors.ExtenderError`` with kube-scheduler's text: ``Post "<url>": <why>`` when the call did
not complete (``httpTimeout`` is the whole call's deadline), ``failed <verb> with extender at URL
<url>, code <status>`` for a status other than 200, the extender's ``Error`` verbatim, and
``extender "<urlPrefix>" claims a filtered node "<name>" which is not found in the input node
list``. TLS (``enableHTTPS``, ``tlsConfig``) follows ``makeTransport``: without a CA the
server is not verified.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from vnpu_sandbox.scheduling import config, errors, nodeinfo, podrequests

Json = dict[str, Any]


@dataclass(frozen=True)
class FilterResult:
    """The survivors (in the extender's order) and the refused nodes with their reasons."""

    nodes: tuple[str, ...]
    failed: Mapping[str, str]
    unresolvable: Mapping[str, str]


def _field(document: Mapping[str, Any], name: str) -> Any:
    """Go's field matching: the exact key, else the first key equal ignoring case."""
    if name in document:
        return document[name]
    folded = name.lower()
    for key, value in document.items():
        if isinstance(key, str) and key.lower() == folded:
            return value
    return None


def _ssl_context(spec: config.Extender) -> ssl.SSLContext | bool:
    tls = spec.tls or config.TlsConfig()
    if not spec.enable_https and spec.tls is None:
        return True
    if tls.cert_data or tls.key_data:
        raise errors.ConfigError(
            "tlsConfig.certData",
            None,
            "client certificates as data are not supported; use certFile and keyFile",
        )
    cadata = None
    if tls.ca_data:
        try:
            cadata = base64.b64decode(tls.ca_data, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            cadata = tls.ca_data  # already PEM text
    has_ca = bool(tls.ca_file or cadata)
    context = ssl.create_default_context(cafile=tls.ca_file or None, cadata=cadata)
    if tls.insecure or (spec.enable_https and not has_ca):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if tls.cert_file:
        context.load_cert_chain(tls.cert_file, tls.key_file or None)
    return context


class Extender:
    """One configured extender; ``name`` is its URL prefix, as in kube-scheduler."""

    def __init__(self, spec: config.Extender, *, connections: int = 16) -> None:
        self.spec = spec
        self.name = spec.url_prefix
        self._managed = spec.managed_names
        self._client = httpx.Client(
            timeout=httpx.Timeout(spec.http_timeout),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            verify=_ssl_context(spec),
            headers={"Content-Type": "application/json"},
        )
        self._extensions = (
            {"sni_hostname": spec.tls.server_name} if spec.tls and spec.tls.server_name else {}
        )

    def close(self) -> None:
        self._client.close()

    # --- kube-scheduler's predicates on the extender ----------------------------------------

    def interested(self, pod: Json) -> bool:
        """``IsInterested``: no managed resources, or the pod names one in any container."""
        if not self._managed:
            return True
        return not self._managed.isdisjoint(podrequests.resource_names(pod))

    @property
    def is_filter(self) -> bool:
        return bool(self.spec.filter_verb)

    @property
    def is_prioritizer(self) -> bool:
        return bool(self.spec.prioritize_verb)

    @property
    def is_binder(self) -> bool:
        return bool(self.spec.bind_verb)

    # --- the verbs ------------------------------------------------------------------------

    def _args(self, pod: Json, nodes: Sequence[nodeinfo.NodeFacts]) -> Json:
        if self.spec.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [n.name for n in nodes]}
        return {
            "Pod": pod,
            "Nodes": {"metadata": {}, "items": [n.node for n in nodes]},
            "NodeNames": None,
        }

    def _send(self, verb: str, body: Json) -> Any:
        url = self.spec.url_prefix.rstrip("/") + "/" + verb
        try:
            response = self._client.post(url, content=json.dumps(body), extensions=self._extensions)
        except httpx.TimeoutException as exc:
            raise errors.ExtenderError(
                verb,
                url,
                f'Post "{url}": timed out after {self.spec.http_timeout:g} s (httpTimeout): {exc}',
            ) from exc
        except httpx.HTTPError as exc:
            raise errors.ExtenderError(verb, url, f'Post "{url}": {exc}') from exc
        if response.status_code != 200:
            raise errors.ExtenderError(
                verb, url, f"failed {verb} with extender at URL {url}, code {response.status_code}"
            )
        try:
            return json.loads(response.content)
        except ValueError as exc:
            raise errors.ExtenderError(
                verb, url, f"{verb} answer of {url} is not JSON: {exc}"
            ) from exc

    def _bad(self, verb: str, what: str, value: object) -> errors.ExtenderError:
        url = self.spec.url_prefix.rstrip("/") + "/" + verb
        return errors.ExtenderError(
            verb, url, f"{verb} answer of {url}: {what} (got {value!r:.120})"
        )

    def _reasons(self, verb: str, value: object, key: str) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise self._bad(verb, f"{key} must map node names to reasons", value)
        return {str(k): v for k, v in value.items()}

    def filter(self, pod: Json, nodes: Sequence[nodeinfo.NodeFacts]) -> FilterResult:
        verb = self.spec.filter_verb
        answer = self._send(verb, self._args(pod, nodes))
        if answer is None:
            answer = {}
        if not isinstance(answer, dict):
            raise self._bad(verb, "must be an ExtenderFilterResult object", answer)
        error = _field(answer, "Error")
        if error is not None and not isinstance(error, str):
            raise self._bad(verb, "Error must be a string", error)
        if error:
            raise errors.ExtenderError(verb, self.spec.url_prefix, error)
        failed = self._reasons(verb, _field(answer, "FailedNodes"), "FailedNodes")
        unresolvable = self._reasons(
            verb, _field(answer, "FailedAndUnresolvableNodes"), "FailedAndUnresolvableNodes"
        )
        known = {n.name for n in nodes}
        names = _field(answer, "NodeNames")
        listed = _field(answer, "Nodes")
        passed: list[str] = []
        if self.spec.node_cache_capable and names is not None:
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise self._bad(verb, "NodeNames must be a list of node names", names)
            passed = names
        elif listed is not None:
            items = _field(listed, "items") if isinstance(listed, dict) else None
            if not isinstance(items, list):
                raise self._bad(verb, "Nodes must be a NodeList with items", listed)
            for item in items:
                name = (
                    ((item or {}).get("metadata") or {}).get("name")
                    if isinstance(item, dict)
                    else None
                )
                if not isinstance(name, str):
                    raise self._bad(verb, "every item of Nodes needs metadata.name", item)
                passed.append(name)
        for name in passed:
            if name not in known:
                raise errors.ExtenderError(
                    verb,
                    self.spec.url_prefix,
                    f"extender {json.dumps(self.spec.url_prefix)} claims a filtered node "
                    f"{json.dumps(name)} which is not found in the input node list",
                )
        return FilterResult(tuple(passed), failed, unresolvable)

    def prioritize(self, pod: Json, nodes: Sequence[nodeinfo.NodeFacts]) -> dict[str, int]:
        """Host -> the extender's score (not yet weighted)."""
        verb = self.spec.prioritize_verb
        answer = self._send(verb, self._args(pod, nodes))
        if answer is None:
            return {}
        if not isinstance(answer, list):
            raise self._bad(verb, "must be a HostPriorityList (a list of {Host, Score})", answer)
        scores: dict[str, int] = {}
        for item in answer:
            host = _field(item, "Host") if isinstance(item, dict) else None
            score = _field(item, "Score") if isinstance(item, dict) else None
            if not isinstance(host, str) or isinstance(score, bool) or not isinstance(score, int):
                raise self._bad(verb, "every entry needs a string Host and an integer Score", item)
            scores[host] = score
        return scores

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        verb = self.spec.bind_verb
        answer = self._send(
            verb, {"PodName": name, "PodNamespace": namespace, "PodUID": uid, "Node": node}
        )
        error = _field(answer, "Error") if isinstance(answer, dict) else None
        if answer is not None and not isinstance(answer, dict):
            raise self._bad(verb, "must be an ExtenderBindingResult object", answer)
        if error is not None and not isinstance(error, str):
            raise self._bad(verb, "Error must be a string", error)
        if error:
            raise errors.ExtenderError(verb, self.spec.url_prefix, error)
