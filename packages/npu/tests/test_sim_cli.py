"""``python -m vnpu_npu.sim``: create a node, inject faults and load, manage vNPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vnpu_npu import backend
from vnpu_npu.sim import __main__ as cli
from vnpu_npu.sim import backend as sim_backend


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_module_runs_as_a_program(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vnpu_npu.sim",
            str(tmp_path / "n"),
            "init",
            "--chip",
            "910B3",
            "--chips",
            "2",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "2 chips" in result.stdout
    assert [c.model for c in sim_backend.SimBackend(tmp_path / "n").chips()] == ["910B3", "910B3"]


def test_fault_load_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = str(tmp_path / "n")
    assert _run(capsys, node, "init", "--chip", "310P3", "--chips", "4", "--seed", "s")[0] == 0
    assert (
        _run(capsys, node, "fault", "--chip", "2", "--health", "critical", "--code", "80E18402")[0]
        == 0
    )
    assert _run(capsys, node, "fault", "--chip", "3", "--gone")[0] == 0
    assert _run(capsys, node, "load", "--chip", "0", "--aicore", "55", "--memory", "1024")[0] == 0
    code, out, _ = _run(capsys, node, "create", "--chip", "0", "--template", "vir02")
    assert (code, out.strip()) == (0, "100")
    assert _run(capsys, node, "load", "--vnpu", "100", "--aicore", "30", "--in-use")[0] == 0

    code, out, _ = _run(capsys, node, "show")
    assert code == 0
    assert "critical 80E18402" in out
    assert "55% 1024/24576" in out
    assert "24.0W card" in out
    assert "vnpu 100 vir02 (2 AI cores, 6144 MiB, in use)" in out
    assert out.splitlines()[-1].endswith("gone")

    sim = sim_backend.SimBackend(node)
    assert sim.health(2) == backend.ChipHealth(backend.Health.CRITICAL, (0x80E18402,))
    assert _run(capsys, node, "fault", "--chip", "2", "--clear")[0] == 0
    assert sim.health(2) == backend.ChipHealth(backend.Health.OK, ())


def test_refusals_exit_1_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = str(tmp_path / "n")
    _run(capsys, node, "init", "--chip", "310P3", "--chips", "1")
    _run(capsys, node, "load", "--vnpu", "100", "--aicore", "1")  # no such vNPU yet

    code, _, err = _run(capsys, node, "fault", "--chip", "5", "--gone")
    assert code == 1
    assert "chip" in err
    assert "(got 5)" in err
    for _ in range(2):
        _run(capsys, node, "create", "--chip", "0", "--template", "vir04")
    code, _, err = _run(capsys, node, "create", "--chip", "0", "--template", "vir04")
    assert code == 1
    assert "vir04 needs 4 aicpu" in err
    code, _, err = _run(capsys, node, "destroy", "--chip", "0", "--id", "107")
    assert (code, "no vNPU 107 on chip 0" in err) == (1, True)


def test_bad_usage_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        cli.main([str(tmp_path), "fault", "--chip", "0", "--code", "XYZ"])
    assert caught.value.code == 2
    assert "fault code 'XYZ'" in capsys.readouterr().err


def test_bad_chips_yaml_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, str(tmp_path / "n"), "init", "--chip", "H100", "--chips", "1")
    assert code == 1
    assert "chip: not a known chip model" in err
