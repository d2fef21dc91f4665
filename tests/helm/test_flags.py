"""Every vnpu container's command line is read by the service's own settings code.

The rendered args go through ``settings.from_args`` of vnpu_scheduler, vnpu_device_plugin and
vnpu_exporter (the functions their ``__main__`` calls), so a flag the chart passes and the
service no longer knows, or a value it refuses, fails here. Path arguments must lie inside one
of the container's volume mounts; for parsing they are moved under a temporary directory where
the mounted files are written (the device config from its ConfigMap, the TLS pair from its
Secret), because the settings check that those files exist.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from vnpu_device_plugin import settings as plugin_settings
from vnpu_exporter import settings as exporter_settings
from vnpu_scheduler import settings as scheduler_settings

PARSERS = {
    "vnpu-scheduler": scheduler_settings.from_args,
    "device-plugin": plugin_settings.from_args,
    "exporter": exporter_settings.from_args,
}
COMMANDS = {
    "vnpu-scheduler": ["vnpu-scheduler"],
    "device-plugin": ["vnpu-device-plugin"],
    "exporter": ["vnpu-exporter"],
}
NODE = "ascend-node-1"
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "vnpu"


def _mounts(container):
    return sorted(
        (m["mountPath"] for m in container.get("volumeMounts", [])), key=len, reverse=True
    )


def _env_from_node_name(container):
    for env in container.get("env", []):
        if env["name"] == "NODE_NAME":
            return env.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    return None


def command_line(manifests, name, tmp_path: Path) -> list[str]:
    """The container's args as the service would see them, with mounted files materialised."""
    _, container = manifests.container(name)
    assert container["command"] == COMMANDS[name]
    mounts = _mounts(container)
    args: list[str] = []
    for given in container["args"]:
        arg = given
        if "$(NODE_NAME)" in arg:
            assert _env_from_node_name(container) == "spec.nodeName", (
                "NODE_NAME from the downward API"
            )
            arg = given.replace("$(NODE_NAME)", NODE)
        flag, sep, value = arg.partition("=")
        if sep and value.startswith("/"):
            inside = [m for m in mounts if value == m or value.startswith(m.rstrip("/") + "/")]
            assert inside, f"{name}: {flag}={value} is not inside a volume mount ({mounts})"
            local = tmp_path / value.lstrip("/")
            _materialise(manifests, value, local)
            args.append(f"{flag}={local}")
        else:
            args.append(arg)
    return args


def _materialise(manifests, path: str, local: Path) -> None:
    if path.endswith("device-config.yaml"):
        config = manifests.find("ConfigMap", "hami-scheduler-device")
        text = config["data"]["device-config.yaml"] if config else "vnpus: []\n"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text, encoding="utf-8")
    elif "/extender-tls/" in path:
        secret = manifests.find("Secret", "vnpu-scheduler-extender-tls")
        data = base64.b64decode(secret["data"][Path(path).name]) if secret else b"x"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
    elif path.endswith(("tls.crt", "tls.key")):
        secret = manifests.find("Secret", "vnpu-scheduler-tls")
        data = base64.b64decode(secret["data"][Path(path).name]) if secret else b"x"
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(data)
    elif path.endswith(".so"):
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_bytes(b"")
    elif Path(path).suffix:  # a socket the kubelet makes: its path is not checked at start
        local.parent.mkdir(parents=True, exist_ok=True)
    else:
        local.mkdir(parents=True, exist_ok=True)


def test_every_container_command_line_is_accepted(manifests, tmp_path):
    found = 0
    for name, parse in PARSERS.items():
        if not manifests.has_container(name):
            continue
        found += 1
        args = command_line(manifests, name, tmp_path / name)
        parse(args)  # raises SettingsError (or SystemExit for an unknown flag)
    assert found >= 2


