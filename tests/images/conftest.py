"""Fixtures for the image tests: the OCI archives of ``make images``, run with buildah.

``images`` (session) is a buildah storage of the session's own (storage driver vfs, in a
temporary directory removed at the end) into which each service's archive,
``dist/images/<service>-<version>.tar``, is imported on first use as one working container.
The tests run commands in those containers with ``buildah run --isolation chroot``, which
shares the host's network: a port the container listens on is reachable on the host's loopback.

The tests check the archives as ``make images`` left them; they do not build (a cold build
takes minutes). Without buildah, root or the archives they skip, naming what is missing; with
``VNPU_REQUIRE_IMAGES=1`` (set by ``.ci/run``, which runs ``make images`` first) they fail
instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {
    "vnpu-scheduler": "scheduler",
    "vnpu-device-plugin": "device-plugin",
    "vnpu-exporter": "exporter",
    "vnpu-dra-driver": "dra-driver",
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "images: runs the OCI archives of `make images` with buildah (tests/images)"
    )


def _unavailable(reason: str) -> None:
    if os.environ.get("VNPU_REQUIRE_IMAGES") == "1":
        pytest.fail(f"the images are required (VNPU_REQUIRE_IMAGES=1): {reason}")
    pytest.skip(reason)


class Images:
    """One working container per service, in a buildah storage of this session's own."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.containers: dict[str, str] = {}

    @staticmethod
    def version(service: str) -> str:
        """The service's package version, the tag of its image."""
        path = ROOT / "packages" / PACKAGE_DIRS[service] / "pyproject.toml"
        return str(tomllib.loads(path.read_text())["project"]["version"])

    def archive(self, service: str) -> Path:
        return ROOT / "dist" / "images" / f"{service}-{self.version(service)}.tar"

    def buildah(
        self, *args: str, timeout: float = 60, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.command(*args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            pytest.fail(f"buildah {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
        return done

    def command(self, *args: str) -> list[str]:
        return [
            "buildah",
            "--root",
            str(self.root / "storage"),
            "--runroot",
            str(self.root / "run"),
            "--storage-driver",
            "vfs",
            *args,
        ]

    def container(self, service: str) -> str:
        """The service's working container, imported from its archive on first use."""
        if service not in self.containers:
            path = self.archive(service)
            if not path.is_file():
                _unavailable(f"no {path.relative_to(ROOT)}: run `make images`")
            done = self.buildah(
                "from", "--quiet", "--name", service, f"oci-archive:{path}", timeout=120
            )
            self.containers[service] = done.stdout.strip()
        return self.containers[service]

    def config(self, service: str) -> dict[str, Any]:
        """The image's OCI configuration (``config`` of the image config: User, Entrypoint...)."""
        done = self.buildah("inspect", "--type", "container", self.container(service))
        config: dict[str, Any] = json.loads(done.stdout)["OCIv1"]["config"]
        return config

    def run_command(
        self, service: str, argv: Sequence[str], volumes: Sequence[str] = ()
    ) -> list[str]:
        """The command line of ``buildah run`` for argv in the service's container."""
        mounts = [arg for volume in volumes for arg in ("--volume", volume)]
        container = self.container(service)
        return self.command("run", "--isolation", "chroot", *mounts, container, "--", *argv)

    def run(
        self, service: str, *argv: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.run_command(service, argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


@pytest.fixture(scope="session")
def images() -> Iterator[Images]:
    if shutil.which("buildah") is None:
        _unavailable("buildah is not installed (apt-get install buildah)")
    if os.geteuid() != 0:
        _unavailable("buildah runs the images here as root only (no user namespaces)")
    root = Path(tempfile.mkdtemp(prefix="vnpu-images-"))
    store = Images(root)
    try:
        yield store
    finally:
        store.buildah("rm", "--all", check=False)
        store.buildah("rmi", "--all", "--force", check=False)
        shutil.rmtree(root, ignore_errors=True)
