"""kube-scheduler's configuration and the device ConfigMap, checked against vnpu's own code.

The extender must reach vnpu-scheduler's port and verbs, manage every chip model's resources
(vnpu_core.catalog, plus models a device config adds), and the device ConfigMap must load with
vnpu_core.deviceconfig into exactly the catalog the services use.
"""

from __future__ import annotations

import textwrap
from urllib.parse import urlsplit

import pytest
import yaml

from vnpu_core import catalog, deviceconfig


def kube_scheduler_config(manifests):
    data = manifests.get("ConfigMap", "vnpu-scheduler-kube-scheduler")["data"]
    assert list(data) == ["config.yaml"]
    return yaml.safe_load(data["config.yaml"])


def managed(manifests) -> dict[str, bool]:
    extender = kube_scheduler_config(manifests)["extenders"][0]
    names = [r["name"] for r in extender["managedResources"]]
    assert len(names) == len(set(names)), "a managed resource is listed twice"
    return {r["name"]: r["ignoredByScheduler"] for r in extender["managedResources"]}


def scheduler_arg(manifests, flag: str) -> str:
    _, container = manifests.container("vnpu-scheduler")
    values = [a.split("=", 1)[1] for a in container["args"] if a.startswith(flag + "=")]
    assert len(values) == 1, f"{flag} given {len(values)} times"
    return values[0]


def test_configuration_shape(default):
    config = kube_scheduler_config(default)
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert set(config) == {"apiVersion", "kind", "leaderElection", "profiles", "extenders"}
    assert config["leaderElection"] == {
        "leaderElect": True,
        "resourceNamespace": "kube-system",
        "resourceName": "vnpu-scheduler",
    }
    assert config["profiles"] == [{"schedulerName": "vnpu-scheduler"}]
    assert len(config["extenders"]) == 1


def test_extender_points_at_the_scheduler_container(default):
    extender = kube_scheduler_config(default)["extenders"][0]
    allowed = {
        "urlPrefix",
        "filterVerb",
        "prioritizeVerb",
        "bindVerb",
        "preemptVerb",
        "weight",
        "nodeCacheCapable",
        "httpTimeout",
        "enableHTTPS",
        "tlsConfig",
        "ignorable",
        "managedResources",
    }
    assert set(extender) <= allowed
    url = urlsplit(extender["urlPrefix"])
    assert (url.scheme, url.hostname, url.path) == ("http", "127.0.0.1", "")
    assert url.port == int(scheduler_arg(default, "--port"))
    assert (extender["filterVerb"], extender["prioritizeVerb"], extender["bindVerb"]) == (
        "filter",
        "prioritize",
        "bind",
    )
    assert extender["nodeCacheCapable"] is True
    assert extender["ignorable"] is False
    assert isinstance(extender["weight"], int)
    assert extender["weight"] > 0
    # A bind may wait --lock-wait seconds for a node lock: the call must outlast it.
    assert extender["httpTimeout"].endswith("s")
    assert float(extender["httpTimeout"][:-1]) > float(scheduler_arg(default, "--lock-wait"))
    # The profile is the one the webhook routes NPU pods to.
    assert kube_scheduler_config(default)["profiles"][0]["schedulerName"] == scheduler_arg(
        default, "--scheduler-name"
    )


def test_managed_resources_cover_every_catalog_model(default):
    resources = managed(default)
    for model in catalog.BUILTIN:
        assert resources.get(model.resource_name) is False, model.resource_name
        assert resources.get(model.memory_resource) is True, model.memory_resource
        assert resources.get(model.core_resource) is True, model.core_resource
    assert len(resources) == 3 * len(catalog.BUILTIN.models)


def test_the_chart_knows_the_builtin_models_even_with_a_short_device_config(render):
    """A device config cannot remove built-in models, so neither can the chart."""
    content = "vnpus:\n  configs:\n    - {commonWord: Ascend310P, aiCPU: 7}\n"
    resources = managed(render({"global": {"deviceConfig": {"content": content}}}))
    for model in catalog.BUILTIN:
        assert model.resource_name in resources


def test_models_added_by_the_device_config_are_managed(render):
    content = textwrap.dedent(
        """\
        vnpus:
          - commonWord: Ascend910B5
            chipName: 910B5
            memoryAllocatable: 61440
            memoryCapacity: 65536
            aiCore: 24
            aiCPU: 6
          - commonWord: Ascend310P
            resourceName: example.com/npu310
        """
    )
    resources = managed(render({"global": {"deviceConfig": {"content": content}}}))
    loaded = deviceconfig.load(content).catalog  # the names the services will use
    for model in loaded:
        assert resources[model.resource_name] is False, model.resource_name
        assert resources[model.memory_resource] is True
        assert resources[model.core_resource] is True
    assert "huawei.com/Ascend310P" not in resources  # renamed by the file
    assert resources["huawei.com/Ascend910B5-memory"] is True


def test_extra_managed_resources_are_appended(render):
    extra = [{"name": "example.com/accel", "ignoredByScheduler": True}]
    resources = managed(render({"scheduler": {"extender": {"extraManagedResources": extra}}}))
    assert resources["example.com/accel"] is True