def test_scheduler_settings_follow_the_values(render, tmp_path):
    manifests = render(
        {
            "scheduler": {
                "schedulerName": "npu-scheduler",
                "config": {
                    "port": 9000,
                    "metricsPort": 9100,
                    "webhookPort": 9443,
                    "bindTimeout": 12,
                    "lockClockSkew": 5,
                    "maxBodyBytes": 4194304,
                    "webhookMaxBodyBytes": 2097152,
                    "policy": "spread",
                    "handshakeTimeout": 90,
                    "lockTtl": 120,
                    "lockWait": 7.5,
                    "releaseLockAfterBind": True,
                    "bindAttempts": 3,
                    "apiTimeout": 4,
                    "watchTimeout": 60,
                    "apiThreads": 8,
                    "configPollSeconds": 2,
                    "logLevel": "debug",
                },
            }
        }
    )
    config = scheduler_settings.from_args(command_line(manifests, "vnpu-scheduler", tmp_path))
    assert (config.port, config.metrics_port, config.webhook_port) == (9000, 9100, 9443)
    # the extender on loopback only; probes, metrics and the webhook on the pod's address
    assert (config.host, config.metrics_host, config.webhook_host) == (
        "127.0.0.1",
        "0.0.0.0",
        "0.0.0.0",
    )
    assert (config.bind_timeout, config.lock_clock_skew) == (12, 5)
    assert (config.max_body_bytes, config.webhook_max_body_bytes) == (4194304, 2097152)
    assert config.policy.value == "spread"
    assert config.scheduler_name == "npu-scheduler"
    assert (config.handshake_timeout, config.lock_ttl, config.lock_wait) == (90, 120, 7.5)
    assert config.release_lock_after_bind is True
    assert (config.bind_attempts, config.api_timeout, config.watch_timeout) == (3, 4, 60)
    assert (config.api_threads, config.config_poll_seconds, config.log_level) == (8, 2, "debug")
    assert config.tls_cert is not None
    assert config.tls_key is not None
    assert config.device_config is not None
    # The ports the pod declares are the ones the service listens on.
    _, container = manifests.container("vnpu-scheduler")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9100, "webhook": 9443}  # the loopback extender is no pod port
    assert container["livenessProbe"]["httpGet"]["port"] == "metrics"
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
    service = manifests.get("Service", "vnpu-scheduler")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "metrics": 9100,
        "webhook": 443,
    }


def test_scheduler_defaults_match_the_service_defaults(default, tmp_path):
    """The chart's defaults are the service's own, except where the chart must choose."""
    config = scheduler_settings.from_args(command_line(default, "vnpu-scheduler", tmp_path))
    fields = scheduler_settings.Settings.model_fields
    for name in (
        "port",
        "webhook_port",
        "policy",
        "handshake_timeout",
        "lock_ttl",
        "lock_wait",
        "bind_attempts",
        "api_timeout",
        "watch_timeout",
        "api_threads",
        "config_poll_seconds",
        "scheduler_name",
        "log_level",
        "release_lock_after_bind",
        "host",
        "bind_timeout",
        "lock_clock_skew",
        "max_body_bytes",
        "webhook_max_body_bytes",
        "quotas",
        "tenants_config",
    ):
        assert getattr(config, name) == fields[name].default, name


def test_scheduler_without_webhook_serves_no_tls(render, tmp_path):
    manifests = render({"scheduler": {"webhook": {"enabled": False}}})
    config = scheduler_settings.from_args(command_line(manifests, "vnpu-scheduler", tmp_path))
    assert config.tls_cert is None
    assert config.tls_key is None
    _, container = manifests.container("vnpu-scheduler")
    assert [p["name"] for p in container["ports"]] == ["metrics"]


def test_device_plugin_settings_follow_the_values(render, tmp_path):
    manifests = render(
        {
            "global": {"devicePluginStateDir": "/srv/vnpu/ledger", "logLevel": "warning"},
            "devicePlugin": {
                "backend": "sim",
                "simDir": "/srv/sim",
                "dcmiLibrary": "/usr/local/dcmi/libdcmi.so",
                "vnpuMode": "runtime",
                "hamiVnpuCore": "true",
                "serverKind": "910b-8",
                "metricsPort": 9500,
                "healthInterval": 2,
                "reportInterval": 15,
                "reportRetry": 3,
                "reportTimeOffset": 0,
                "reconcileInterval": 30,
                "unownedGrace": 600,
                "allocateWait": 8,
                "apiTimeout": 6,
                "apiAttempts": 7,
            },
        }
    )
    local = tmp_path / "dp"
    config = plugin_settings.from_args(command_line(manifests, "device-plugin", local))
    assert config.node_name == NODE
    assert config.backend.value == "sim"
    assert config.sim_dir == local / "var/lib/vnpu/sim"
    assert config.vnpu_mode.value == "runtime"
    assert config.hami_vnpu_core is True
    assert config.hami_core_dir == local / "usr/local/hami-vnpu-core"
    assert config.server_kind is not None
    assert config.server_kind.value == "910b-8"
    assert config.state_dir == local / "srv/vnpu/ledger"
    assert config.device_plugin_dir == local / "var/lib/kubelet/device-plugins"
    assert config.pod_resources_socket == local / "var/lib/kubelet/pod-resources/kubelet.sock"
    assert config.metrics_port == 9500
    assert (config.health_interval, config.report_interval, config.report_retry) == (2, 15, 3)
    assert (config.report_time_offset, config.reconcile_interval, config.unowned_grace) == (
        0,
        30,
        600,
    )
    assert (config.allocate_wait, config.api_timeout, config.api_attempts) == (8, 6, 7)
    assert config.log_level == "warning"
    spec, container = manifests.container("device-plugin")
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host["sim"] == "/srv/sim"
    assert host["state"] == "/srv/vnpu/ledger"
    assert host["hami-core"] == "/usr/local/hami-vnpu-core"
    assert host["hami-shared"] == "/usr/local/hami-shared-region"
    assert container["ports"] == [
        {"name": "http-metrics", "containerPort": 9500, "protocol": "TCP"}
    ]


