"""``vnpu-sandbox controllers`` as a real process: it runs, waits for an API server that is not
there yet (saying so once), and stops cleanly on SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from vnpu_sandbox import cli
from vnpu_sandbox.apiserver import harness
from vnpu_sandbox.kubelet import apiclient

from .conftest import deployment_manifest, wait_until


class Command:
    """``python -m vnpu_sandbox controllers ...`` with its stderr collected as it is written."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "vnpu_sandbox", "controllers", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def finish(self) -> int:
        """SIGTERM, then the exit status (the process is killed if it does not stop)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(5)
            if self.process.stderr is not None:
                self.process.stderr.close()


def test_the_command_runs_the_controllers_and_stops_on_sigterm(tmp_path: Path) -> None:
    with harness.serve() as url:
        kubeconfig = harness.write_kubeconfig(tmp_path / "kubeconfig", url)
        command = Command("--kubeconfig", str(kubeconfig))
        api = apiclient.client_for_host(url)
        try:
            k8s.AppsV1Api(api).create_namespaced_deployment(
                "default", deployment_manifest("cli", 2)
            )
            core = k8s.CoreV1Api(api)
            wait_until(lambda: len(core.list_namespaced_pod("default").items) == 2, timeout=15)
            started = time.monotonic()
            status = command.finish()
            assert time.monotonic() - started < 5
        finally:
            command.finish()
            apiclient.close_client(api)
    assert status == 0
    assert "controllers_started" in command.stderr
    assert "Traceback" not in command.stderr


def test_an_absent_api_server_is_reported_once_and_waited_for() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = Command("--server", f"http://127.0.0.1:{port}")
    try:
        wait_until(lambda: "api_unreachable" in command.stderr, timeout=15)
        time.sleep(0.5)  # a few more failed attempts, which must not be reported again
        assert command.process.poll() is None, "the command gave up instead of waiting"
        with harness.serve(port=port) as url:
            api = apiclient.client_for_host(url)
            try:
                k8s.AppsV1Api(api).create_namespaced_deployment(
                    "default", deployment_manifest("late", 1)
                )
                core = k8s.CoreV1Api(api)
                wait_until(lambda: core.list_namespaced_pod("default").items, timeout=8)
            finally:
                apiclient.close_client(api)
            status = command.finish()
    finally:
        command.finish()
    assert status == 0
    assert command.stderr.count("api_unreachable") == 1, command.stderr
    assert "api_reachable" in command.stderr
    assert "Retrying" not in command.stderr  # urllib3's own retry warnings are kept quiet
    assert "Traceback" not in command.stderr


def test_an_unreadable_kubeconfig_is_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.kubeconfig"
    assert cli.main(["controllers", "--kubeconfig", str(missing)]) == 2
    assert f"kubeconfig {missing}" in capsys.readouterr().err


def test_kubeconfig_or_server_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["controllers"])
    assert info.value.code == 2
    assert "one of the arguments --kubeconfig --server is required" in capsys.readouterr().err
