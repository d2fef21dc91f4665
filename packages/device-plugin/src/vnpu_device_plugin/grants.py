"""The grant book: every device this plugin handed to a container, kept until its pod is done.

The vNPU ledger names the vNPUs the plugin created; it says nothing of whole chips, soft
slices or the vNPUs ascend-docker-runtime creates in runtime mode, and the pod annotations
schedulers count can be edited by whoever may edit the pod. So Allocate writes one
``Grant`` per device it hands out, durably, before it answers: the pod (UID, namespace,
name), the container and whether it is a run-to-completion init container, the chip, what
of it (a whole chip; a vNPU of a template, with its id in managed mode; a soft slice of
memory and core percent) and kubelet's device ids of the container.

* ``holdings`` checks every new decision against the book before anything is granted;
* ``reclaim`` drops the grants of pods that are done, with the checks it applies to vNPUs,
  and will not destroy a vNPU a live pod's grant names;
* ``publisher`` publishes the book on the node (``vnpu.io/granted-<CW>``, ``holdings.encode``)
  so a scheduler can count what was really granted;
* after a restart, the device ids tell kubelet's listing of a pod from a pod created again
  under its name (``plugin`` seeds ``podresources.Handouts`` from them).

One JSON file, ``<state dir>/grants.json`` (format ``vnpu-device-plugin-grants/v1``),
written like the ledger (``vnpu_npu.statefile``, kept in memory by ``statefile.Store``):
replaced whole by a rename, so a killed plugin finds either the old or the new book, and
written before the Allocate answers. A record is checked as a ledger record is
(``vnpu_npu.statefile.fields``), and one that cannot be read is refused with its index. Adding
grants is fsync'ed too, but by a thread of its own right after (``flush``), not on the
Allocate path: a file and directory fsync cost 12 ms at the median and 46 ms at p99 on a
shared disk, more than the rest of a whole-chip Allocate. A power cut in those
milliseconds loses the newest grants; the containers that got them are then still listed
by kubelet's PodResources, which ``holdings`` counts as well, and in managed mode the
ledger, fsync'ed before the vNPU exists, names their vNPUs. Removing grants is never
fsync'ed (a lost removal only keeps a done pod's grant until the next pass drops it
again). ``on_change`` is called after every change (the publisher's ``poke``).
Thread-safe; raises ``errors.LedgerError``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

import structlog

from vnpu_core import granted
from vnpu_device_plugin import errors, statefile
from vnpu_npu import errors as npu_errors
from vnpu_npu import statefile as npu_statefile

log = structlog.get_logger(__name__)

FILE = "grants.json"
FORMAT = "vnpu-device-plugin-grants/v1"
NO_VNPU = -1  # ``vnpu_id`` of a grant that is not a vNPU this plugin created


Kind = granted.Kind  # whole: the chip for one container; vnpu: a hard vNPU; soft: a slice


@dataclass(frozen=True, slots=True)
class Grant:
    """One device one container got."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    init: bool  # a run-to-completion init container
    chip: int  # physical id
    chip_uuid: str
    kind: Kind
    template: str  # the vNPU template; "" for whole chips and soft slices
    vnpu_id: int  # the vNPU this plugin created (managed mode), else NO_VNPU
    memory_mib: int  # soft slices: the quota; whole chips and vNPUs: what the decision said
    cores: int  # soft slices: core percent; else what the decision said
    device_ids: tuple[str, ...]  # kubelet's device ids of the container
    granted_at: float  # unix seconds

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.pod}"

    @property
    def vnpu(self) -> tuple[int, int] | None:
        """(chip, vNPU id) of a vNPU this plugin created, else None."""
        return (self.chip, self.vnpu_id) if self.vnpu_id != NO_VNPU else None


_FIELD_TYPES: npu_statefile.FieldTypes = {
    "pod_uid": str,
    "namespace": str,
    "pod": str,
    "container": str,
    "init": bool,
    "chip": int,
    "chip_uuid": str,
    "kind": str,
    "template": str,
    "vnpu_id": int,
    "memory_mib": int,
    "cores": int,
    "device_ids": list,
    "granted_at": (int, float),
}


def _grant(path: Path, index: int, raw: object) -> Grant:
    values = npu_statefile.fields(path, index, raw, _FIELD_TYPES)
    kind = npu_statefile.member(path, index, values, "kind", Kind)
    ids = values["device_ids"]
    if not all(isinstance(i, str) for i in ids):
        raise npu_errors.BadRecord(
            str(path),
            index,
            "device_ids",
            f"records[{index}].device_ids holds a value that is not a string",
        )
    values.update(kind=kind, device_ids=tuple(ids), granted_at=float(values["granted_at"]))
    return Grant(**values)


def _raw(grant: Grant) -> dict[str, object]:
    return {
        **dataclasses.asdict(grant),
        "kind": grant.kind.value,
        "device_ids": list(grant.device_ids),
    }


class Book(statefile.Store[Grant]):
    """The grant book of ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        self.on_change: Callable[[], None] = lambda: None
        super().__init__(state_dir / FILE)
        self._unsynced = threading.Event()
        self._flusher: threading.Thread | None = None

    def _read(self) -> tuple[Grant, ...]:
        raw = npu_statefile.read(self.path, FORMAT, "grant book")
        return tuple(_grant(self.path, i, item) for i, item in enumerate(raw))

    def _write(self, grants: tuple[Grant, ...], *, durable: bool) -> None:
        ordered = sorted(grants, key=lambda g: (g.chip, g.pod_uid, g.container, g.vnpu_id))
        npu_statefile.write(self.path, FORMAT, [_raw(g) for g in ordered], durable=durable)

    def put(self, pod_uid: str, containers: Collection[str], grants: Iterable[Grant]) -> None:
        """Record ``grants`` in place of any the pod's ``containers`` had (on disk on return,
        fsync'ed right after)."""
        added = tuple(grants)
        with self._lock:
            kept = tuple(
                g for g in self._records if g.pod_uid != pod_uid or g.container not in containers
            )
            self._commit(kept + added, durable=False)
            self._unsynced.set()
            if self._flusher is None:
                self._flusher = threading.Thread(
                    target=self._flush_loop, name="vnpu-dp-grants-sync", daemon=True
                )
                self._flusher.start()
        self.on_change()

    def _flush_loop(self) -> None:
        while True:
            self._unsynced.wait()
            self.flush()

    def flush(self) -> None:
        """Make what ``put`` wrote reach the disk (file and directory fsync'ed); logged on failure."""
        if not self._unsynced.is_set():
            return
        self._unsynced.clear()
        try:
            self._sync()
        except errors.LedgerError as exc:
            self._unsynced.set()
            log.error("grants_not_synced", path=str(self.path), error=exc.problem)
            time.sleep(1.0)  # the disk refuses: try again in a second, not in a loop

    def remove(self, *grants: Grant) -> None:
        """Forget grants (not fsync'ed: see the module docstring)."""
        if self._drop(set(grants)):
            self.on_change()
