"""The simulated node's state on disk: locked reads, atomic updates, creation from chips.yaml.

Several processes share one directory (the device plugin and the exporter of a node, the
CLI, the stand-in libdcmi.so). Every access takes ``fcntl.flock`` on ``state.lock``
(shared to read, exclusive to change); a change writes ``state.txt.<pid>.tmp`` and
renames it over ``state.txt``, so a reader never sees half a file. The lock file is
separate because the rename replaces ``state.txt``'s inode. The simulated backend, the
fault and load functions (``sim.control``) and the CLI go through ``Store``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from vnpu_core import catalog, topology
from vnpu_npu import backend, errors, limits
from vnpu_npu.sim import config, state

LOCK_FILE = "state.lock"
T = TypeVar("T")

_DEFAULT_POWER_DW = {True: 120, False: 900}  # 12 W per 310P chip, 90 W per 910 chip
_DEFAULT_TEMP = 45


class Store:
    """Locked access to ``sim_dir/state.txt``."""

    def __init__(self, sim_dir: str | os.PathLike[str]) -> None:
        self.sim_dir = Path(sim_dir)
        self.path = self.sim_dir / state.STATE_FILE

    @contextmanager
    def _locked(self, mode: int) -> Iterator[None]:
        try:
            fd = os.open(self.sim_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise errors.SimError(
                str(self.sim_dir), "directory", str(self.sim_dir), str(exc)
            ) from exc
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)  # closing drops the lock

    def _read_unlocked(self) -> state.State:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            problem = "no state yet: run `python -m vnpu_npu.sim DIR init`"
            raise errors.SimError(str(self.path), "file", str(self.path), problem) from exc
        return state.parse(text, str(self.path))

    def _write_unlocked(self, current: state.State) -> None:
        tmp = self.path.with_name(f"{state.STATE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(state.render(current), encoding="utf-8")
        os.replace(tmp, self.path)

    def read(self) -> state.State:
        with self._locked(fcntl.LOCK_SH):
            return self._read_unlocked()

    def update(self, change: Callable[[state.State], tuple[state.State, T]]) -> T:
        """Apply ``change`` under the exclusive lock; it returns the new state and a result.

        ``change`` may raise; then nothing is written.
        """
        with self._locked(fcntl.LOCK_EX):
            current = self._read_unlocked()
            new, result = change(current)
            if new != current:
                self._write_unlocked(new)
            return result

    def ensure(self, cfg: config.SimConfig) -> state.State:
        """The state, created from ``cfg`` or rebuilt when chips.yaml changed since."""
        with self._locked(fcntl.LOCK_EX):
            current = self._read_unlocked() if self.path.exists() else None
            if current is not None and current.config == cfg.digest:
                return current
            new = rebuild(current, cfg)
            self._write_unlocked(new)
            return new


def _uuid(seed: str, phy: int) -> str:
    digest = hashlib.sha256(f"{seed}/{phy}".encode()).digest()
    words = tuple(int.from_bytes(digest[i : i + 4], "big") for i in range(0, 20, 4))
    return backend.format_uuid(words)


def _chips_per_card(kind: topology.ServerKind) -> int:
    return 2 if kind in (topology.ServerKind.DUO_300I, topology.ServerKind.A3_PAIRS) else 1


def _media(model: catalog.ChipModel, override: config.Override) -> tuple[int, ...] | None:
    if override.media is None:
        return model.media.as_tuple() if model.media is not None else None
    base = dict(
        zip(catalog.MEDIA_ENGINES, model.media.as_tuple() if model.media else (0,) * 6, strict=True)
    )
    base.update(override.media)
    return tuple(base[engine] for engine in catalog.MEDIA_ENGINES)


def fresh(cfg: config.SimConfig) -> state.State:
    """The state of a node just built from ``cfg``: no vNPUs, no load."""
    model = cfg.model
    per_card = _chips_per_card(cfg.server)
    ddr = limits.is_310p(model.chip_name)
    chips, status = [], []
    for phy in range(cfg.chips):
        o = cfg.overrides.get(phy, config.Override())
        ids = limits.id_range(model.chip_name, phy)
        chips.append(
            state.ChipRecord(
                phy=phy,
                card=phy // per_card,
                device=phy % per_card,
                logic=o.logic if o.logic is not None else phy,
                name=model.chip_name,
                type="Ascend",
                version="V1",
                model=model.name,
                aicore=o.aicore or model.aicore,
                aicpu=o.aicpu if o.aicpu is not None else model.aicpu,
                memory=o.memory_mib or model.memory_capacity_mib,
                memkind=backend.MemoryKind.DDR if ddr else backend.MemoryKind.HBM,
                vnpus=model.max_vnpus,
                idbase=ids.start,
                idcount=len(ids),
                uuid=o.uuid or _uuid(cfg.seed, phy),
                bdf=o.bdf or backend.format_bdf(0, 1 + phy, 0, 0),
                media=_media(model, o),
            )
        )
        status.append(_status(state.StatusRecord(phy, power_dw=_DEFAULT_POWER_DW[ddr]), o))
    templates = tuple(
        state.TemplateRecord(
            t.name, t.aicore, t.aicpu, t.memory_mib, t.media.as_tuple() if t.media else None
        )
        for t in model.templates
    )
    return state.State(cfg.digest, tuple(chips), templates, tuple(status))


def _status(record: state.StatusRecord, o: config.Override) -> state.StatusRecord:
    """``record`` with the settings chips.yaml names for this chip."""
    return state.StatusRecord(
        record.phy,
        health=int(o.health) if o.health is not None else record.health,
        gone=o.gone if o.gone is not None else record.gone,
        codes=o.codes if o.codes is not None else record.codes,
        temp=o.temperature if o.temperature is not None else record.temp,
        power_dw=round(o.power_watts * 10) if o.power_watts is not None else record.power_dw,
        aicore=record.aicore,
        memory=record.memory,
    )


def rebuild(old: state.State | None, cfg: config.SimConfig) -> state.State:
    """A state for ``cfg`` that keeps what ``old`` had on chips and templates that remain."""
    new = fresh(cfg)
    if old is None:
        return new
    phys = {c.phy for c in new.chips}
    names = {t.name for t in new.templates}
    status = tuple(
        _status(old.status_of(s.phy), cfg.overrides.get(s.phy, config.Override()))
        if old.chip(s.phy)
        else s
        for s in new.status
    )
    vnpus = tuple(v for v in old.vnpus if v.phy in phys and v.template in names)
    return state.State(new.config, new.chips, new.templates, status, vnpus)
