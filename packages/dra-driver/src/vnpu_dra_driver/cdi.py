"""CDI spec files: what a container using a prepared claim is given, as the runtime reads it.

``prepare`` writes one spec per claim, ``<cdi dir>/npu.vnpu.io-<claim uid>.json``, of kind
``npu.vnpu.io/claim``, and hands the kubelet one CDI device id per allocated device,
``npu.vnpu.io/claim=<claim uid>-<device>``. The container runtime applies the spec's own
``containerEdits`` (the chips' shared control nodes) and each named device's.

The environment and mounts are what ``vnpu_device_plugin.environment`` hands out in classic
mode's managed mode (the driver created the vNPU, so the runtime must not create another)::

    whole chips   ASCEND_VISIBLE_DEVICES=<physical ids>
    vNPUs         ASCEND_VISIBLE_DEVICES=<vNPU ids>, ASCEND_RUNTIME_OPTIONS=VIRTUAL
    soft slices   ASCEND_VISIBLE_DEVICES=<physical ids>, NPU_MEM_QUOTA (MiB), NPU_PRIORITY,
                  NPU_GLOBAL_SHM_PATH, NPU_LOCAL_SHM_PATH (hami-vnpu-core's variables), and
                  hami-vnpu-core's mounts: read-only npu-smi, the driver's install info,
                  libraries and version, the hami-vnpu-core directory and its ld.so.preload
                  over /etc/ld.so.preload; read-write the shared region and the request's
                  own directory ``<hami-core dir>/containers/<claim uid>_<request>``

A variable holds every device of the claim *request*: each device of a request carries the
whole request's list, so a container that names the request sees all of them whichever
device's edits the runtime applies last (the mounts of a request's devices are the same, so
the last one applied changes nothing). A claim is the unit DRA shares, so every container of
every pod using one soft request shares its directory, as they share its quota. Device
nodes: ``/dev/davinci<phy>`` for a whole chip or a soft slice, ``/dev/vdavinci<vNPU id>`` for
a vNPU; the spec adds ``/dev/davinci_manager``, ``/dev/devmm_svm`` and ``/dev/hisi_hdc`` once.
Mounts are bind mounts with the options the CRI gives a device plugin's mounts (``rbind``,
``rprivate``, ``ro``/``rw``). The spec's annotations name the claim, so a spec found after a
restart says whose it is. ``spec`` is pure; ``write``, ``remove`` and ``claims`` do the file
I/O (a write is a rename over the old file).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vnpu_core import draclasses
from vnpu_dra_driver import devices, slices
from vnpu_npu import runtime

Json = dict[str, Any]
VERSION = "0.6.0"
KIND = draclasses.CDI_KIND
PREFIX = f"{slices.DRIVER}-"
CLAIM_ANNOTATION = f"{slices.DRIVER}/claim"
UID_ANNOTATION = f"{slices.DRIVER}/claim-uid"
CONTROL_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")

VISIBLE_DEVICES = runtime.VISIBLE_DEVICES
RUNTIME_OPTIONS = runtime.RUNTIME_OPTIONS
VIRTUAL = runtime.VIRTUAL
MEM_QUOTA = runtime.MEM_QUOTA
PRIORITY = runtime.PRIORITY
GLOBAL_SHM_PATH = runtime.GLOBAL_SHM_PATH
LOCAL_SHM_PATH = runtime.LOCAL_SHM_PATH
SHARED_MOUNT = runtime.SHARED_MOUNT
CORE_MOUNT = runtime.CORE_MOUNT
LOCAL_MOUNT = runtime.LOCAL_MOUNT
PRELOAD = runtime.PRELOAD
DRIVER_FILES = runtime.DRIVER_FILES


@dataclass(frozen=True, slots=True)
class SoftPaths:
    """Host directories of hami-vnpu-core on a node that shares its chips as soft slices."""

    core_dir: Path  # libvnpu.so, ld.so.preload and the per-request directories
    shared_dir: Path  # the shared region (each chip's global registry)

    @property
    def requests_dir(self) -> Path:
        return self.core_dir / "containers"

    def request_dir(self, claim_uid: str, request: str) -> Path:
        """The directory the containers of one soft request share (``/hami-vnpu-shmem``)."""
        return self.requests_dir / f"{claim_uid}_{request}"

    def claim_dirs(self, claim_uid: str) -> list[Path]:
        """The directories of the claim's requests that exist."""
        if not claim_uid or not self.requests_dir.is_dir():
            return []
        prefix = f"{claim_uid}_"
        return sorted(p for p in self.requests_dir.iterdir() if p.name.startswith(prefix))


