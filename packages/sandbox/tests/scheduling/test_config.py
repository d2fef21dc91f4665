"""Reading a KubeSchedulerConfiguration: defaults, and errors that name the field (table-driven)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vnpu_sandbox.scheduling import config, errors

Json = dict[str, Any]


def document(**fields: Any) -> Json:
    return {"apiVersion": config.API_VERSION, "kind": config.KIND, **fields}


def extender(**fields: Any) -> Json:
    return {"urlPrefix": "http://127.0.0.1:8888", "filterVerb": "filter", **fields}


def test_defaults_are_kube_schedulers() -> None:
    parsed = config.parse(document())
    assert parsed.profiles == ("default-scheduler",)
    assert parsed.extenders == ()
    assert (parsed.initial_backoff, parsed.max_backoff) == (1.0, 10.0)
    only = config.parse(document(extenders=[extender()])).extenders[0]
    assert only.http_timeout == 5.0
    assert (only.weight, only.node_cache_capable, only.ignorable, only.bind_verb) == (
        0,
        False,
        False,
        "",
    )


def test_a_full_configuration() -> None:
    parsed = config.parse(
        document(
            leaderElection={"leaderElect": True},
            podInitialBackoffSeconds=2,
            podMaxBackoffSeconds=20,
            profiles=[
                {"schedulerName": "vnpu-scheduler", "plugins": {}},
                {"schedulerName": "other"},
            ],
            extenders=[
                extender(
                    prioritizeVerb="prioritize",
                    bindVerb="bind",
                    weight=10,
                    nodeCacheCapable=True,
                    httpTimeout="1m30s",
                    ignorable=True,
                    managedResources=[
                        {"name": "huawei.com/Ascend310P", "ignoredByScheduler": False},
                        {"name": "huawei.com/Ascend310P-memory", "ignoredByScheduler": True},
                    ],
                )
            ],
        )
    )
    assert parsed.profiles == ("vnpu-scheduler", "other")
    assert (parsed.initial_backoff, parsed.max_backoff) == (2.0, 20.0)
    spec = parsed.extenders[0]
    assert (spec.weight, spec.http_timeout, spec.node_cache_capable, spec.ignorable) == (
        10,
        90.0,
        True,
        True,
    )
    assert spec.managed_names == {"huawei.com/Ascend310P", "huawei.com/Ascend310P-memory"}
    assert parsed.ignored_resources == {"huawei.com/Ascend310P-memory"}
    assert parsed.ignored == ("leaderElection", "profiles[0].plugins")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("0", 0.0),
        ("2h45m", 9900.0),
        ("100us", 1e-4),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert config.parse_duration(text, "httpTimeout") == pytest.approx(seconds)


def test_zero_timeout_means_the_default() -> None:
    assert (
        config.parse(document(extenders=[extender(httpTimeout="0s")])).extenders[0].http_timeout
        == 5.0
    )


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        (
            {"apiVersion": "kubescheduler.config.k8s.io/v1beta3", "kind": config.KIND},
            "apiVersion",
            "only kubescheduler.config.k8s.io/v1 is read",
        ),
        (
            {"apiVersion": config.API_VERSION, "kind": "Policy"},
            "kind",
            "must be KubeSchedulerConfiguration",
        ),
        (document(extendrs=[]), "extendrs", "unknown field"),
        (
            document(profiles=[{"schedulerName": "a", "bogus": 1}]),
            "profiles[0].bogus",
            "unknown field",
        ),
        (
            document(profiles=[{"schedulerName": "a"}, {"schedulerName": "a"}]),
            "profiles[1].schedulerName",
            "duplicate profile with scheduler name",
        ),
        (document(profiles="vnpu"), "profiles", "must be a list"),
        (
            document(extenders=[extender(prioritizeVerb="prioritize")]),
            "extenders[0].weight",
            "must have a positive weight applied to it",
        ),
        (
            document(extenders=[extender(prioritizeVerb="p", weight=-2)]),
            "extenders[0].weight",
            "must have a positive weight applied to it",
        ),
        (document(extenders=[extender(weight="10")]), "extenders[0].weight", "must be an integer"),
        (
            document(extenders=[extender(urlPrefix="127.0.0.1:8888")]),
            "extenders[0].urlPrefix",
            "must be an http:// or https:// URL",
        ),
        (
            document(extenders=[extender(httpTimeout=30)]),
            "extenders[0].httpTimeout",
            "must be a duration string such as 30s",
        ),
        (
            document(extenders=[extender(httpTimeout="30 seconds")]),
            "extenders[0].httpTimeout",
            "is not a duration",
        ),
        (
            document(extenders=[extender(nodeCacheCapable="yes")]),
            "extenders[0].nodeCacheCapable",
            "must be true or false",
        ),
        (
            document(extenders=[extender(filterVerb=1)]),
            "extenders[0].filterVerb",
            "must be a string",
        ),
        (
            document(extenders=[extender(tlsConfig={"caFil": "x"})]),
            "extenders[0].tlsConfig.caFil",
            "unknown field",
        ),
        (
            document(extenders=[extender(managedResources=[{"name": "cpu"}])]),
            "extenders[0].managedResources[0].name",
            "must be an extended resource name",
        ),
        (
            document(
                extenders=[
                    extender(managedResources=[{"name": "a.io/x"}]),
                    extender(managedResources=[{"name": "a.io/x"}]),
                ]
            ),
            "extenders[1].managedResources[0].name",
            "duplicate extender managed resource name",
        ),
        (
            document(extenders=[extender(bindVerb="bind"), extender(bindVerb="bind")]),
            "extenders",
            "only one extender can implement bind",
        ),
        (
            document(podInitialBackoffSeconds=0),
            "podInitialBackoffSeconds",
            "must be greater than 0",
        ),
        (
            document(podInitialBackoffSeconds=5, podMaxBackoffSeconds=2),
            "podMaxBackoffSeconds",
            "must be greater than or equal to PodInitialBackoffSeconds",
        ),
        ([], "(document)", "must be a mapping"),
    ],
)
def test_errors_name_the_field(doc: object, field: str, problem: str) -> None:
    with pytest.raises(errors.ConfigError) as caught:
        config.parse(doc)
    assert caught.value.field == field
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"{field}: ")


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "kube-scheduler.yaml"
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n- urlPrefix: ftp://x\n"
    )
    with pytest.raises(
        errors.ConfigError, match=r"kube-scheduler.yaml: extenders\[0\].urlPrefix: must be an http"
    ):
        config.load(path)
    path.write_text("{not yaml: [")
    with pytest.raises(errors.ConfigError, match="is not YAML or JSON"):
        config.load(path)
    with pytest.raises(errors.ConfigError, match="cannot be read"):
        config.load(tmp_path / "missing.yaml")
    path.write_text(
        '{"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"}'
    )
    assert config.load(path).profiles == ("default-scheduler",)
