"""Starting and stopping the sandbox's processes, identified by PID and start time.

``up`` starts each part with ``spawn`` (its own session, output to its log file) and keeps
the returned ``Process`` records in the sandbox's state file; ``down`` and ``status`` read
them back. A PID alone could name an unrelated process once the original has exited and the
number was reused, so a record also holds the process's start time as the kernel reports it
(``/proc/<pid>/stat`` field 22); a record whose PID now has another start time is gone, and
``stop`` never signals it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Process:
    """One started process: a name for people, its PID and start time, its command and log."""

    name: str
    pid: int
    start_time: int
    argv: tuple[str, ...]
    log: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Process:
        return cls(
            name=str(raw["name"]),
            pid=int(raw["pid"]),
            start_time=int(raw["start_time"]),
            argv=tuple(str(a) for a in raw["argv"]),
            log=str(raw["log"]),
        )


def start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` in clock ticks, or None when no such process runs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields and fields[0] == "Z":  # a zombie has exited; only its parent's wait is missing
        return None
    return int(fields[19]) if len(fields) > 19 else None


def alive(process: Process) -> bool:
    """Whether the recorded process still runs (same PID and the same start time)."""
    return start_time(process.pid) == process.start_time


def spawn(
    name: str,
    argv: Sequence[str],
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> tuple[Process, subprocess.Popen[bytes]]:
    """Start ``argv`` in a session of its own, stdout and stderr appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    started = start_time(child.pid)
    record = Process(name, child.pid, started if started is not None else -1, tuple(argv), str(log))
    return record, child


LAST = frozenset({"etcd"})
"""Stopped once everything else has exited: kube-apiserver's own shutdown waits for etcd, and
would otherwise sit out the whole grace period before being killed."""


def stop(processes: Sequence[Process], grace: float = 10.0) -> list[Process]:
    """SIGTERM every live process, SIGKILL those still running after ``grace`` seconds; the
    ``LAST`` ones (etcd) only after the others are gone.

    Returns the processes that had to be killed. Records of processes that are gone (or
    whose PID now belongs to another process) are skipped: nothing else is ever signalled.
    """
    first = [p for p in processes if p.name not in LAST]
    last = [p for p in processes if p.name in LAST]
    return _stop(first, grace) + _stop(last, grace)


def _stop(processes: Sequence[Process], grace: float) -> list[Process]:
    running = [p for p in processes if alive(p)]
    for process in running:
        _signal(process, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while running and time.monotonic() < deadline:
        running = [p for p in running if alive(p)]
        if running:
            time.sleep(0.05)
    for process in running:
        _signal(process, signal.SIGKILL)
    return running


def _signal(process: Process, number: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, number)
