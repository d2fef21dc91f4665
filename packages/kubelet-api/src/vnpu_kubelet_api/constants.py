"""Well-known values of the kubelet's device plugin, plugin registration, DRA and PodResources APIs.

The device plugin, the DRA driver, the exporter and the sandbox's simulated kubelet import
these so that all of them agree with a real kubelet on names, paths and vocabulary. Values are
those of the kubelet's ``deviceplugin/v1beta1/constants.go``,
``pluginregistration/v1/constants.go``, ``dra/v1/types.go`` and its PodResources defaults.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

VERSION: Final = "v1beta1"
"""API version a device plugin sends in ``RegisterRequest.version``."""

SUPPORTED_VERSIONS: Final = (VERSION,)
"""Versions the kubelet accepts at registration."""

DEVICE_PLUGIN_PATH: Final = "/var/lib/kubelet/device-plugins/"
"""Directory holding the kubelet's registration socket and every plugin's socket."""

KUBELET_SOCKET_NAME: Final = "kubelet.sock"
"""File name of the kubelet's Registration socket inside the device plugin directory."""

KUBELET_SOCKET: Final = DEVICE_PLUGIN_PATH + KUBELET_SOCKET_NAME
"""Default path of the kubelet's Registration socket."""

POD_RESOURCES_PATH: Final = "/var/lib/kubelet/pod-resources/"
"""Directory of the PodResources socket (mount the directory, so reconnects survive restarts)."""

POD_RESOURCES_SOCKET: Final = POD_RESOURCES_PATH + "kubelet.sock"
"""Default path of the kubelet's PodResources socket."""

PRE_START_CONTAINER_TIMEOUT_SECONDS: Final = 30
"""Deadline the kubelet gives a PreStartContainer call."""

DEVICE_ID_MAX_LENGTH: Final = 63
"""Longest ``Device.ID`` a plugin may report."""


PLUGINS_REGISTRY_PATH: Final = "/var/lib/kubelet/plugins_registry/"
"""Directory the kubelet watches for plugin registration sockets (CSI and DRA drivers)."""

PLUGINS_PATH: Final = "/var/lib/kubelet/plugins/"
"""Conventional parent directory of a DRA or CSI driver's own endpoint socket."""

DRA_PLUGIN_TYPE: Final = "DRAPlugin"
"""``PluginInfo.type`` of a DRA driver."""

DRA_PLUGIN_SERVICE_V1: Final = "v1.DRAPlugin"
"""What a DRA driver serving the v1 ``DRAPlugin`` service lists in ``supported_versions``."""


class Health(StrEnum):
    """Values of ``Device.health``; anything but ``Healthy`` counts as unhealthy."""

    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"


HEALTHY: Final = Health.HEALTHY.value
UNHEALTHY: Final = Health.UNHEALTHY.value
