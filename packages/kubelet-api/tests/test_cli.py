from __future__ import annotations

import pytest

from vnpu_kubelet_api import cli, constants


def test_method_paths_are_the_kubelet_wire_names() -> None:
    assert cli.method_paths() == [
        ("/v1beta1.Registration/Register", "unary"),
        ("/v1beta1.DevicePlugin/GetDevicePluginOptions", "unary"),
        ("/v1beta1.DevicePlugin/ListAndWatch", "server-streaming"),
        ("/v1beta1.DevicePlugin/GetPreferredAllocation", "unary"),
        ("/v1beta1.DevicePlugin/Allocate", "unary"),
        ("/v1beta1.DevicePlugin/PreStartContainer", "unary"),
        ("/v1.PodResourcesLister/List", "unary"),
        ("/v1.PodResourcesLister/GetAllocatableResources", "unary"),
        ("/v1.PodResourcesLister/Get", "unary"),
        ("/pluginregistration.Registration/GetInfo", "unary"),
        ("/pluginregistration.Registration/NotifyRegistrationStatus", "unary"),
        ("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", "unary"),
        ("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources", "unary"),
    ]


@pytest.mark.parametrize(
    ("api", "package_line"),
    [
        ("deviceplugin", "package v1beta1;"),
        ("podresources", "package v1;"),
        ("pluginregistration", "package pluginregistration;"),
        ("dra", "package k8s.io.kubelet.pkg.apis.dra.v1;"),
    ],
)
def test_proto_command_prints_shipped_source(
    api: str, package_line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["proto", api]) == 0
    out = capsys.readouterr().out
    assert package_line in out.splitlines()
    assert 'syntax = "proto3";' in out


def test_methods_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["methods"]) == 0
    assert "/v1beta1.DevicePlugin/Allocate\tunary" in capsys.readouterr().out.splitlines()


def test_unknown_api_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["proto", "csi"])
    assert info.value.code == 2
    assert "invalid choice: 'csi'" in capsys.readouterr().err


def test_constants_match_the_kubelet() -> None:
    assert constants.KUBELET_SOCKET == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert constants.POD_RESOURCES_SOCKET == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert constants.SUPPORTED_VERSIONS == ("v1beta1",)
    assert constants.Health("Healthy") is constants.Health.HEALTHY
    assert constants.UNHEALTHY == "Unhealthy"
    assert constants.PLUGINS_REGISTRY_PATH == "/var/lib/kubelet/plugins_registry/"
    assert constants.DRA_PLUGIN_TYPE == "DRAPlugin"
    assert constants.DRA_PLUGIN_SERVICE_V1 == "v1.DRAPlugin"
