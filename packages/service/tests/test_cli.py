"""The ``vnpu-service api`` command against a loopback API server: answers, refusals, bad settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vnpu_service import cli

VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.2", "platform": "linux/amd64"}


def _report(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    report = json.loads(lines[0])
    assert isinstance(report, dict)
    return report


def test_the_api_answers_with_its_version(
    kit: Any, fake_api: Any, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.answers["/version"] = kit.Answer(200, json.dumps(VERSION).encode())
    assert cli.main(["api", "--kubeconfig", str(kubeconfig)]) == 0
    assert _report(capsys) == {"ok": True, "server": fake_api.url, "version": "v1.30.2"}


@pytest.mark.parametrize(
    ("status", "reason", "error", "retryable"),
    [
        (503, "ServiceUnavailable", "Unavailable", True),
        (403, "Forbidden", "Invalid", False),
        (401, "Unauthorized", "ApiError", False),
    ],
)
def test_a_refusal_is_reported_as_a_service_sees_it(
    kit: Any,
    fake_api: Any,
    kubeconfig: Path,
    capsys: pytest.CaptureFixture[str],
    status: int,
    reason: str,
    error: str,
    retryable: bool,
) -> None:
    fake_api.answers["/version"] = kit.Answer(status, kit.status_body(status, reason, "no"))
    assert cli.main(["api", "--kubeconfig", str(kubeconfig)]) == 1
    assert _report(capsys) == {
        "ok": False,
        "server": fake_api.url,
        "error": error,
        "status": status,
        "reason": reason,
        "message": "get /version: no",
        "retryable": retryable,
    }


def test_an_answer_that_is_not_json_is_unavailable(
    kit: Any, fake_api: Any, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_api.answers["/version"] = kit.Answer(200, b"<html/>", content_type="text/html")
    assert cli.main(["api", "--kubeconfig", str(kubeconfig), "--timeout", "2"]) == 1
    report = _report(capsys)
    assert (report["error"], report["reason"], report["retryable"]) == (
        "Unavailable",
        "BadResponse",
        True,
    )


def test_a_bad_kubeconfig_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("clusters: [\n", encoding="utf-8")
    assert cli.main(["api", "--kubeconfig", str(broken)]) == 2
    report = _report(capsys)
    assert (report["ok"], report["error"], report["source"]) == (False, "ConfigError", str(broken))
    assert "while parsing" in report["problem"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [("soon", "not a number"), ("0", "must be above 0"), ("-1", "must be above 0")],
)
def test_a_bad_timeout_is_refused_by_name(
    value: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["api", f"--timeout={value}"])
    assert stopped.value.code == 2
    assert f"argument --timeout: {problem}" in capsys.readouterr().err


def test_the_installed_command_runs(kit: Any, fake_api: Any, kubeconfig: Path) -> None:
    fake_api.answers["/version"] = kit.Answer(200, json.dumps(VERSION).encode())
    command = Path(sys.executable).with_name("vnpu-service")
    done = subprocess.run(
        [str(command), "api", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["version"] == "v1.30.2"
