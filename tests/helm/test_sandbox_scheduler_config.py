"""The chart's KubeSchedulerConfiguration, read by the sandbox's scheduling driver.

``vnpu-sandbox scheduler --config`` must accept exactly what the chart renders for
kube-scheduler, and read from it what kube-scheduler would: the profile, the extender's URL,
verbs, weight, timeout and managed resources (the count resources checked by NodeResourcesFit,
the ``-memory`` and ``-core`` ones ignored).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vnpu_sandbox.scheduling import config, extender


def rendered_config(manifests: Any, tmp_path: Path) -> config.Config:
    data = manifests.get("ConfigMap", "vnpu-scheduler-kube-scheduler")["data"]
    path = tmp_path / "config.yaml"
    path.write_text(data["config.yaml"], encoding="utf-8")
    return config.load(path)


def test_the_driver_reads_the_default_render(default: Any, tmp_path: Path) -> None:
    read = rendered_config(default, tmp_path)
    assert read.profiles == ("vnpu-scheduler",)
    assert (read.initial_backoff, read.max_backoff) == (1.0, 10.0)
    assert read.ignored == ("leaderElection",)
    (spec,) = read.extenders
    assert spec.url_prefix == "http://127.0.0.1:8888"
    assert (spec.filter_verb, spec.prioritize_verb, spec.bind_verb) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert (spec.weight, spec.http_timeout, spec.node_cache_capable) == (10, 30.0, True)
    assert (spec.enable_https, spec.ignorable, spec.tls) == (False, False, None)
    managed = {r.name: r.ignored_by_scheduler for r in spec.managed_resources}
    assert managed["huawei.com/Ascend310P"] is False
    assert managed["huawei.com/Ascend310P-memory"] is True
    assert managed["huawei.com/Ascend310P-core"] is True
    assert managed["huawei.com/Ascend910B3"] is False
    for name, ignored in managed.items():
        assert ignored is name.endswith(("-memory", "-core")), name
    assert "huawei.com/Ascend310P" not in read.ignored_resources
    assert "huawei.com/Ascend310P-memory" in read.ignored_resources
    client = extender.Extender(spec)
    try:
        pod = {"spec": {"containers": [{"resources": {"limits": {"huawei.com/Ascend310P": "1"}}}]}}
        assert client.interested(pod)
        assert not client.interested(
            {"spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}}
        )
    finally:
        client.close()


@pytest.mark.parametrize(
    ("values", "check"),
    [
        ({"scheduler": {"extender": {"weight": 3}}}, lambda c: c.extenders[0].weight == 3),
        (
            {"scheduler": {"extender": {"httpTimeoutSeconds": 45}}},
            lambda c: c.extenders[0].http_timeout == 45.0,
        ),
        ({"scheduler": {"extender": {"ignorable": True}}}, lambda c: c.extenders[0].ignorable),
        (
            {"scheduler": {"extender": {"nodeCacheCapable": False}}},
            lambda c: not c.extenders[0].node_cache_capable,
        ),
        (
            {
                "scheduler": {
                    "extender": {
                        "extraManagedResources": [
                            {"name": "example.com/x", "ignoredByScheduler": True}
                        ]
                    }
                }
            },
            lambda c: "example.com/x" in c.ignored_resources,
        ),
        ({"scheduler": {"schedulerName": "npu"}}, lambda c: c.profiles == ("npu",)),
        (
            {"scheduler": {"config": {"port": 9999}}},
            lambda c: c.extenders[0].url_prefix == "http://127.0.0.1:9999",
        ),
    ],
)
def test_values_reach_the_driver(
    render: Callable[..., Any],
    tmp_path: Path,
    values: dict[str, Any],
    check: Callable[[config.Config], bool],
) -> None:
    assert check(rendered_config(render(values), tmp_path))
