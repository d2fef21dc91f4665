"""Device-config reload (last good kept, reported), settings precedence, start-up refusals."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from vnpu_scheduler import __main__ as entry
from vnpu_scheduler import errors, settings

Json = dict[str, Any]


def _config(templates: str) -> str:
    return textwrap.dedent(
        """\
        vnpus:
          hamiVnpuCore: false
          configs:
          - chipName: 310P3
            commonWord: Ascend310P
            memoryAllocatable: 21527
            memoryCapacity: 24576
            aiCore: 8
            aiCPU: 7
            templates:
        """
    ) + textwrap.indent(templates, "      ")


ONLY_VIR04 = "- {name: vir04, memory: 12288, aiCore: 4, aiCPU: 4}\n"
FULL = (
    "- {name: vir01, memory: 3072, aiCore: 1, aiCPU: 1}\n"
    "- {name: vir02, memory: 6144, aiCore: 2, aiCPU: 2}\n" + ONLY_VIR04
)


def _swap(path: Path, text: str) -> None:
    """Give ``path`` new content in one step, as a ConfigMap volume does: a poll that reads
    the file while it is being written would see a cut-off config, valid or not."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(text)
    os.replace(staged, path)


def _rounded(scheduler: Any, make: Any) -> str:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "operation": "CREATE", "object": make.pod("p", memory=4000)},
    }
    reply = scheduler.post("mutate", review).json()["response"]
    assert reply["uid"] == "u1"
    assert reply["allowed"] is True
    patch = json.loads(base64.b64decode(reply["patch"]))
    memory = [op for op in patch if op["path"].endswith("Ascend310P-memory")]
    assert memory[0]["path"] == "/spec/containers/0/resources/limits/huawei.com~1Ascend310P-memory"
    value: str = memory[0]["value"]
    return value


def test_reload_takes_good_configs_and_keeps_the_last_good_one(
    start_scheduler: Any, make: Any, tmp_path: Path
) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(_config(ONLY_VIR04))
    scheduler = start_scheduler(device_config=path)
    assert _rounded(scheduler, make) == "12288"
    _swap(path, _config(FULL))
    scheduler.wait_for(lambda: _rounded(scheduler, make) == "6144")
    assert scheduler.sample("vnpu_scheduler_device_config_reloads_total", result="ok") == 2
    _swap(path, _config("- {name: vir02, memory: lots, aiCore: 2, aiCPU: 2}\n"))
    scheduler.wait_for(lambda: scheduler.sample("vnpu_scheduler_device_config_ok") == 0)
    ready = scheduler.http.get(f"{scheduler.url}/readyz")
    assert ready.status_code == 200  # still serving, with the last good config
    config = ready.json()["device_config"]
    assert config["source"] == str(path)
    assert config["last_reload_error"].startswith(f"{path}: vnpus.configs[0].templates[0].memory:")
    assert scheduler.sample("vnpu_scheduler_device_config_reloads_total", result="failed") == 1
    assert _rounded(scheduler, make) == "6144"
    _swap(path, _config(ONLY_VIR04))
    scheduler.wait_for(lambda: scheduler.sample("vnpu_scheduler_device_config_ok") == 1)
    assert _rounded(scheduler, make) == "12288"
    assert (
        scheduler.http.get(f"{scheduler.url}/readyz").json()["device_config"]["last_reload_error"]
        == ""
    )


