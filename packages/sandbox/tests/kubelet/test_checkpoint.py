from __future__ import annotations

import json
from pathlib import Path

import pytest

from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2
from vnpu_sandbox.kubelet import checkpoint, errors


def _state() -> checkpoint.Checkpoint:
    response = api_pb2.ContainerAllocateResponse(
        envs={"A": "1"}, cdi_devices=[api_pb2.CDIDevice(name="x.io/d=0")]
    )
    entry = checkpoint.Entry("uid-1", "main", "x.io/d", {"-1": ("d0",), "1": ("d3",)}, response)
    return checkpoint.Checkpoint((entry,), {"x.io/d": ("d0", "d1", "d3")})


def test_round_trip_keeps_entries_and_plugin_answers(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.CHECKPOINT_NAME
    checkpoint.save(path, _state())
    loaded = checkpoint.load(path)
    assert loaded is not None
    assert loaded.registered == {"x.io/d": ("d0", "d1", "d3")}
    (entry,) = loaded.entries
    assert entry.ids() == ("d0", "d3")
    assert entry.response.envs["A"] == "1"
    assert entry.response.cdi_devices[0].name == "x.io/d=0"


def test_file_uses_the_kubelet_layout(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.CHECKPOINT_NAME
    checkpoint.save(path, _state())
    document = json.loads(path.read_text())
    assert set(document) == {"Data", "Checksum"}
    (entry,) = document["Data"]["PodDeviceEntries"]
    assert entry["PodUID"] == "uid-1"
    assert entry["DeviceIDs"] == {"-1": ["d0"], "1": ["d3"]}
    assert document["Data"]["RegisteredDevices"] == {"x.io/d": ["d0", "d1", "d3"]}


def test_missing_file_is_no_checkpoint(tmp_path: Path) -> None:
    assert checkpoint.load(tmp_path / "absent") is None


def test_tampered_file_is_refused_with_the_path(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.CHECKPOINT_NAME
    checkpoint.save(path, _state())
    path.write_text(path.read_text().replace("uid-1", "uid-2"))
    with pytest.raises(errors.CheckpointError, match="checksum mismatch") as info:
        checkpoint.load(path)
    assert info.value.path == str(path)


def test_garbage_is_refused(tmp_path: Path) -> None:
    path = tmp_path / checkpoint.CHECKPOINT_NAME
    path.write_text("{not json")
    with pytest.raises(errors.CheckpointError, match="not a checkpoint document"):
        checkpoint.load(path)
