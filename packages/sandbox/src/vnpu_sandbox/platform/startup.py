"""Bringing a sandbox up: start every component, wait until all are ready, or undo it all.

``up`` builds a ``Startup`` over the sandbox directory and calls ``start`` for each
component, then ``wait_ready``. Every process started is added to the record on disk at
once, so a ``down`` from another terminal (or the cleanup here) finds it even when ``up``
itself is interrupted. Failures are ``StartError`` with the component, what went wrong and
the end of its log, so the message alone explains a failed start.
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from vnpu_sandbox.platform import components, layout, probes, processes

LOG_TAIL_LINES = 15
PROGRESS_SECONDS = 5.0


class StartError(Exception):
    """A component failed to start or to become ready; ``component`` names it."""

    def __init__(self, component: str, problem: str, log: Path | None = None) -> None:
        self.component = component
        self.problem = problem
        self.log = log
        text = f"{component}: {problem}"
        if log is not None:
            text += f"\n  last lines of {log}:\n" + tail(log)
        super().__init__(text)


def tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log file, indented, or a note that it is empty."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"    (cannot read it: {exc})"
    kept = text.splitlines()[-lines:]
    return "\n".join(f"    {line}" for line in kept) if kept else "    (empty)"


class Startup:
    """The processes one ``up`` started, kept in the record as they start."""

    def __init__(
        self, where: layout.Layout, record: layout.Record, tls: ssl.SSLContext | None = None
    ) -> None:
        self.where = where
        self.record = record
        self.tls = tls
        """Trust and client certificate for ``https`` readiness URLs (a real control plane)."""
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._ready_urls: dict[str, str] = {}

    def start(self, component: components.Component) -> None:
        log = self.where.log(component.name)
        record, child = processes.spawn(component.name, component.argv, log)
        self._children[component.name] = child
        self.record.processes.append(record)
        if component.ready_url:
            self._ready_urls[component.name] = component.ready_url
        layout.write(self.where, self.record)

    def check_running(self) -> None:
        """Raise StartError for the first started process that has exited."""
        for name, child in self._children.items():
            code = child.poll()
            if code is not None:
                log = self.where.log(name)
                raise StartError(name, f"exited with status {code} while starting", log)

    def wait_ready(
        self,
        timeout: float,
        names: Sequence[str] | None = None,
        extra: Callable[[], dict[str, str]] | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        """Wait until the named components (all by default) answer and ``extra`` has no problem.

        ``extra`` returns what is still not ready as {what: why}. Raises StartError when a
        process exits, or when ``timeout`` seconds pass, naming what was not ready.
        """
        wanted = {n: u for n, u in self._ready_urls.items() if names is None or n in names}
        deadline = time.monotonic() + timeout
        next_progress = time.monotonic() + PROGRESS_SECONDS
        while True:
            self.check_running()
            wanted = {
                n: u
                for n, u in wanted.items()
                if not probes.http_ok(u, timeout=1.0, context=self.tls)
            }
            problems = {n: f"{u} does not answer 200 yet" for n, u in wanted.items()}
            if extra is not None and not wanted:
                problems.update(extra())
            if not problems:
                return
            now = time.monotonic()
            if now > deadline:
                first, why = next(iter(problems.items()))
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                log = self.where.log(first) if first in self._children else None
                raise StartError(first, f"not ready after {timeout:g} s: {why}{more}", log)
            if progress is not None and now >= next_progress:
                progress(f"waiting for {len(problems)}: " + ", ".join(sorted(problems)[:6]))
                next_progress = now + PROGRESS_SECONDS
            time.sleep(0.1)

    def stop_all(self) -> list[processes.Process]:
        """Stop everything started so far, newest first; returns what had to be killed."""
        killed = processes.stop(list(reversed(self.record.processes)))
        for child in self._children.values():  # reap them: stopped, but not yet waited for
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        return killed