@dataclass(frozen=True, slots=True)
class Given:
    """One prepared device of a claim: its request, its target and what was made for it."""

    request: str
    target: devices.Target
    vnpu_id: int | None = None  # template devices
    memory_mib: int = 0  # soft devices: the memory consumed
    core_percent: int = 0  # soft devices: the core share consumed
    share_id: str | None = None

    @property
    def visible(self) -> str:
        return str(self.vnpu_id) if self.vnpu_id is not None else str(self.target.phy)

    @property
    def node(self) -> str:
        if self.vnpu_id is not None:
            return f"/dev/vdavinci{self.vnpu_id}"
        return f"/dev/davinci{self.target.phy}"


def device_name(claim_uid: str, device: str) -> str:
    return f"{claim_uid}-{device}"


def device_id(claim_uid: str, device: str) -> str:
    """The fully qualified CDI device name the kubelet passes to the runtime."""
    return draclasses.cdi_id(claim_uid, device)


def path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{PREFIX}{claim_uid}.json"


def env(request: Sequence[Given]) -> list[str]:
    """The variables every device of one request carries (``prepare`` made the kinds agree):
    a soft request's quota, priority and registry are its first device's, as HAMi's."""
    visible = ",".join(g.visible for g in request)
    first = request[0]
    if first.target.kind == "template":
        return [f"{VISIBLE_DEVICES}={visible}", f"{RUNTIME_OPTIONS}={VIRTUAL}"]
    if first.target.kind == "soft":
        return [
            f"{VISIBLE_DEVICES}={visible}",
            f"{MEM_QUOTA}={first.memory_mib}",
            f"{PRIORITY}={first.core_percent}",
            f"{GLOBAL_SHM_PATH}={SHARED_MOUNT}/{first.target.phy}_global_registry",
            f"{LOCAL_SHM_PATH}={LOCAL_MOUNT}/vnpu_local_shmem",
        ]
    return [f"{VISIBLE_DEVICES}={visible}"]


def mount(container_path: str, host_path: Path | str, *, read_only: bool) -> Json:
    """A bind mount, as the CRI makes a device plugin's (``rbind``, ``rprivate``)."""
    return {
        "hostPath": str(host_path),
        "containerPath": container_path,
        "type": "bind",
        "options": ["rbind", "rprivate", "ro" if read_only else "rw"],
    }


def mounts(paths: SoftPaths, claim_uid: str, request: str) -> list[Json]:
    """hami-vnpu-core's mounts for the containers of one soft request."""
    found = [mount(p, p, read_only=True) for p in DRIVER_FILES]
    found += [
        mount(CORE_MOUNT, paths.core_dir, read_only=True),
        mount(PRELOAD, paths.core_dir / "ld.so.preload", read_only=True),
        mount(SHARED_MOUNT, paths.shared_dir, read_only=False),
        mount(LOCAL_MOUNT, paths.request_dir(claim_uid, request), read_only=False),
    ]
    return found


def spec(
    namespace: str,
    claim: str,
    claim_uid: str,
    given: Sequence[Given],
    soft: SoftPaths | None = None,
) -> Json:
    """The CDI spec of one claim's prepared devices; ``soft`` is needed when one is a soft
    slice (ValueError without it)."""
    by_request: dict[str, list[Given]] = {}
    for item in given:
        by_request.setdefault(item.request, []).append(item)
    entries = []
    for item in given:
        edits: Json = {
            "env": env(by_request[item.request]),
            "deviceNodes": [{"path": item.node}],
        }
        if item.target.kind == "soft":
            if soft is None:
                raise ValueError(f"soft device {item.target.device} without hami-vnpu-core paths")
            edits["mounts"] = mounts(soft, claim_uid, item.request)
        entries.append(
            {"name": device_name(claim_uid, item.target.device), "containerEdits": edits}
        )
    return {
        "cdiVersion": VERSION,
        "kind": KIND,
        "annotations": {CLAIM_ANNOTATION: f"{namespace}/{claim}", UID_ANNOTATION: claim_uid},
        "devices": entries,
        "containerEdits": {"deviceNodes": [{"path": p} for p in CONTROL_NODES]},
    }


def write(cdi_dir: Path, claim_uid: str, document: Json) -> Path:
    """Write ``document`` as the claim's spec (a rename over the old one); OSError on failure."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    target = path(cdi_dir, claim_uid)
    temporary = target.with_name(f".{target.name}.tmp")
    temporary.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temporary, target)
    return target


def remove(cdi_dir: Path, claim_uid: str) -> None:
    path(cdi_dir, claim_uid).unlink(missing_ok=True)


def claims(cdi_dir: Path) -> dict[str, str]:
    """The claims this driver has specs for: uid -> ``namespace/name`` (from the annotations)."""
    found: dict[str, str] = {}
    if not cdi_dir.is_dir():
        return found
    for candidate in cdi_dir.glob(f"{PREFIX}*.json"):
        try:
            document = json.loads(candidate.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        notes = document.get("annotations") if isinstance(document, dict) else None
        if isinstance(notes, dict) and isinstance(notes.get(UID_ANNOTATION), str):
            found[notes[UID_ANNOTATION]] = str(notes.get(CLAIM_ANNOTATION, ""))
    return found
