"""The images ``make images`` built run their services.

Each OCI archive in ``dist/images/`` is imported into a buildah storage of the session's own
and run with ``buildah run --isolation chroot`` (``conftest.py``): every entry point answers
``--help`` naming its service, as the user the chart expects; every vnpu module in an image
imports, so nothing its code needs was left out; and the exporter, given a simulated node,
serves its chips' metrics on the host's loopback (chroot isolation shares the host's network).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

SERVICES = ("vnpu-scheduler", "vnpu-device-plugin", "vnpu-exporter", "vnpu-dra-driver")
# uid:gid of each image: the scheduler needs no privilege; the device plugin, the exporter and
# the DRA driver reach root-only device nodes and kubelet sockets (the Containerfiles say which).
USERS = {
    "vnpu-scheduler": "65532:65532",
    "vnpu-device-plugin": "0:0",
    "vnpu-exporter": "0:0",
    "vnpu-dra-driver": "0:0",
}

# Importing an archive into a vfs storage copies every layer: some seconds on an idle machine,
# several times that on a busy one; the first test of each image pays for it.
pytestmark = [pytest.mark.images, pytest.mark.timeout(180)]

_IMPORT_ALL = """
import importlib, importlib.metadata, pkgutil
names = []
for dist in importlib.metadata.distributions():
    if dist.metadata["Name"].startswith("vnpu-"):
        package = importlib.import_module(dist.metadata["Name"].replace("-", "_"))
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith(".__main__"):
                names.append(importlib.import_module(info.name).__name__)
print("\\n".join(names))
"""


@pytest.mark.parametrize("service", SERVICES)
def test_the_entry_point_answers_help_naming_the_service(images: Any, service: str) -> None:
    entrypoint = images.config(service)["Entrypoint"]
    assert entrypoint == [service]
    done = images.run(service, *entrypoint, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {service} "), done.stdout


@pytest.mark.parametrize("service", SERVICES)
def test_the_image_runs_as_its_user_and_carries_its_version(images: Any, service: str) -> None:
    config = images.config(service)
    assert config["User"] == USERS[service]
    assert config["Labels"]["org.opencontainers.image.title"] == service
    assert config["Labels"]["org.opencontainers.image.version"] == images.version(service)
    done = images.run(service, "python3", "-c", "import os; print(os.getuid(), os.getgid())")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == USERS[service].split(":")


@pytest.mark.parametrize("service", SERVICES)
def test_every_vnpu_module_in_the_image_imports(images: Any, service: str) -> None:
    done = images.run(service, "python3", "-c", _IMPORT_ALL)
    assert done.returncode == 0, done.stderr
    modules = set(done.stdout.split())
    assert service.replace("-", "_") in modules
    assert "vnpu_sandbox" not in modules  # the sandbox's package is for one machine, not images
    assert len(modules) > 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _scrape(port: int, process: subprocess.Popen[bytes], wanted: str, log: Path) -> str:
    """/metrics once it holds ``wanted``; fails when the exporter exits or never gets there."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the exporter exited ({process.returncode}):\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                text: str = reply.read().decode()
        except (urllib.error.URLError, ConnectionError):
            text = ""
        if wanted in text:
            return text
        time.sleep(0.2)
    pytest.fail(f"no {wanted} on :{port}/metrics within 90 s:\n{log.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group of ``buildah run`` (buildah and the exporter), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=30)
            return
        except subprocess.TimeoutExpired:
            continue


def test_the_exporter_serves_a_simulated_node_on_the_host_network(
    images: Any, tmp_path: Path
) -> None:
    sim = tmp_path / "sim"
    sim.mkdir()
    (sim / "chips.yaml").write_text("chip: 310P3\nchips: 2\n")
    port = _free_port()
    argv = [
        *images.config("vnpu-exporter")["Entrypoint"],
        "--node-name=image-node",
        "--backend=sim",
        "--sim-dir=/var/lib/vnpu/sim",
        "--no-kubernetes",
        "--no-pod-resources",
        "--host=127.0.0.1",
        f"--port={port}",
    ]
    command = images.run_command("vnpu-exporter", argv, volumes=[f"{sim}:/var/lib/vnpu/sim"])
    log = tmp_path / "exporter.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        metrics = _scrape(port, process, "vnpu_chip_present{", log)
    finally:
        _stop(process)
    present = [line for line in metrics.splitlines() if line.startswith("vnpu_chip_present{")]
    assert len(present) == 2, present
    assert all('node="image-node"' in line and line.endswith(" 1.0") for line in present)
    assert (sim / "state.txt").is_file()  # the simulated backend wrote the host's directory
