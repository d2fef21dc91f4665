"""The chart's admission, enforced by a real kube-apiserver.

The rendered ValidatingAdmissionPolicies and their bindings are installed in the session's
kube-apiserver, then each attack that once worked is made as a tenant and again as
vnpu-scheduler's service account: the tenant is refused with a message naming the field, the
value and who may set it; the scheduler is not. Every caller is the plane's admin
impersonating the identity (kube-apiserver hands the admission plugins the impersonated user,
as it would a token's), and each holds a Role that lets it create, update and bind pods and
write their status in the test's namespace: more than a tenant usually gets, so that only
admission stands between the tenant and each attack. Last, the rendered webhook
configurations with no webhook behind them: NPU pods are refused, other pods admitted.

The plane is shared by the session, and kube-apiserver keeps admission objects in its caches
for a moment after they are deleted: each binding and webhook installed here is confined to
the test's namespace (a namespaceSelector added to what the chart renders), so that no other
test's requests are judged by them.
"""

from __future__ import annotations

import copy
import functools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

Json = dict[str, Any]

TENANT = "alice"
SCHEDULER = "system:serviceaccount:kube-system:vnpu-scheduler"
DEVICE_PLUGIN = "system:serviceaccount:kube-system:vnpu-device-plugin"
REPLICASET_CONTROLLER = "system:serviceaccount:kube-system:replicaset-controller"
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
CALLERS = (TENANT, SCHEDULER, DEVICE_PLUGIN, REPLICASET_CONTROLLER, DAEMONSET_CONTROLLER)
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
NPU = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "3072"}
DECISION = "hami.io/Ascend310P-devices-allocated"
FORGED = {
    "hami.io/Ascend310P-devices-to-allocate": "chip-0,Ascend310P,3072,1:;",
    DECISION: "chip-0,Ascend310P,3072,1:;",
    "huawei.com/Ascend310P": '[{"UUID":"chip-0","temp":"vir01"}]',
    "hami.io/vgpu-node": "npu-1",
    "hami.io/bind-phase": "allocating",
    "hami.io/bind-time": "1786000000",
    "predicate-time": "1786000000",
}
WAIT_SECONDS = 15.0


@dataclass(frozen=True)
class Answer:
    status: int
    body: Json

    @property
    def message(self) -> str:
        return str(self.body.get("message", ""))


@dataclass(frozen=True)
class Caller:
    """Requests to the plane as ``user`` (the admin impersonating it)."""

    plane: Any
    user: str
    namespace: str

    def call(
        self,
        method: str,
        path: str,
        body: object = None,
        content_type: str = "application/json",
    ) -> Answer:
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.user:
            headers["Impersonate-User"] = self.user
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.plane.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10, context=self.plane.tls) as answer:
                return Answer(answer.status, json.loads(answer.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, json.loads(exc.read() or b"{}"))

    def pods(self, suffix: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods{suffix}"

    def create(self, pod: Json, *, dry_run: bool = False) -> Answer:
        return self.call("POST", self.pods("?dryRun=All" if dry_run else ""), pod)

    def patch(self, name: str, body: Json, subresource: str = "") -> Answer:
        path = self.pods(f"/{name}" + (f"/{subresource}" if subresource else ""))
        return self.call("PATCH", path, body, "application/merge-patch+json")

    def bind(self, name: str, node: str, annotations: dict[str, str]) -> Answer:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "annotations": annotations},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        return self.call("POST", self.pods(f"/{name}/binding"), binding)


def pod(
    name: str,
    *,
    resources: dict[str, str] | None = None,
    node: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    where: str = "limits",
    init: bool = False,
    affinity: Json | None = None,
) -> Json:
    """A pod; ``resources`` in ``where`` (limits, requests or both) of its container, or of
    an init container before it with ``init``."""
    main: Json = {"name": "main", "image": "ascend/app"}
    spec: Json = {"containers": [main]}
    if resources:
        holder: Json = {"name": "prepare", "image": "ascend/app"} if init else main
        kinds = ("limits", "requests") if where == "both" else (where,)
        holder["resources"] = {kind: dict(resources) for kind in kinds}
        if init:
            spec["initContainers"] = [holder]
    if node:
        spec["nodeName"] = node
    if affinity:
        spec["affinity"] = affinity
    metadata: Json = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not check():
        assert time.monotonic() < deadline, f"timed out after {WAIT_SECONDS:g} s: {what}"
        time.sleep(0.05)


def confined(document: Json, namespace: str) -> Json:
    """``document`` as rendered, judging requests in ``namespace`` only (see the docstring)."""
    result = copy.deepcopy(document)
    only = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}
    if result["kind"] == "ValidatingAdmissionPolicyBinding":
        result["spec"]["matchResources"] = {"namespaceSelector": {"matchExpressions": [only]}}
    else:
        for hook in result["webhooks"]:
            selector = hook.setdefault("namespaceSelector", {})
            selector.setdefault("matchExpressions", []).append(only)
    return result


