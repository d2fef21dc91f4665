"""The device manager's checkpoint file: which container holds which device ids.

``devicemanager`` writes it after every change and reads it when the kubelet (re)starts, so
device assignments survive a kubelet restart exactly as they do with the real kubelet. The
file sits in the device plugin directory under the kubelet's name,
``kubelet_internal_checkpoint``, with the kubelet's layout::

    {"Data": {"PodDeviceEntries": [{"PodUID", "ContainerName", "ResourceName",
                                    "DeviceIDs": {"<NUMA node or -1>": [ids]},
                                    "AllocResp": "<base64 ContainerAllocateResponse>"}],
              "RegisteredDevices": {"<resource>": [ids]}},
     "Checksum": <crc32 of the canonical Data JSON>}

The checksum is this simulator's own (the kubelet hashes a Go dump of the structure), so a
real kubelet would not accept the file; device plugins that read pod -> device mappings from
it see the same fields they see on a real node.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import message

from vnpu_kubelet_api.deviceplugin.v1beta1 import api_pb2
from vnpu_sandbox.kubelet import errors

CHECKPOINT_NAME = "kubelet_internal_checkpoint"
NO_TOPOLOGY = "-1"


@dataclass(frozen=True)
class Entry:
    """The devices of one resource given to one container, with the plugin's Allocate answer."""

    pod_uid: str
    container: str
    resource: str
    device_ids: dict[str, tuple[str, ...]]
    """Device ids by NUMA node (``"-1"`` for devices without topology)."""
    response: api_pb2.ContainerAllocateResponse = field(compare=False)

    def ids(self) -> tuple[str, ...]:
        """Every device id of the entry, sorted, each once."""
        return tuple(sorted({i for ids in self.device_ids.values() for i in ids}))


@dataclass(frozen=True)
class Checkpoint:
    entries: tuple[Entry, ...] = ()
    registered: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Resource name -> healthy device ids at the time of writing."""


def _data(checkpoint: Checkpoint) -> dict[str, Any]:
    entries = [
        {
            "PodUID": e.pod_uid,
            "ContainerName": e.container,
            "ResourceName": e.resource,
            "DeviceIDs": {node: list(ids) for node, ids in sorted(e.device_ids.items())},
            "AllocResp": base64.b64encode(
                e.response.SerializeToString(deterministic=True)
            ).decode(),
        }
        for e in checkpoint.entries
    ]
    registered = {r: sorted(ids) for r, ids in sorted(checkpoint.registered.items())}
    return {"PodDeviceEntries": entries, "RegisteredDevices": registered}


def _checksum(data: dict[str, Any]) -> int:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return zlib.crc32(canonical)


def encode(checkpoint: Checkpoint) -> bytes:
    data = _data(checkpoint)
    return json.dumps({"Data": data, "Checksum": _checksum(data)}, indent=1).encode()


def decode(raw: bytes, path: str) -> Checkpoint:
    """Parse checkpoint bytes; raises ``CheckpointError`` naming what is wrong."""
    try:
        document = json.loads(raw)
        data = document["Data"]
        checksum = document["Checksum"]
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.CheckpointError(path, f"not a checkpoint document ({exc})") from exc
    if _checksum(data) != checksum:
        raise errors.CheckpointError(path, "checksum mismatch, the file was changed or truncated")
    try:
        entries = []
        for item in data["PodDeviceEntries"]:
            response = api_pb2.ContainerAllocateResponse()
            response.ParseFromString(base64.b64decode(item["AllocResp"], validate=True))
            entries.append(
                Entry(
                    pod_uid=str(item["PodUID"]),
                    container=str(item["ContainerName"]),
                    resource=str(item["ResourceName"]),
                    device_ids={str(k): tuple(map(str, v)) for k, v in item["DeviceIDs"].items()},
                    response=response,
                )
            )
        registered = {str(k): tuple(map(str, v)) for k, v in data["RegisteredDevices"].items()}
    except (KeyError, TypeError, AttributeError, binascii.Error, message.DecodeError) as exc:
        raise errors.CheckpointError(path, f"malformed entry ({exc!r})") from exc
    return Checkpoint(tuple(entries), registered)


def save(path: Path, checkpoint: Checkpoint) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(encode(checkpoint))
    os.replace(tmp, path)


def load(path: Path) -> Checkpoint | None:
    """The checkpoint at ``path``, None when there is none; ``CheckpointError`` when unreadable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise errors.CheckpointError(str(path), exc.strerror or str(exc)) from exc
    return decode(raw, str(path))
