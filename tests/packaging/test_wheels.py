"""Each package installs on its own from the wheels ``make dist`` builds, as the README says.

Builds the wheel of every package into a temporary ``dist`` (as ``make dist`` does, but with
the test environment's hatchling instead of one build env per package, which is several
times faster), then installs the exporter into a fresh virtualenv with
``--find-links dist``: its vnpu siblings must come from the wheels and everything else from
PyPI, so this test needs PyPI (or the machine's configured index) to be reachable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted(path.parent for path in (ROOT / "packages").glob("*/pyproject.toml"))


def _project(package: Path) -> dict[str, object]:
    loaded: dict[str, object] = tomllib.loads((package / "pyproject.toml").read_text())["project"]
    return loaded


def _run(*command: object) -> subprocess.CompletedProcess[str]:
    """Run a command outside this test's virtualenv; fail with its output if it fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.mark.timeout(300)  # a cold pip cache downloads the exporter's dependencies
def test_the_exporter_installs_alone_from_the_wheels(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    pip = (sys.executable, "-m", "pip")
    _run(
        *pip,
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        dist,
        *PACKAGES,
    )
    wheels = sorted(path.name for path in dist.glob("*.whl"))
    expected = sorted(
        f"{str(p['name']).replace('-', '_')}-{p['version']}-py3-none-any.whl"
        for p in map(_project, PACKAGES)
    )
    assert wheels == expected

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(
        *pip,
        "--python",
        python,
        "install",
        "--quiet",
        "--no-compile",
        "--find-links",
        dist,
        "vnpu-exporter",
    )

    listed = _run(*pip, "--python", python, "list", "--format", "json").stdout
    ours = {item["name"] for item in json.loads(listed) if item["name"].startswith("vnpu-")}
    assert ours == {  # the NPU access layer, not the device plugin
        "vnpu-core",
        "vnpu-npu",
        "vnpu-kubelet-api",
        "vnpu-service",
        "vnpu-exporter",
    }
    where = _run(python, "-c", "import vnpu_exporter.__main__ as m; print(m.__file__)").stdout
    installed = Path(where.strip())
    assert installed.is_relative_to(venv), "imported from the virtualenv, not the checkout"
    source = ROOT / "packages" / "exporter" / "src" / "vnpu_exporter" / "__main__.py"
    assert installed.read_bytes() == source.read_bytes(), "installed from the wheels just built"

    helped = _run(venv / "bin" / "vnpu-exporter", "--help")
    assert helped.stdout.startswith("usage: vnpu-exporter")
    assert "--node-name" in helped.stdout
