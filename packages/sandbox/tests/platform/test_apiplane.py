"""The shared test kube-apiserver: a namespace per test, and ``clear`` leaves the cluster as found."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import kubernetes

from vnpu_sandbox.platform import apiplane


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "app"}]},
    }


def test_a_namespace_takes_pods_at_once_and_clear_removes_them_and_every_node(
    kube_plane: Any,
) -> None:
    space = kube_plane.namespace("apiplane-clear")
    client = kubernetes.config.new_client_from_config(str(space.kubeconfig))
    try:
        core = kubernetes.client.CoreV1Api(client)
        core.create_node({"metadata": {"name": "n1"}})
        # No kube-controller-manager runs: the default ServiceAccount is the plane's doing.
        core.create_namespaced_pod(space.name, _pod("p1"))
        core.create_namespaced_config_map(space.name, {"metadata": {"name": "c1"}})
        hook = {
            "metadata": {"name": "left-behind"},
            "webhooks": [],
        }
        admission = kubernetes.client.AdmissionregistrationV1Api(client)
        admission.create_mutating_webhook_configuration(hook)
        rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"]}
        policy = {
            "metadata": {"name": "left-behind"},
            "spec": {
                "matchConstraints": {"resourceRules": [{**rule, "resources": ["configmaps"]}]},
                "validations": [{"expression": "true"}],
            },
        }
        admission.create_validating_admission_policy(policy)
        binding = {
            "metadata": {"name": "left-behind"},
            "spec": {"policyName": "left-behind", "validationActions": ["Deny"]},
        }
        admission.create_validating_admission_policy_binding(binding)
        space.clear()
        assert core.list_node().items == []
        assert core.list_namespaced_pod(space.name).items == []
        assert core.list_namespaced_config_map(space.name).items == []
        hooks = kubernetes.client.AdmissionregistrationV1Api(
            client
        ).list_mutating_webhook_configuration()
        assert [h.metadata.name for h in hooks.items] == []
        assert admission.list_validating_admission_policy().items == []
        assert admission.list_validating_admission_policy_binding().items == []
        # What kube-apiserver made for itself stays.
        classes = kubernetes.client.SchedulingV1Api(client).list_priority_class()
        assert {"system-node-critical", "system-cluster-critical"} <= {
            c.metadata.name for c in classes.items
        }
    finally:
        client.close()


def test_a_compacted_revision_is_gone_for_a_watch_without_a_cache(
    tmp_path: Any, kube_plane: Any
) -> None:
    with apiplane.serve(tmp_path / "plane", api_args=("--watch-cache=false",)) as plane:
        old = plane.request("GET", "/api/v1/namespaces/default/configmaps")["metadata"][
            "resourceVersion"
        ]
        for number in range(3):
            body = {"metadata": {"name": f"c{number}"}}
            plane.request("POST", "/api/v1/namespaces/default/configmaps", body)
        assert plane.compact() > int(old)
        path = f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={old}"
        request = urllib.request.Request(plane.url + path + "&timeoutSeconds=2")
        with urllib.request.urlopen(request, timeout=10, context=plane.tls) as answer:
            events = [json.loads(line) for line in answer.read().splitlines() if line]
        assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)]