def test_profile_plugins_pass_through(render):
    plugins = {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}}
    plugin_config = [
        {
            "name": "NodeResourcesFit",
            "args": {"scoringStrategy": {"type": "MostAllocated"}},
        }
    ]
    manifests = render(
        {
            "scheduler": {
                "schedulerName": "npu",
                "kubeScheduler": {"plugins": plugins, "pluginConfig": plugin_config},
                "extender": {"weight": 3, "httpTimeoutSeconds": 45},
            }
        }
    )
    config = kube_scheduler_config(manifests)
    assert config["profiles"] == [
        {"schedulerName": "npu", "plugins": plugins, "pluginConfig": plugin_config}
    ]
    assert config["extenders"][0]["weight"] == 3
    assert config["extenders"][0]["httpTimeout"] == "45s"
    assert scheduler_arg(manifests, "--scheduler-name") == "npu"


def test_kube_scheduler_reads_the_configuration(default):
    spec, container = default.container("kube-scheduler")
    config_flag = next(a for a in container["command"] if a.startswith("--config="))
    path = config_flag.split("=", 1)[1]
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == "vnpu-scheduler-kube-scheduler"
    assert path.rsplit("/", 1)[1] == "config.yaml"


def test_configuration_changes_roll_the_pods(render):
    first = render()
    second = render({"scheduler": {"extender": {"weight": 2}}})
    annotation = "checksum/kube-scheduler-config"

    def checksum(manifests):
        deployment = manifests.get("Deployment", "vnpu-scheduler")
        return deployment["spec"]["template"]["metadata"]["annotations"][annotation]

    assert checksum(first) != checksum(second)


# The device ConfigMap


def device_config(manifests) -> str:
    config_map = manifests.get("ConfigMap", "hami-scheduler-device")
    assert list(config_map["data"]) == ["device-config.yaml"]
    text: str = config_map["data"]["device-config.yaml"]
    return text


def test_device_config_loads_into_the_builtin_catalog(default):
    loaded = deviceconfig.load(device_config(default), source="hami-scheduler-device")
    assert loaded.warnings == ()
    assert loaded.catalog == catalog.BUILTIN
    assert [m.common_word for m in loaded.catalog] == [m.common_word for m in catalog.BUILTIN]
    assert loaded.catalog.soft_mode_default is False


def test_device_config_is_written_in_hamis_wrapper_form(default):
    document = yaml.safe_load(device_config(default))
    assert set(document) == {"vnpus"}
    assert set(document["vnpus"]) == {"hamiVnpuCore", "configs"}
    hami_keys = {
        "commonWord",
        "chipName",
        "resourceName",
        "resourceMemoryName",
        "resourceCoreName",
        "memoryAllocatable",
        "memoryCapacity",
        "memoryFactor",
        "aiCore",
        "aiCPU",
        "runtimeClassName",
        "overwriteEnv",
        "superPod",
        "templates",
    }
    for entry in document["vnpus"]["configs"]:
        assert set(entry) == hami_keys, entry["commonWord"]
        for template in entry["templates"]:
            assert set(template) == {"name", "memory", "aiCore", "aiCPU"}


def test_device_config_content_is_passed_verbatim_and_rolls_the_pods(render, default):
    content = "vnpus:\n  hamiVnpuCore: true\n  configs: []\n"
    manifests = render({"global": {"deviceConfig": {"content": content}}})
    assert device_config(manifests) == content
    assert deviceconfig.load(content).catalog.soft_mode_default is True
    for name, kind in (("vnpu-scheduler", "Deployment"), ("vnpu-device-plugin", "DaemonSet")):
        before = default.get(kind, name)["spec"]["template"]["metadata"]["annotations"]
        after = manifests.get(kind, name)["spec"]["template"]["metadata"]["annotations"]
        assert before["checksum/device-config"] != after["checksum/device-config"], name


def test_device_config_is_mounted_by_the_scheduler_and_the_plugin(default):
    for container_name in ("vnpu-scheduler", "device-plugin"):
        spec, container = default.container(container_name)
        flag = next(a for a in container["args"] if a.startswith("--device-config="))
        path = flag.split("=", 1)[1]
        mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
        volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
        # A whole-ConfigMap mount (no subPath), so an edited ConfigMap reaches the file.
        assert "subPath" not in mount
        assert volume["configMap"]["name"] == "hami-scheduler-device"
        assert path.rsplit("/", 1)[1] == "device-config.yaml"


def test_an_existing_device_config_map_is_used_by_name(render):
    manifests = render({"global": {"deviceConfig": {"create": False, "name": "hami-device"}}})
    assert manifests.find("ConfigMap", "hami-device") is None
    for container_name in ("vnpu-scheduler", "device-plugin"):
        spec, _ = manifests.container(container_name)
        names = [v["configMap"]["name"] for v in spec["volumes"] if "configMap" in v]
        assert "hami-device" in names


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("vnpus: [\n", "global.deviceConfig.content: not a YAML mapping"),
        ("vnpus: 3\n", "global.deviceConfig.content: vnpus must be a list"),
        (
            "vnpus:\n  configs: {a: 1}\n",
            "global.deviceConfig.content: vnpus.configs must be a list",
        ),
        ("vnpus:\n  - chipName: 910B3\n", "chip model entry 0 has no commonWord"),
    ],
)
def test_a_malformed_device_config_fails_the_render(render, content, message):
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=message):
        render({"global": {"deviceConfig": {"content": content}}})


def test_device_config_can_outlive_the_release(render, default):
    assert "annotations" not in default.get("ConfigMap", "hami-scheduler-device")["metadata"]
    kept = render({"global": {"deviceConfig": {"keepOnUninstall": True}}})
    annotations = kept.get("ConfigMap", "hami-scheduler-device")["metadata"]["annotations"]
    assert annotations == {"helm.sh/resource-policy": "keep"}