def grant(admin: Caller) -> None:
    """Every caller may create, change and bind pods and write their status in the namespace."""
    base = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{admin.namespace}"
    role = {
        "metadata": {"name": "pod-writer"},
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["pods"],
                "verbs": ["create", "get", "list", "update", "patch", "delete"],
            },
            {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["get", "update", "patch"]},
            {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        ],
    }
    subjects = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": TENANT}]
    for user in CALLERS[1:]:
        _, namespace, name = user.rsplit(":", 2)
        subjects.append({"kind": "ServiceAccount", "name": name, "namespace": namespace})
    binding = {
        "metadata": {"name": "pod-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-writer"},
        "subjects": subjects,
    }
    for path, body in ((f"{base}/roles", role), (f"{base}/rolebindings", binding)):
        answer = admin.call("POST", path, body)
        assert answer.status == 201, answer.message
    for user in CALLERS:
        caller = Caller(admin.plane, user, admin.namespace)
        until(functools.partial(admitted, caller, pod("probe")), f"RBAC letting {user} in")


def admitted(caller: Caller, document: Json) -> bool:
    """``caller`` may create ``document`` (a server-side dry run: nothing is made)."""
    return caller.create(document, dry_run=True).status == 201


def refused_by(caller: Caller, document: Json, policy: str) -> bool:
    """``policy`` refuses ``caller`` to create ``document`` (a server-side dry run)."""
    return f"ValidatingAdmissionPolicy '{policy}'" in caller.create(document, dry_run=True).message