def test_an_alias_bomb_is_rejected_shown_and_later_reloads_still_load(
    start_scheduler: Any, make: Any, tmp_path: Path, alias_bomb: str
) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(_config(ONLY_VIR04))
    scheduler = start_scheduler(device_config=path)
    readyz = f"{scheduler.url}/readyz"
    good = scheduler.http.get(readyz).json()["device_config"]["digest"]
    _swap(path, alias_bomb)
    scheduler.wait_for(lambda: scheduler.sample("vnpu_scheduler_device_config_ok") == 0)
    ready = scheduler.http.get(readyz)
    assert ready.status_code == 200  # a good config is in use: still ready
    config = ready.json()["device_config"]
    assert config["loaded"] is True
    assert config["digest"] == good
    assert config["source_rejected"] is True
    assert config["rejected_digest"] == hashlib.sha256(alias_bomb.encode()).hexdigest()[:12]
    assert config["last_reload_error"].startswith(
        f"{path}: (document): YAML anchor &a refused at line 1, column 4: anchors (&name) and "
        "aliases (*name) are not allowed"
    )
    assert _rounded(scheduler, make) == "12288"  # the last good config still serves
    assert scheduler.sample("vnpu_scheduler_device_config_reloads_total", result="failed") == 1
    _swap(path, _config(FULL))
    scheduler.wait_for(lambda: _rounded(scheduler, make) == "6144")
    config = scheduler.http.get(readyz).json()["device_config"]
    assert (config["source_rejected"], config["last_reload_error"]) == (False, "")
    assert config["digest"] == hashlib.sha256(_config(FULL).encode()).hexdigest()[:12]
    assert scheduler.sample("vnpu_scheduler_device_config_ok") == 1
    assert scheduler.sample("vnpu_scheduler_device_config_reloads_total", result="ok") == 2
    assert scheduler.sample("vnpu_scheduler_device_config_reloads_total", result="failed") == 1


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VNPU_SCHED_PORT", "9999")
    monkeypatch.setenv("VNPU_SCHED_POLICY", "spread")
    assert settings.from_args([]).port == 9999
    chosen = settings.from_args(["--port", "7777", "--release-lock-after-bind"])
    assert chosen.port == 7777
    assert chosen.policy.value == "spread"
    assert chosen.release_lock_after_bind is True


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--port", "http"], "port"),
        (["--policy", "fastest"], "policy"),
        (["--handshake-timeout", "-1"], "handshake_timeout"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "kubeconfig"),
        (["--log-level", "chatty"], "log_level"),
        (["--host", "0.0.0.0"], "host"),
        (["--host", "10.1.2.3"], "host"),
        (["--bind-timeout", "22"], "bind_timeout"),  # not above --lock-wait 20 plus 2 s
        (["--lock-wait", "30"], "bind_timeout"),
        (["--port", "9000", "--metrics-port", "9000"], "metrics_port"),
        (["--max-body-bytes", "10"], "max_body_bytes"),
        (["--lock-clock-skew", "-1"], "lock_clock_skew"),
    ],
)
def test_bad_settings_name_the_field(argv: list[str], field: str) -> None:
    with pytest.raises(errors.SettingsError) as refused:
        settings.from_args(argv)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"setting {field}: ")


def test_new_limits_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    defaults = settings.Settings()
    assert (defaults.bind_timeout, defaults.lock_wait, defaults.lock_clock_skew) == (25, 20, 30)
    assert defaults.max_body_bytes == 80 * 2**20
    monkeypatch.setenv("VNPU_SCHED_MAX_BODY_BYTES", "1048576")
    monkeypatch.setenv("VNPU_SCHED_BIND_TIMEOUT", "28")
    monkeypatch.setenv("VNPU_SCHED_LOCK_CLOCK_SKEW", "5")
    chosen = settings.from_args(["--webhook-max-body-bytes", "65536"])
    assert (chosen.max_body_bytes, chosen.webhook_max_body_bytes) == (1048576, 65536)
    assert (chosen.bind_timeout, chosen.lock_clock_skew) == (28, 5)


def test_tls_needs_both_files(tmp_path: Path) -> None:
    cert = tmp_path / "tls.crt"
    cert.write_text("x")
    with pytest.raises(errors.SettingsError) as refused:
        settings.from_args(["--tls-cert", str(cert)])
    assert "tls_cert and tls_key are given together" in str(refused.value)
    key = tmp_path / "tls.key"
    key.write_text("x")
    with pytest.raises(errors.SettingsError) as refused:
        settings.from_args(
            [
                "--tls-cert",
                str(cert),
                "--tls-key",
                str(key),
                "--port",
                "9000",
                "--webhook-port",
                "9000",
            ]
        )
    assert "port and webhook_port must differ (both 9000)" in str(refused.value)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """``main`` configures process-wide logging; put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.reset_defaults()


@pytest.mark.usefixtures("restored_logging")
def test_main_refuses_a_bad_device_config(
    kube: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "device-config.yaml"
    bad.write_text("vnpus: [{chipName: 310P3, commonWord: Ascend310P, aiCore: many}]\n")
    status = entry.main(["--kubeconfig", str(kube.kubeconfig), "--device-config", str(bad)])
    assert status == 2
    message = capsys.readouterr().err
    assert message.startswith(f"vnpu-scheduler: setting device_config: {bad}: vnpus[0].aiCore:")
    assert entry.main(["--port", "none"]) == 2
    assert "setting port: Input should be a valid integer" in capsys.readouterr().err
