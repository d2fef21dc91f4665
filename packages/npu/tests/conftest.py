"""Fixtures for the NPU access tests: simulated node directories and the stand-in libdcmi.so.

The stand-in library (``stand_in_dcmi.c``) is compiled once per session with gcc, in two
variants: ``current`` (every symbol) and ``old`` (``-DOLD_DRIVER``: without
``dcmi_get_card_list``, ``dcmi_get_device_errorcode_v2`` and
``dcmi_get_device_memory_info_v3``). ``open_backend`` is parametrized over the simulated
backend and the DCMI backend on both variants, all reading the same kind of directory.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vnpu_npu import backend
from vnpu_npu.dcmi import backend as dcmi_backend
from vnpu_npu.sim import backend as sim_backend

SOURCE = Path(__file__).with_name("stand_in_dcmi.c")
KINDS = ("sim", "dcmi", "dcmi-old")

Opener = Callable[..., backend.Backend]


def write_node(
    sim_dir: Path,
    chip: str = "310P3",
    chips: int = 4,
    server: str | None = "300i-duo",
    overrides: dict[int, dict[str, Any]] | None = None,
    seed: str = "conformance",
) -> Path:
    """Write ``sim_dir/chips.yaml`` for a node of ``chips`` chips."""
    sim_dir.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"chip": chip, "chips": chips, "seed": seed}
    if server:
        doc["server"] = server
    if overrides:
        doc["overrides"] = overrides
    (sim_dir / "chips.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return sim_dir


def compile_stand_in(target: Path, *flags: str) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip(
            "gcc is not installed, so the stand-in libdcmi.so cannot be built (.ci/run installs gcc)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    command = [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", *flags]
    result = subprocess.run(
        [*command, "-o", str(target), str(SOURCE)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"stand-in libdcmi.so does not compile:\n{result.stderr}"
    return target


@pytest.fixture(scope="session")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The compiled stand-in libraries by variant: ``current`` and ``old``."""
    root = tmp_path_factory.mktemp("dcmi")
    return {
        "current": compile_stand_in(root / "current" / "libdcmi.so"),
        "old": compile_stand_in(root / "old" / "libdcmi.so", "-DOLD_DRIVER"),
    }


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A 300I Duo node: four 310P3 chips, two per card."""
    return write_node(tmp_path / "node")


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_backend(
    kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Opener]:
    """Open the backend under test on a node directory (state created from chips.yaml)."""
    opened: list[backend.Backend] = []

    def opener(sim_dir: Path) -> backend.Backend:
        sim = sim_backend.SimBackend(sim_dir)  # creates state.txt; the C library only reads it
        if kind == "sim":
            chosen: backend.Backend = sim
        else:
            libraries = request.getfixturevalue("stand_in")
            monkeypatch.setenv("VNPU_SIM_DIR", str(sim_dir))
            variant = "old" if kind == "dcmi-old" else "current"
            chosen = dcmi_backend.DcmiBackend(str(libraries[variant]))
        opened.append(chosen)
        return chosen

    yield opener
    for item in opened:
        item.close()


@pytest.fixture
def make_node(tmp_path: Path) -> Callable[..., Path]:
    """``make_node(name, chip=..., chips=..., server=..., overrides=...)`` writes a node directory."""

    def make(name: str = "node", **settings: Any) -> Path:
        return write_node(tmp_path / name, **settings)

    return make
