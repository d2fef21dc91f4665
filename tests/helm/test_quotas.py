"""NPU quotas in the chart: the scheduler's flags, the tenants ConfigMap and the RBAC they need.

``scheduler.quotas.enabled`` passes ``--no-quotas`` when false; ``scheduler.tenants`` (values or
YAML text) becomes the ConfigMap ``<prefix>-scheduler-tenants`` that ``--tenants-config`` names,
``scheduler.tenantsConfig`` names one kept outside the release; ``--lock-namespace`` is always the
release namespace. The rendered flags go through ``vnpu_scheduler.settings.from_args`` and the
rendered ConfigMap through ``vnpu_core.tenants.from_config_map``, the code the scheduler runs.
The RBAC is compared with the Lease and ResourceQuota calls the scheduler's API adapter makes.
"""

from __future__ import annotations

import re
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from vnpu_core import deviceconfig, holdings, tenants
from vnpu_scheduler import cluster, quotalock
from vnpu_scheduler import settings as scheduler_settings

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "vnpu"
NAMESPACE = "kube-system"

TEAMS = {
    "teams": [
        {
            "name": "vision",
            "namespaces": ["vision", "vision-dev"],
            "weight": 2,
            "nominal": {"Ascend310P-aicore": 32, "Ascend310P-memory": 98304},
            "borrowingLimit": {"Ascend310P-aicore": 16},
        },
        {"name": "nlp", "namespaces": ["nlp"], "nominal": {"memory": "64k"}},
    ]
}
TEAMS_TEXT = """\
teams:
  - name: vision          # comments and layout are kept as written
    namespaces: [vision]
    nominal: {Ascend310P-aicore: 8}
"""


def _args(manifests) -> list[str]:
    _, container = manifests.container("vnpu-scheduler")
    args: list[str] = container["args"]
    return args


def _settings(manifests, tmp_path: Path) -> scheduler_settings.Settings:
    """The rendered command line as vnpu-scheduler reads it (mounted files written locally)."""
    args = []
    for arg in _args(manifests):
        flag, _, value = arg.partition("=")
        if flag == "--device-config":
            local = tmp_path / "device-config.yaml"
            local.write_text(_device_config(manifests), encoding="utf-8")
            arg = f"{flag}={local}"  # noqa: PLW2901
        elif flag in ("--tls-cert", "--tls-key"):
            local = tmp_path / Path(value).name
            local.write_bytes(b"x")
            arg = f"{flag}={local}"  # noqa: PLW2901
        args.append(arg)
    return scheduler_settings.from_args(args)


def _device_config(manifests) -> str:
    text: str = manifests.get("ConfigMap", "hami-scheduler-device")["data"]["device-config.yaml"]
    return text


def _teams(manifests) -> tenants.Tenants:
    """The rendered tenants ConfigMap, read as the scheduler reads it."""
    config_map = manifests.get("ConfigMap", "vnpu-scheduler-tenants")
    models = deviceconfig.load(_device_config(manifests)).catalog
    return tenants.from_config_map(config_map, models)


def _granted(role) -> dict[tuple[str, str], set[str]]:
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    return granted


