"""The sandbox configures kube-scheduler and the webhooks as the chart does on a real cluster.

``vnpu-sandbox up`` writes its own KubeSchedulerConfiguration and webhook configurations
(``vnpu_sandbox.platform.manifests``) because it has no Helm release; these tests hold them
equal to the chart's rendered documents in everything but the addresses.
"""

from __future__ import annotations

import yaml

from vnpu_sandbox.platform import manifests as sandbox


def _without(document: dict, *keys: str) -> dict:
    return {k: v for k, v in document.items() if k not in keys}


def test_the_extender_is_configured_as_the_chart_does(default):
    data = default.get("ConfigMap", "vnpu-scheduler-kube-scheduler")["data"]["config.yaml"]
    chart = yaml.safe_load(data)
    ours = sandbox.kube_scheduler_config("http://127.0.0.1:1")
    assert ours["profiles"] == chart["profiles"]
    (chart_extender,) = chart["extenders"]
    (our_extender,) = ours["extenders"]
    key = lambda r: r["name"]  # noqa: E731
    assert sorted(our_extender.pop("managedResources"), key=key) == sorted(
        chart_extender.pop("managedResources"), key=key
    )
    assert _without(our_extender, "urlPrefix") == _without(chart_extender, "urlPrefix")


def test_the_webhooks_are_configured_as_the_chart_does(default):
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (chart,) = default.all(kind)
        ours = next(
            d for d in sandbox.webhook_configurations("http://127.0.0.1:1") if d["kind"] == kind
        )
        (chart_hook,) = chart["webhooks"]
        (our_hook,) = ours["webhooks"]
        assert our_hook["clientConfig"]["url"].endswith(
            chart_hook["clientConfig"]["service"]["path"]
        )
        assert _without(our_hook, "clientConfig") == _without(chart_hook, "clientConfig")
