"""The simulated node's files: chips.yaml validation, the state format, refresh after edits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from vnpu_npu import backend, errors
from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import config, control, state, store


def _parse(text: str) -> config.SimConfig:
    return config.parse(text, "chips.yaml", "/seed")


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("[1, 2]", "document", [1, 2]),
        ("chip: 310P3\nchips: 2\ncolour: red", "colour", "red"),
        ("chip: 999X\nchips: 2", "chip", "999X"),
        ("chips: 2", "chip", None),
        ("chip: 310P3\nchips: 0", "chips", 0),
        ("chip: 310P3\nchips: '4'", "chips", "4"),
        ("chip: 310P3\nchips: 65", "chips", 65),
        ("chip: 310P3\nchips: 2\nserver: ring", "server", "ring"),
        ("chip: 310P3\nchips: 2\noverrides: [1]", "overrides", [1]),
        ("chip: 310P3\nchips: 2\noverrides: {2: {health: ok}}", "overrides.2", 2),
        ("chip: 310P3\nchips: 2\noverrides: {1: {health: sick}}", "overrides.1.health", "sick"),
        ("chip: 310P3\nchips: 2\noverrides: {1: {health: 4}}", "overrides.1.health", 4),
        ("chip: 310P3\nchips: 2\noverrides: {1: {codes: [XYZ]}}", "overrides.1.codes", "XYZ"),
        ("chip: 310P3\nchips: 2\noverrides: {0: {memory: -1}}", "overrides.0.memory", -1),
        ("chip: 310P3\nchips: 2\noverrides: {0: {aicore: 0}}", "overrides.0.aicore", 0),
        ("chip: 310P3\nchips: 2\noverrides: {0: {power: hot}}", "overrides.0.power", "hot"),
        ("chip: 310P3\nchips: 2\noverrides: {0: {gone: 1}}", "overrides.0.gone", 1),
        ("chip: 310P3\nchips: 2\noverrides: {0: {media: {gpu: 1}}}", "overrides.0.media.gpu", 1),
        (
            "chip: 310P3\nchips: 2\noverrides: {0: {media: {venc: -1}}}",
            "overrides.0.media.venc",
            -1,
        ),
        ("chip: 310P3\nchips: 2\noverrides: {0: {uuid: ABC}}", "overrides.0.uuid", "ABC"),
        ("chip: 310P3\nchips: 2\noverrides: {0: {bdf: '0:1:2'}}", "overrides.0.bdf", "0:1:2"),
        ("chip: 310P3\nchips: 2\noverrides: {0: {logic: 1}}", "overrides.1.logic", 1),
        ("chip: 310P3\nchips: 2\noverrides: {0: {colour: red}}", "overrides.0.colour", "red"),
    ],
)
def test_bad_chips_yaml_names_field_and_value(text: str, field: str, value: Any) -> None:
    with pytest.raises(errors.SimError) as caught:
        _parse(text)
    assert (caught.value.file, caught.value.field, caught.value.value) == (
        "chips.yaml",
        field,
        value,
    )
    assert field in str(caught.value)


def test_chips_yaml_defaults_and_overrides() -> None:
    cfg = _parse(
        "chip: 910B3\nchips: 8\noverrides:\n  3: {health: major, codes: ['80E18402', 80818200], power: 99.5}\n"
    )

    assert (cfg.model.name, cfg.chips, cfg.server.value, cfg.seed) == (
        "910B3",
        8,
        "910b-8",
        "/seed",
    )
    override = cfg.overrides[3]
    assert override.health is backend.Health.MAJOR
    assert override.codes == (0x80E18402, 0x80818200)  # an unquoted code is read as hex too
    assert override.power_watts == 99.5


def test_state_text_round_trips(node: Path) -> None:
    sim = sim_backend.SimBackend(node)
    sim.create_vnpu(0, "vir02")
    control.inject_fault(node, 1, codes=[0x80E18402])
    text = (node / state.STATE_FILE).read_text()

    assert state.render(state.parse(text)) == text
    assert "vnpu id=100 phy=0 template=vir02 used=0 aicore=0 memory=0" in text
    assert "codes=80E18402" in text


def test_state_reader_skips_unknown_records_and_fields() -> None:
    text = "format 1\nconfig x\nfuture thing=1\nstatus phy=0 health=1 colour=red\n"

    parsed = state.parse(text)
    assert parsed.status == (state.StatusRecord(0, health=1),)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("config x\n", "format"),
        ("format 2\n", "line 1"),
        ("format 1\nstatus phy=zero\n", "line 2: status.phy"),
        ("format 1\nvnpu id=100 phy=0 template=vir01 used=maybe\n", "line 2: vnpu.used"),
        ("format 1\nvnpu id=100 phy=0\n", "line 2: vnpu"),
        ("format 1\nstatus phy\n", "line 2: status.phy"),
    ],
)
def test_broken_state_names_line_and_field(text: str, field: str) -> None:
    with pytest.raises(errors.SimError) as caught:
        state.parse(text, "state.txt")
    assert caught.value.field == field


def test_a_broken_state_file_fails_clearly_and_service_resumes(node: Path) -> None:
    sim = sim_backend.SimBackend(node)
    path = node / state.STATE_FILE
    good = path.read_text()
    path.write_text(good.replace("status phy=2 health=0", "status phy=2 health=bad"))

    with pytest.raises(errors.SimError, match=r"status\.health"):
        sim.health(0)
    path.write_text(good)
    assert sim.health(0).health is backend.Health.OK


def test_missing_directory_and_state(tmp_path: Path) -> None:
    with pytest.raises(errors.SimError, match="no state yet"):
        sim_backend.SimBackend(tmp_path)
    with pytest.raises(errors.SimError, match="directory"):
        sim_backend.SimBackend(tmp_path / "absent")


def test_editing_chips_yaml_keeps_vnpus_and_load(
    make_node: Callable[..., Path],
) -> None:
    sim_dir = make_node()
    sim = sim_backend.SimBackend(sim_dir)
    sim.create_vnpu(0, "vir02")
    control.set_load(sim_dir, 1, aicore_percent=40)

    make_node(overrides={2: {"temperature": 80, "health": "minor"}})
    again = sim_backend.SimBackend(sim_dir)

    assert [v.vnpu_id for v in again.vnpus(0)] == [100]
    assert again.aicore_percent(1) == 40
    assert (again.temperature(2), again.health(2).health) == (80, backend.Health.MINOR)


def test_shrinking_the_node_drops_vnpus_of_removed_chips(make_node: Callable[..., Path]) -> None:
    sim_dir = make_node()
    sim = sim_backend.SimBackend(sim_dir)
    sim.create_vnpu(3, "vir01")
    sim.create_vnpu(0, "vir01")

    make_node(chips=2)
    again = sim_backend.SimBackend(sim_dir)
    assert len(again.chips()) == 2
    assert [v.id for v in again.store.read().vnpus] == [100]


def test_injection_names_unknown_chips_and_vnpus(node: Path) -> None:
    sim_backend.SimBackend(node)

    with pytest.raises(errors.SimError) as caught:
        control.inject_fault(node, 7, gone=True)
    assert (caught.value.field, caught.value.value) == ("chip", 7)
    with pytest.raises(errors.SimError) as vnpu:
        control.set_vnpu_load(node, 100, aicore_percent=5)
    assert (vnpu.value.field, vnpu.value.value) == ("vnpu", 100)
    with pytest.raises(errors.SimError) as percent:
        control.set_load(node, 0, aicore_percent=130)
    assert (percent.value.field, percent.value.value) == ("aicore", 130)


def test_store_update_writes_nothing_when_the_change_fails(node: Path) -> None:
    sim_backend.SimBackend(node)
    before = (node / state.STATE_FILE).read_text()

    def change(current: state.State) -> tuple[state.State, None]:
        raise errors.SimError("x", "y", 1, "refused")

    with pytest.raises(errors.SimError):
        store.Store(node).update(change)
    assert (node / state.STATE_FILE).read_text() == before
    assert sorted(p.name for p in node.iterdir()) == ["chips.yaml", "state.lock", "state.txt"]