def _bound_roles(manifests, account: str) -> list[dict]:
    """Every Role and ClusterRole of the chart bound to ``account``."""
    found = []
    for binding in manifests.docs:
        if binding["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["name"] == account for s in binding["subjects"]):
            continue
        ref = binding["roleRef"]
        role = next(
            (
                d
                for d in manifests.all(ref["kind"])
                if d["metadata"]["name"] == ref["name"]
                and d["metadata"].get("namespace") == binding["metadata"].get("namespace")
            ),
            None,
        )
        if role is not None:
            found.append(role)
    return found


# Flags


def test_quotas_are_on_by_default_without_teams(default, tmp_path):
    args = _args(default)
    assert "--no-quotas" not in args
    assert not any(a.startswith("--tenants-config") for a in args)
    assert f"--lock-namespace={NAMESPACE}" in args
    config = _settings(default, tmp_path)
    assert config.quotas is True
    assert config.tenants_config == ""
    assert config.lock_namespace == NAMESPACE
    assert default.find("ConfigMap", "vnpu-scheduler-tenants") is None


def test_the_quota_leases_live_in_the_release_namespace(render, tmp_path):
    manifests = render(namespace="npu-system")
    assert _settings(manifests, tmp_path).lock_namespace == "npu-system"
    role = manifests.get("Role", "vnpu-scheduler-quota-locks")
    assert role["metadata"]["namespace"] == "npu-system"
    binding = manifests.get("RoleBinding", "vnpu-scheduler-quota-locks")
    assert binding["metadata"]["namespace"] == "npu-system"


def test_quotas_off_passes_no_quotas_and_grants_nothing_for_them(render, tmp_path):
    manifests = render({"scheduler": {"quotas": {"enabled": False}}})
    args = _args(manifests)
    assert "--no-quotas" in args
    assert f"--lock-namespace={NAMESPACE}" in args  # harmless, and always the chart's own
    assert _settings(manifests, tmp_path).quotas is False
    assert ("", "resourcequotas") not in _granted(manifests.get("ClusterRole", "vnpu-scheduler"))
    assert manifests.find("Role", "vnpu-scheduler-quota-locks") is None
    assert manifests.find("RoleBinding", "vnpu-scheduler-quota-locks") is None


def test_the_reclaimer_is_on_with_its_timings_and_may_evict(default, tmp_path):
    config = _settings(default, tmp_path)
    assert config.reclaim is True
    assert (config.reclaim_interval, config.reclaim_lease_seconds) == (5, 15)
    granted = _granted(default.get("ClusterRole", "vnpu-scheduler"))
    assert granted[("", "pods/eviction")] == {"create"}
    assert "create_namespaced_pod_eviction" in Path(cluster.__file__).read_text(encoding="utf-8")


def test_reclaim_off_passes_no_reclaim_and_grants_no_eviction(render, tmp_path):
    manifests = render({"scheduler": {"quotas": {"reclaim": False}}})
    assert "--no-reclaim" in _args(manifests)
    assert _settings(manifests, tmp_path).reclaim is False
    granted = _granted(manifests.get("ClusterRole", "vnpu-scheduler"))
    assert ("", "pods/eviction") not in granted
    assert ("", "resourcequotas") in granted  # quotas stay on


def test_inline_teams_become_the_tenants_config_map(render, tmp_path):
    manifests = render({"scheduler": {"tenants": TEAMS}})
    config_map = manifests.get("ConfigMap", "vnpu-scheduler-tenants")
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert set(config_map["data"]) == {tenants.CONFIG_KEY}
    assert yaml.safe_load(config_map["data"][tenants.CONFIG_KEY]) == TEAMS
    teams = _teams(manifests)
    vision, nlp = teams.teams
    assert (vision.name, vision.namespaces, vision.weight) == (
        "vision",
        ("vision", "vision-dev"),
        2,
    )
    aicore = holdings.parse_key("Ascend310P-aicore")
    assert vision.nominal[aicore] == 32
    assert vision.limit(aicore) == 48
    assert nlp.nominal == {holdings.parse_key("memory"): 64000}
    assert nlp.weight == 1
    config = _settings(manifests, tmp_path)
    assert config.tenants_config == f"{NAMESPACE}/vnpu-scheduler-tenants"
    assert config.quotas is True


def test_teams_as_yaml_text_are_kept_as_written(render):
    manifests = render({"scheduler": {"tenants": TEAMS_TEXT}})
    data = manifests.get("ConfigMap", "vnpu-scheduler-tenants")["data"]
    assert data[tenants.CONFIG_KEY] == TEAMS_TEXT
    (team,) = _teams(manifests).teams
    assert team.name == "vision"
    assert f"--tenants-config={NAMESPACE}/vnpu-scheduler-tenants" in _args(manifests)


def test_the_tenants_config_map_follows_release_and_namespace(render):
    manifests = render({"scheduler": {"tenants": TEAMS}}, namespace="npu-system", release="npu")
    config_map = manifests.get("ConfigMap", "npu-vnpu-scheduler-tenants")
    assert config_map["metadata"]["namespace"] == "npu-system"
    assert "--tenants-config=npu-system/npu-vnpu-scheduler-tenants" in _args(manifests)


def test_an_existing_tenants_config_map_is_named(render, tmp_path):
    manifests = render({"scheduler": {"tenantsConfig": "platform/npu-teams"}})
    assert manifests.find("ConfigMap", "vnpu-scheduler-tenants") is None
    assert _settings(manifests, tmp_path).tenants_config == "platform/npu-teams"


@pytest.mark.parametrize("empty", [None, "", {}])
def test_empty_tenants_render_no_config_map(render, empty):
    manifests = render({"scheduler": {"tenants": empty}})
    assert manifests.find("ConfigMap", "vnpu-scheduler-tenants") is None
    assert not any(a.startswith("--tenants-config") for a in _args(manifests))


def test_changing_the_teams_restarts_no_pod(render):
    """The scheduler polls the ConfigMap through the API: the pod template does not change."""
    before = render({"scheduler": {"tenants": TEAMS}})
    after = render({"scheduler": {"tenants": TEAMS_TEXT}})
    template = lambda m: m.get("Deployment", "vnpu-scheduler")["spec"]["template"]  # noqa: E731
    annotations = lambda m: {  # noqa: E731
        k: v for k, v in template(m)["metadata"]["annotations"].items() if "tenants" in k
    }
    assert annotations(before) == annotations(after) == {}
    assert _args(before) == _args(after)


# Checks at render time


@pytest.mark.parametrize("tenants_value", [TEAMS, TEAMS_TEXT])
def test_tenants_and_tenants_config_together_fail(render, tenants_value):
    with pytest.raises(
        helm.HelmRenderError,
        match=r"scheduler\.tenants and scheduler\.tenantsConfig \(platform/npu-teams\) are both set",
    ):
        render({"scheduler": {"tenants": tenants_value, "tenantsConfig": "platform/npu-teams"}})


def test_tenants_text_that_is_no_mapping_fails(render):
    with pytest.raises(helm.HelmRenderError, match=r"scheduler\.tenants: not a YAML mapping"):
        render({"scheduler": {"tenants": "- name: vision\n"}})


def _team(**fields):
    return {"scheduler": {"tenants": {"teams": [{"name": "a", "namespaces": ["a"], **fields}]}}}


BAD_VALUES = [
    ({"scheduler": {"quotas": {"enabled": "yes"}}}, "/scheduler/quotas/enabled"),
    ({"scheduler": {"quotas": {"enable": True}}}, "'enable' not allowed"),
    ({"scheduler": {"tenantsConfig": "npu-teams"}}, "/scheduler/tenantsConfig"),
    ({"scheduler": {"tenantsConfig": "Platform/teams"}}, "/scheduler/tenantsConfig"),
    ({"scheduler": {"tenants": 3}}, "/scheduler/tenants"),
    ({"scheduler": {"tenants": {"team": []}}}, "'team' not allowed"),
    ({"scheduler": {"tenants": {"teams": [{"name": "a"}]}}}, "/scheduler/tenants/teams/0"),
    (_team(name="Vision"), "/scheduler/tenants/teams/0/name"),
    (_team(namespaces=[]), "/scheduler/tenants/teams/0/namespaces"),
    (_team(weight=0), "/scheduler/tenants/teams/0/weight"),
    (_team(nominal={"gpus": 1}), "'gpus' not allowed"),
    (_team(nominal={"memory": "16Gi"}), "/scheduler/tenants/teams/0/nominal/memory"),
    (_team(borrowingLimit={"aicore": -1}), "/scheduler/tenants/teams/0/borrowingLimit/aicore"),
    (_team(quota={"aicore": 1}), "'quota' not allowed"),
]


@pytest.mark.parametrize(("values", "key"), BAD_VALUES, ids=[k for _, k in BAD_VALUES])
def test_a_wrong_quota_value_fails_with_the_key_named(render, values, key):
    with pytest.raises(helm.HelmValuesError) as caught:
        render(values)
    assert key in str(caught.value)


@pytest.mark.parametrize(
    "values",
    [
        {"scheduler": {"tenants": TEAMS}},
        {"scheduler": {"tenants": TEAMS_TEXT}},
        {"scheduler": {"tenantsConfig": "platform/npu-teams"}},
        {"scheduler": {"quotas": {"enabled": False}}},
    ],
    ids=["teams", "teams-text", "tenants-config", "no-quotas"],
)
def test_lint_is_clean_with_quota_values(values):
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version="v1.31.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


# RBAC


def _calls(resource: str) -> set[str]:
    """The verbs of the ``kubernetes`` client calls the scheduler's API adapter makes on ``resource``."""
    source = Path(cluster.__file__).read_text(encoding="utf-8")
    verbs = {"create": "create", "read": "get", "replace": "update", "patch": "patch"}
    verbs |= {"delete": "delete", "list": "list"}
    found = set(re.findall(rf"\.(\w+?)_namespaced_{resource}\b", source))
    if re.search(rf"\.list_{resource}_for_all_namespaces\b", source):
        found.add("list")
    return {verbs[v] for v in found}


def test_the_scheduler_may_read_every_resource_quota(default):
    granted = _granted(default.get("ClusterRole", "vnpu-scheduler"))
    assert granted[("", "resourcequotas")] == {"get", "list", "watch"}
    assert "list" in _calls("resource_quota")  # and watched: an informer lists, then watches
    assert {"get", "list", "watch"} <= granted[("", "configmaps")]  # the tenants ConfigMap
    # Leases are never granted cluster-wide.
    assert not any(group == "coordination.k8s.io" for group, _ in granted)


def test_the_quota_lock_role_grants_what_the_binds_call_and_no_more(default):
    role = default.get("Role", "vnpu-scheduler-quota-locks")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create", "get", "update", "delete"],
        }
    ]
    assert _calls("lease") == {"create", "get", "update", "delete"}
    binding = default.get("RoleBinding", "vnpu-scheduler-quota-locks")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "vnpu-scheduler-quota-locks",
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "vnpu-scheduler", "namespace": NAMESPACE}
    ]
    # The names the binds take are Lease names the API server accepts.
    for scope in (quotalock.TEAMS, "team-a", "a" * 63):
        name = quotalock.lease_name(scope)
        assert re.match(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", name), name
        assert len(name) <= 253


def test_only_the_quota_lock_role_may_delete_leases(default):
    """kube-scheduler's leader-election Role is not widened to delete."""
    deleting = [
        role["metadata"]["name"]
        for role in _bound_roles(default, "vnpu-scheduler")
        if "delete" in _granted(role).get(("coordination.k8s.io", "leases"), set())
    ]
    assert deleting == ["vnpu-scheduler-quota-locks"]
    leader = _granted(default.get("Role", "vnpu-scheduler-leader-election"))
    assert "delete" not in leader[("coordination.k8s.io", "leases")]
