"""The chart, ``deploy/images`` and ``scripts/images.sh`` agree on the images (no build needed).

The chart is rendered in both its modes, classic (its defaults) and dra (``global.mode=dra``),
with ``scripts/render_chart.py`` (Helm's own library): each vnpu container's image must be
``<service>:<appVersion>``, where ``<service>`` is the command the container runs, an image
``scripts/images.sh`` builds and a directory of ``deploy/images`` whose Containerfile has that
command as its entry point; and an image runs as root exactly when the chart runs its
container privileged.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "deploy" / "images"
CHART = ROOT / "deploy" / "helm" / "vnpu"


def _render(tmp_path: Path, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "render_chart.py"), "--values", str(values_file)],
        capture_output=True,
        text=True,
        check=False,
    )


MODES: tuple[dict[str, Any], ...] = ({}, {"global": {"mode": "dra"}})
SERVICES = {"vnpu-scheduler", "vnpu-device-plugin", "vnpu-exporter", "vnpu-dra-driver"}


def _containers(tmp_path: Path, values: dict[str, Any]) -> list[tuple[dict[str, Any], Any]]:
    """(container, pod spec) of every vnpu container the chart renders with values."""
    done = _render(tmp_path, values)
    assert done.returncode == 0, done.stderr
    found = []
    for doc in yaml.safe_load_all(done.stdout):
        if doc and doc["kind"] in ("Deployment", "DaemonSet"):
            pod = doc["spec"]["template"]["spec"]
            for container in pod["containers"]:
                if (container.get("command") or [""])[0].startswith("vnpu-"):
                    found.append((container, pod))
    return found


def _containerfile(service: str) -> dict[str, str]:
    """Instruction -> argument of the last line of each instruction in the Containerfile."""
    text = (IMAGES / service / "Containerfile").read_text().replace("\\\n", " ")
    instructions: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            instructions[word] = rest.strip()
    return instructions


def _built_by_script() -> set[str]:
    script = (ROOT / "scripts" / "images.sh").read_text()
    match = re.search(r"^services=\(([^)]*)\)$", script, re.MULTILINE)
    assert match, "scripts/images.sh names its services in services=(...)"
    return set(match.group(1).split())


def _versions() -> dict[str, str]:
    """Console script -> its package's version."""
    found = {}
    for path in (ROOT / "packages").glob("*/pyproject.toml"):
        project = tomllib.loads(path.read_text())["project"]
        for script in project.get("scripts", {}):
            found[script] = project["version"]
    return found


def test_every_vnpu_container_runs_the_image_of_its_command(tmp_path: Path) -> None:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    versions = _versions()
    commands = set()
    for mode in MODES:
        for container, _ in _containers(tmp_path, mode):
            command = container["command"][0]
            commands.add(command)
            assert container["image"] == f"{command}:{app_version}"
            assert versions[command] == app_version, f"{command}: package version != appVersion"
            instructions = _containerfile(command)
            assert instructions["ENTRYPOINT"] == f'["{command}"]'
            assert instructions["RUN"] == "--mount=type=bind,target=/build sh /build/venv.sh"
    assert commands == SERVICES
    assert {path.parent.name for path in IMAGES.glob("*/Containerfile")} == commands
    assert _built_by_script() == commands


def test_an_image_runs_as_root_exactly_when_the_chart_runs_it_privileged(
    tmp_path: Path,
) -> None:
    checked: set[str] = set()
    for container, pod in [found for mode in MODES for found in _containers(tmp_path, mode)]:
        checked.add(container["command"][0])
        user = _containerfile(container["command"][0])["USER"]
        uid, gid = (int(part) for part in user.split(":"))
        privileged = bool(container.get("securityContext", {}).get("privileged"))
        assert privileged == (uid == 0), container["name"]
        if not privileged:
            pod_context = pod.get("securityContext", {})
            assert pod_context.get("runAsNonRoot") is True
            assert (pod_context["runAsUser"], pod_context["runAsGroup"]) == (uid, gid)
    assert checked == SERVICES


def test_the_registry_prefixes_every_vnpu_image(tmp_path: Path) -> None:
    image = {"registry": "registry.example:5000/team", "tag": "dev"}
    images: set[str] = set()
    for mode in ("classic", "dra"):
        values = {"global": {"mode": mode, "image": image}}
        images |= {c["image"] for c, _ in _containers(tmp_path, values)}
    assert images == {f"registry.example:5000/team/{service}:dev" for service in SERVICES}


@pytest.mark.parametrize(
    ("image", "key"),
    [
        ({"registry": "https://registry.example"}, "/global/image/registry"),
        ({"registry": "registry.example/team/"}, "/global/image/registry"),
        ({"repository": "vnpu"}, "/global/image"),  # one image for all: no longer built
    ],
)
def test_a_bad_image_value_is_refused_naming_the_key(
    tmp_path: Path, image: dict[str, str], key: str
) -> None:
    done = _render(tmp_path, {"global": {"image": image}})
    assert done.returncode == 2
    assert f"'{key}'" in done.stderr, done.stderr