def install(admin: Caller, manifests: Any, kinds: tuple[str, ...]) -> None:
    collections = {
        "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    }
    for kind in kinds:
        for document in manifests.all(kind):
            if kind != "ValidatingAdmissionPolicy":
                document = confined(document, admin.namespace)  # noqa: PLW2901
            answer = admin.call("POST", f"{ADMISSION}/{collections[kind]}", document)
            assert answer.status == 201, f"{kind}: {answer.message}"


def enforce(admin: Caller, manifests: Any) -> None:
    """Install the rendered policies and bindings; return once kube-apiserver applies both."""
    install(admin, manifests, ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"))
    tenant = Caller(admin.plane, TENANT, admin.namespace)
    probes = {
        "vnpu-npu-pods": pod("probe", resources=NPU, node="npu-1"),
        "vnpu-decision-annotations": pod("probe", annotations={DECISION: "x"}),
    }
    for policy, probe in probes.items():
        until(functools.partial(refused_by, tenant, probe, policy), f"enforcing {policy}")


@dataclass(frozen=True)
class Callers:
    admin: Caller
    tenant: Caller
    scheduler: Caller
    device_plugin: Caller

    def as_user(self, user: str) -> Caller:
        return Caller(self.admin.plane, user, self.admin.namespace)


def _callers(space: Any) -> Callers:
    admin = Caller(space.plane, "", space.name)
    grant(admin)
    return Callers(
        admin,
        Caller(space.plane, TENANT, space.name),
        Caller(space.plane, SCHEDULER, space.name),
        Caller(space.plane, DEVICE_PLUGIN, space.name),
    )


@pytest.fixture
def callers(kube_namespace: Any) -> Callers:
    return _callers(kube_namespace)


@pytest.fixture
def enforced(callers: Callers, default: Any) -> Callers:
    """The default render's policies and bindings, enforced for the test's namespace (``clear``
    deletes them when the test ends)."""
    enforce(callers.admin, default)
    return callers


def refused(answer: Answer, policy: str) -> str:
    assert answer.status == 403, answer
    prefix = f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "
    assert prefix in answer.message, answer.message
    return answer.message.split(prefix, 1)[1]


# Attack 1: a preset spec.nodeName and the webhook-ignore label, no annotations


NPU_SHAPES = {
    "container-limits": {"resources": NPU},
    "limits-and-requests": {"resources": NPU, "where": "both"},
    "init-container": {"resources": NPU, "init": True},
    "volcano-name": {"resources": {"huawei.com/npu-core": "2"}},
}


@pytest.mark.parametrize("shape", list(NPU_SHAPES))
def test_an_npu_pod_with_a_preset_node_is_refused_but_not_for_the_scheduler(enforced, shape):
    kwargs = NPU_SHAPES[shape]
    container = "prepare" if kwargs.get("init") else "main"
    attack = pod("attack", node="npu-1", labels={"hami.io/webhook": "ignore"}, **kwargs)
    message = refused(enforced.tenant.create(attack), "vnpu-npu-pods")
    start = "spec.nodeName: npu-1 is refused at creation: the pod requests "
    assert message.startswith(start), message
    named, _, rest = message[len(start) :].partition(f" (container {container}), ")
    assert set(named.split(", ")) == set(kwargs["resources"]), message
    assert rest.startswith("and an NPU pod is placed by vnpu-scheduler"), message
    assert f"Only vnpu's scheduler and device plugin ({SCHEDULER}, {DEVICE_PLUGIN})" in message
    # The same pod from the scheduler's service account is created, node and label as given.
    created = enforced.scheduler.create(attack)
    assert created.status == 201, created.message
    assert created.body["spec"]["nodeName"] == "npu-1"


@pytest.mark.parametrize(
    ("labels", "annotations", "field"),
    [
        ({"hami.io/webhook": "ignore"}, {}, "metadata.labels[hami.io/webhook]"),
        ({}, {"hami.io/webhook": "ignore"}, "metadata.annotations[hami.io/webhook]"),
    ],
    ids=["label", "annotation"],
)
def test_the_webhook_skip_marker_is_refused_on_npu_pods(enforced, labels, annotations, field):
    attack = pod("skip", resources=NPU, labels=labels, annotations=annotations)
    message = refused(enforced.tenant.create(attack), "vnpu-npu-pods")
    namespace = enforced.tenant.namespace
    assert message.startswith(f"{field}: ignore is refused in namespace {namespace}: ")
    assert "Only NPU pods in no namespace (admissionPolicy.ignoreLabelNamespaces is empty)" in (
        message
    )
    assert enforced.scheduler.create(attack).status == 201
    # On a pod that asks for no NPU the label means nothing to vnpu: admitted.
    plain = pod("plain", labels=labels, annotations=annotations)
    assert enforced.tenant.create(plain).status == 201


def test_namespaces_the_operator_lists_may_skip_the_webhook(callers, render):
    namespace = callers.tenant.namespace
    enforce(callers.admin, render({"admissionPolicy": {"ignoreLabelNamespaces": [namespace]}}))
    skip = pod("skip", resources=NPU, labels={"hami.io/webhook": "ignore"})
    assert callers.tenant.create(skip).status == 201
    # Skipping the webhook never allows skipping the scheduler.
    attack = pod("attack", resources=NPU, node="npu-1", labels={"hami.io/webhook": "ignore"})
    refused(callers.tenant.create(attack), "vnpu-npu-pods")


def test_pods_without_npus_and_npu_pods_left_to_the_scheduler_are_unaffected(enforced):
    for admitted in (
        pod("pinned", node="npu-1"),  # a plain pod may name its node
        pod("cpu", resources={"cpu": "1"}, node="npu-1"),
        pod("npu", resources=NPU),  # an NPU pod for vnpu-scheduler to place
        pod("soft", resources=NPU, annotations={"huawei.com/vnpu-mode": "hami-core"}),
        pod(
            "choices",
            resources=NPU,
            annotations={
                "hami.io/use-Ascend310P-uuid": "chip-0",
                "hami.io/no-use-Ascend310P-uuid": "chip-1",
                "hami.io/gpu-scheduler-policy": "binpack",
                "hami.io/node-scheduler-policy": "spread",
            },
        ),
    ):
        answer = enforced.tenant.create(admitted)
        assert answer.status == 201, (admitted["metadata"]["name"], answer.message)


# Attack 2: preset node, skip label and a forged decision on free chips


def test_a_forged_decision_with_a_preset_node_is_refused(enforced):
    attack = pod(
        "forged",
        resources=NPU,
        node="npu-1",
        labels={"hami.io/webhook": "ignore"},
        annotations=FORGED,
    )
    answer = enforced.tenant.create(attack)
    assert answer.status == 403, answer
    assert "ValidatingAdmissionPolicy" in answer.message, answer
    assert enforced.scheduler.create(attack).status == 201


@pytest.mark.parametrize(
    ("key", "value"), [*FORGED.items(), ("huawei.com/npu-core", "0-vir02_1c")], ids=str
)
def test_every_decision_annotation_is_refused_on_any_pod(enforced, key, value):
    """On an NPU pod, and on a pod without NPUs bound to a node (it would make chips look held)."""
    for attack in (
        pod("npu", resources=NPU, annotations={key: value}),
        pod("pinned", node="npu-1", annotations={key: value}),
    ):
        message = refused(enforced.tenant.create(attack), "vnpu-decision-annotations")
        assert message.startswith(f"metadata.annotations[{key}]: {value} is refused: ")
        assert f"Only vnpu's scheduler and device plugin ({SCHEDULER}, {DEVICE_PLUGIN})" in message
        assert message.endswith(
            "may set or change it; remove it from the pod (or from the pod template of its "
            "controller)."
        )
        assert enforced.scheduler.create(attack).status == 201
        enforced.admin.call("DELETE", enforced.admin.pods(f"/{attack['metadata']['name']}"))


def test_a_long_value_is_shortened_in_the_message(enforced):
    value = "chip-0,Ascend310P,3072,1:" * 10 + ";"
    message = refused(
        enforced.tenant.create(pod("long", annotations={DECISION: value})),
        "vnpu-decision-annotations",
    )
    assert f"metadata.annotations[{DECISION}]: {value[:80]}... is refused" in message


def test_decisions_are_not_changed_or_removed_but_by_vnpu(enforced):
    bound = pod("bound", resources=NPU, node="npu-1", annotations=FORGED)
    assert enforced.scheduler.create(bound).status == 201
    change = {"metadata": {"annotations": {"hami.io/bind-phase": "success"}}}
    message = refused(enforced.tenant.patch("bound", change), "vnpu-decision-annotations")
    assert message.startswith("metadata.annotations[hami.io/bind-phase]: success is refused: ")
    assert message.endswith("may set or change it.")
    # Through the status subresource too (it writes metadata as well).
    refused(enforced.tenant.patch("bound", change, "status"), "vnpu-decision-annotations")
    remove = {"metadata": {"annotations": {DECISION: None}}}
    message = refused(enforced.tenant.patch("bound", remove), "vnpu-decision-annotations")
    assert message.startswith(
        f"metadata.annotations[{DECISION}] may not be removed (it is {FORGED[DECISION]}): "
    )
    assert message.endswith("may change it. Delete the pod to give its chips back.")
    # Other annotations and labels stay the tenant's to change.
    own = {"metadata": {"labels": {"team": "a"}, "annotations": {"note": "mine"}}}
    assert enforced.tenant.patch("bound", own).status == 200
    # The device plugin answers the decision, as it must.
    answered = enforced.device_plugin.patch("bound", change)
    assert answered.status == 200, answered.message
    assert answered.body["metadata"]["annotations"]["hami.io/bind-phase"] == "success"


def test_a_template_pin_is_fixed_at_creation(enforced):
    pinned = pod("pinned", resources=NPU, annotations={"vnpu.io/template": "vir04"})
    assert enforced.tenant.create(pinned).status == 201
    change = {"metadata": {"annotations": {"vnpu.io/template": "vir02"}}}
    message = refused(enforced.tenant.patch("pinned", change), "vnpu-decision-annotations")
    assert message == (
        "metadata.annotations[vnpu.io/template]: vir02 is refused: the pin is checked, and the "
        "pod's memory rounded to it, when the pod is created (it was vir04). Create a new pod "
        "to pin another template."
    )
    remove = {"metadata": {"annotations": {"vnpu.io/template": None}}}
    message = refused(enforced.tenant.patch("pinned", remove), "vnpu-decision-annotations")
    assert message.startswith("metadata.annotations[vnpu.io/template]: (removed) is refused")
    assert enforced.tenant.create(pod("free", resources=NPU)).status == 201
    added = {"metadata": {"annotations": {"vnpu.io/template": "vir04"}}}
    message = refused(enforced.tenant.patch("free", added), "vnpu-decision-annotations")
    assert message.endswith("(it was not pinned). Create a new pod to pin another template.")
    # Unchanged on an update of something else: allowed.
    assert enforced.tenant.patch("pinned", {"metadata": {"labels": {"a": "b"}}}).status == 200


def test_a_binding_carries_decisions_from_the_scheduler_only(enforced):
    for name in ("by-tenant", "by-scheduler", "plain-binding"):
        assert enforced.tenant.create(pod(name, resources=NPU)).status == 201
    message = refused(
        enforced.tenant.bind("by-tenant", "npu-1", FORGED), "vnpu-decision-annotations"
    )
    assert " is refused in pods/binding: it is a scheduling decision" in message
    assert enforced.scheduler.bind("by-scheduler", "npu-1", FORGED).status == 201
    placed = enforced.admin.call("GET", enforced.admin.pods("/by-scheduler")).body
    assert placed["spec"]["nodeName"] == "npu-1"
    assert placed["metadata"]["annotations"][DECISION] == FORGED[DECISION]
    # The policy is about the annotations, not about who may bind (that is RBAC's).
    assert enforced.tenant.bind("plain-binding", "npu-1", {}).status == 201


def test_pods_made_by_controllers_are_judged_by_what_they_hold(enforced):
    """A controller creates pods from a template: it is the requester, the template the
    content; it is exempt from nothing, and a template without those fields passes."""
    replicaset = enforced.as_user(REPLICASET_CONTROLLER)
    refused(
        replicaset.create(pod("from-template", resources=NPU, annotations=FORGED)),
        "vnpu-decision-annotations",
    )
    refused(replicaset.create(pod("pinned", resources=NPU, node="npu-1")), "vnpu-npu-pods")
    assert replicaset.create(pod("replica", resources=NPU)).status == 201
    # The DaemonSet controller pins a pod to its node by affinity, not spec.nodeName.
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["npu-1"]}
                        ]
                    }
                ]
            }
        }
    }
    daemon = enforced.as_user(DAEMONSET_CONTROLLER)
    answer = daemon.create(pod("daemon", resources=NPU, affinity=pinned))
    assert answer.status == 201, answer.message


# Attack 3: pods created while the webhook is down


def test_with_the_webhook_down_npu_pods_are_refused_and_others_admitted(callers, default):
    """The rendered webhooks call the Service vnpu-scheduler, which does not exist here: the
    API server cannot reach them, as during a scheduler restart."""
    install(
        callers.admin, default, ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    )
    npu = pod("npu", resources=NPU)
    until(
        lambda: "failed calling webhook" in callers.tenant.create(npu, dry_run=True).message,
        "kube-apiserver calling the rendered webhooks",
    )
    for attempt in (npu, pod("init", resources=NPU, init=True)):
        answer = callers.tenant.create(attempt)
        assert answer.status >= 500, answer
        assert 'failed calling webhook "mutate.vnpu.io"' in answer.message
    # A pod that asks for no NPU is never sent to the webhook, so it does not wait for it.
    for plain in (pod("plain"), pod("cpu", resources={"cpu": "1"}), pod("pinned", node="n")):
        answer = callers.tenant.create(plain)
        assert answer.status == 201, answer.message
    # Nothing was created behind the refusals.
    names = {
        p["metadata"]["name"] for p in callers.admin.call("GET", callers.admin.pods()).body["items"]
    }
    assert names == {"plain", "cpu", "pinned"}