@pytest.mark.parametrize(("value", "expected"), [("", None), ("true", True), ("false", False)])
def test_device_plugin_soft_mode_switch(render, tmp_path, value, expected):
    manifests = render({"devicePlugin": {"hamiVnpuCore": value}})
    config = plugin_settings.from_args(command_line(manifests, "device-plugin", tmp_path))
    assert config.hami_vnpu_core is expected


@pytest.mark.parametrize(("value", "expected"), [(None, False), (False, False), (True, True)])
def test_device_plugin_places_undecided_pods_only_when_asked(render, tmp_path, value, expected):
    values = {} if value is None else {"devicePlugin": {"placeUndecided": value}}
    manifests = render(values)
    config = plugin_settings.from_args(command_line(manifests, "device-plugin", tmp_path))
    assert config.place_undecided is expected


@pytest.mark.parametrize("peer", ["volcano", "hami"])
def test_the_peers_presets_place_undecided_pods(render, tmp_path, peer):
    """vc-scheduler binds NPU pods without a decision at every start, the default scheduler
    whole-chip pods HAMi's webhook let through while HAMi was down (values-<peer>.yaml)."""
    preset = yaml.safe_load((CHART / f"values-{peer}.yaml").read_text(encoding="utf-8"))
    manifests = render(preset)
    config = plugin_settings.from_args(command_line(manifests, "device-plugin", tmp_path))
    assert config.place_undecided is True
    assert "MutatingWebhookConfiguration" not in manifests.kinds()  # no vnpu webhook


def test_exporter_settings_follow_the_values(render, tmp_path):
    manifests = render(
        {
            "exporter": {
                "port": 9401,
                "npuExporterCompat": True,
                "readLedger": False,
                "podResources": False,
                "intervals": {"health": 2, "pods": 30},
                "staleFactor": 4,
                "apiTimeout": 3,
                "logLevel": "error",
            }
        }
    )
    config = exporter_settings.from_args(command_line(manifests, "exporter", tmp_path))
    assert config.node_name == NODE
    assert config.port == 9401
    assert config.npu_exporter_compat is True
    assert config.device_plugin_state_dir is None
    assert config.pod_resources is False
    assert {g.value: s for g, s in config.intervals.items()} == {"health": 2, "pods": 30}
    assert (config.stale_factor, config.api_timeout, config.log_level) == (4, 3, "error")
    spec, container = manifests.container("exporter")
    assert {v["name"] for v in spec["volumes"]} == {"driver", "dcmi"}
    assert container["ports"][0]["containerPort"] == 9401


def test_exporter_reads_the_ledger_the_plugin_writes(default, tmp_path):
    """The exporter's --device-plugin-state-dir is a mount of the plugin's --state-dir host path."""
    plugin_spec, plugin = default.container("device-plugin")
    exporter_spec, exporter = default.container("exporter")
    state_arg = next(a for a in plugin["args"] if a.startswith("--state-dir="))
    plugin_host = {
        v["name"]: v["hostPath"]["path"] for v in plugin_spec["volumes"] if "hostPath" in v
    }
    assert plugin_host["state"] == state_arg.split("=", 1)[1]
    ledger_arg = next(a for a in exporter["args"] if a.startswith("--device-plugin-state-dir="))
    mount = next(m for m in exporter["volumeMounts"] if m["name"] == "device-plugin-state")
    assert mount["mountPath"] == ledger_arg.split("=", 1)[1]
    assert mount["readOnly"] is True
    exporter_host = {
        v["name"]: v["hostPath"]["path"] for v in exporter_spec["volumes"] if "hostPath" in v
    }
    assert exporter_host["device-plugin-state"] == plugin_host["state"]
    config = exporter_settings.from_args(command_line(default, "exporter", tmp_path))
    assert config.device_plugin_state_dir is not None


def test_extra_args_reach_the_services(render, tmp_path):
    manifests = render(
        {
            "scheduler": {"extraArgs": ["--no-fit-memo"]},
            "devicePlugin": {"extraArgs": ["--dcmi-library=/usr/local/dcmi/libdcmi.so"]},
            "exporter": {"extraArgs": ["--no-kubernetes"]},
        }
    )
    assert (
        scheduler_settings.from_args(
            command_line(manifests, "vnpu-scheduler", tmp_path / "s")
        ).fit_memo
        is False
    )
    plugin = plugin_settings.from_args(command_line(manifests, "device-plugin", tmp_path / "p"))
    assert plugin.dcmi_library is not None
    assert (
        exporter_settings.from_args(command_line(manifests, "exporter", tmp_path / "e")).kubernetes
        is False
    )


def test_an_unknown_extra_flag_is_refused_by_the_service(render, tmp_path):
    """The check above is not vacuous: a flag the service does not know fails to parse."""
    manifests = render({"scheduler": {"extraArgs": ["--no-such-flag"]}})
    with pytest.raises(SystemExit):
        scheduler_settings.from_args(command_line(manifests, "vnpu-scheduler", tmp_path))
