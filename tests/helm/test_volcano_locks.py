"""The Volcano preset never leaves a node lock Volcano's deviceshare cannot parse.

Volcano reads ``hami.io/mutex.lock`` as a bare RFC3339 time and refuses to lock a node whose
value does not parse, with no expiry. The device plugin writes no lock (it removes Volcano's
bare one after Allocate); the vnpu scheduler writes ``<time>,<namespace>,<pod>``, so beside
Volcano it must release its lock right after the Binding instead of leaving it for the
device plugin.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "vnpu"
LOCK_FLAG = "--release-lock-after-bind"


def _preset() -> dict[str, object]:
    loaded = yaml.safe_load((CHART / "values-volcano.yaml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _args(manifests, name: str) -> list[str]:
    _, container = manifests.container(name)
    return list(container["args"])


def test_the_preset_installs_no_lock_writer(render):
    manifests = render(_preset())
    assert not manifests.has_container("vnpu-scheduler")
    assert manifests.has_container("device-plugin")
    assert not any("lock" in arg for arg in _args(manifests, "device-plugin"))


def test_a_scheduler_turned_on_beside_volcano_releases_its_lock_after_the_binding(render):
    values = copy.deepcopy(_preset())
    values["scheduler"]["enabled"] = True  # type: ignore[index]
    assert LOCK_FLAG in _args(render(values), "vnpu-scheduler")


def test_the_default_install_leaves_the_lock_for_the_device_plugin(render):
    assert LOCK_FLAG not in _args(render(), "vnpu-scheduler")
