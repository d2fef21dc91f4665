"""``vnpu-dra-driver``: ``slices`` prints what ``publish`` writes, and ``publish`` writes it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vnpu_core import catalog
from vnpu_dra_driver import __main__ as cli
from vnpu_dra_driver import chips, publisher, slices
from vnpu_npu.sim import backend as sim_backend


def test_slices_prints_the_pool_as_json(
    make_sim_node: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = make_sim_node(tmp_path / "sim", "910B3", 8)
    capsys.readouterr()
    assert cli.main(["slices", "--node", "n1", "--sim-dir", str(directory), "--soft"]) == 0
    printed = json.loads(capsys.readouterr().out)
    model = catalog.BUILTIN.by_chip_name("910B3")
    assert model is not None
    npu = sim_backend.SimBackend(directory)
    assert printed == list(slices.build("n1", chips.read(npu), model, soft=True))


def test_an_unknown_model_is_refused(
    make_sim_node: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = make_sim_node(tmp_path / "sim", "310P3", 1)
    code = cli.main(["slices", "--node", "n", "--sim-dir", str(directory), "--model", "H100"])
    assert code == 1
    assert "model='H100'" in capsys.readouterr().err


def test_publish_writes_the_pool_once(
    kube: Any, make_sim_node: Callable[..., Path], tmp_path: Path
) -> None:
    kube.create_node()
    directory = make_sim_node(tmp_path / "sim", "310P3", 2)
    argv = ["publish", "--node", kube.node, "--sim-dir", str(directory)]
    argv += ["--kubeconfig", str(kube.kubeconfig)]
    done = subprocess.run(
        [sys.executable, "-m", "vnpu_dra_driver", *argv],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"event": "slices_published"' in done.stdout
    model = catalog.BUILTIN.by_chip_name("310P3")
    assert model is not None
    built = slices.build(kube.node, chips.read(sim_backend.SimBackend(directory)), model)
    stored = kube.slices()
    assert [publisher.comparable(s["spec"]) for s in stored] == [
        publisher.comparable(b["spec"]) for b in built
    ]
