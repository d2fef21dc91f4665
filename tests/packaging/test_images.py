"""Every image the chart runs vnpu from has a Dockerfile that installs the right packages.

No container engine runs here, so the images are not built: the chart is rendered (default
values, and one image per component), each vnpu container's image repository must have
``deploy/images/<repository>/Dockerfile``, and that Dockerfile must install, from the wheels
``make dist`` writes (the build context), the package whose console script the container runs.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "deploy" / "images"
PER_COMPONENT = {
    "scheduler": {"image": {"repository": "vnpu-scheduler"}},
    "devicePlugin": {"image": {"repository": "vnpu-device-plugin"}},
    "exporter": {"image": {"repository": "vnpu-exporter"}},
}


def _scripts() -> dict[str, tuple[str, str]]:
    """Console script -> (distribution, version), from every package's pyproject."""
    found: dict[str, tuple[str, str]] = {}
    for path in (ROOT / "packages").glob("*/pyproject.toml"):
        project = tomllib.loads(path.read_text())["project"]
        for script in project.get("scripts", {}):
            found[script] = (project["name"], project["version"])
    return found


def _images(tmp_path: Path, values: dict[str, Any]) -> dict[str, tuple[str, set[str]]]:
    """Image repository -> (tag, console scripts run from it) in the chart rendered with values."""
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    script = ROOT / "scripts" / "render_chart.py"
    done = subprocess.run(
        [sys.executable, str(script), "--values", str(values_file)],
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, tuple[str, set[str]]] = {}
    for doc in yaml.safe_load_all(done.stdout):
        if not doc or doc["kind"] not in ("Deployment", "DaemonSet"):
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            command = container.get("command") or []
            if not command or not command[0].startswith("vnpu-"):
                continue  # the upstream kube-scheduler
            repository, _, tag = container["image"].rpartition(":")
            found.setdefault(repository, (tag, set()))[1].add(command[0])
    return found


def _installed(dockerfile: Path) -> tuple[list[str], list[str]]:
    """(COPY sources, packages of ``pip install``) of a Dockerfile."""
    lines = dockerfile.read_text().replace("\\\n", " ").splitlines()
    copies = [shlex.split(line)[1] for line in lines if line.startswith("COPY ")]
    (run,) = [line for line in lines if line.startswith("RUN ") and "pip install" in line]
    words = shlex.split(run.split("&&")[0])[1:]
    assert words[:2] == ["pip", "install"], run
    assert "--find-links" in words, "the vnpu packages come from the wheels"
    assert words[words.index("--find-links") + 1] == "/wheels"
    options_with_value = {"--find-links"}
    packages: list[str] = []
    skip = False
    for word in words[2:]:
        if skip:
            skip = False
        elif word in options_with_value:
            skip = True
        elif not word.startswith("-"):
            packages.append(word)
    return copies, packages


@pytest.mark.parametrize("layout", ["one image", "one image per component"])
def test_each_image_the_chart_names_has_a_dockerfile_installing_its_package(
    tmp_path: Path, layout: str
) -> None:
    scripts = _scripts()
    images = _images(tmp_path, {} if layout == "one image" else PER_COMPONENT)
    expected_repositories = (
        {"vnpu"}
        if layout == "one image"
        else {"vnpu-scheduler", "vnpu-device-plugin", "vnpu-exporter"}
    )
    assert set(images) == expected_repositories
    for repository, (tag, commands) in images.items():
        dockerfile = IMAGES / repository / "Dockerfile"
        assert dockerfile.is_file(), f"{repository}: no {dockerfile.relative_to(ROOT)}"
        copies, packages = _installed(dockerfile)
        assert copies == ["*.whl"], "the build context is dist/, the wheels of make dist"
        needed = {scripts[command][0] for command in commands}
        assert set(packages) == needed, repository
        assert {scripts[command][1] for command in commands} == {tag}, "tag is the version"
        header = dockerfile.read_text()
        assert (
            f"docker build -f deploy/images/{repository}/Dockerfile -t {repository}:{tag} dist"
            in header
        )


def test_every_dockerfile_is_an_image_the_chart_can_name(tmp_path: Path) -> None:
    named = set(_images(tmp_path, {})) | set(_images(tmp_path, PER_COMPONENT))
    present = {path.parent.name for path in IMAGES.glob("*/Dockerfile")}
    assert present == named
