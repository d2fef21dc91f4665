"""``logs.configure``: what a service prints, read from a real process's stdout line by line.

Each case runs a short Python program in a child process (the configuration is global to a
process: configuring it here would change every later test's logging).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import datetime
from typing import Any

import pytest

PROGRAM = """
import logging, sys
import structlog
from vnpu_service import logs

own = logging.getLogger("uvicorn.error")  # a library that prints lines of its own
own.addHandler(logging.StreamHandler(sys.stdout))
own.propagate = False
{setup}
logs.configure({args})
log = structlog.get_logger("vnpu_test")
structlog.contextvars.bind_contextvars(pod="ml/job-0", node="n1")
log.debug("debug_event")
log.info("pod_placed", chips=[0, 1], note="two\\nlines")
structlog.contextvars.clear_contextvars()
logging.getLogger("grpc").info("grpc says %s", "hello")
logging.getLogger("urllib3.connectionpool").info("quiet by default")
logging.getLogger("urllib3").warning("loud enough")
logging.getLogger("kubernetes.client.rest").debug("quiet by default too")
own.info("uvicorn started")
try:
    raise RuntimeError("boom")
except RuntimeError:
    log.exception("crashed", verb="bind")
    logging.getLogger("grpc").exception("stdlib crash")
"""


def _run(args: str, setup: str = "own.handlers[:] = []") -> list[dict[str, Any]]:
    """Each stdout line of the program, parsed; every line must be one JSON object."""
    program = textwrap.dedent(PROGRAM).format(args=args, setup=setup)
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines, "nothing was logged"
    records = [json.loads(line) for line in lines]
    assert all(isinstance(record, dict) for record in records)
    return records


def _by_event(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {record["event"]: record for record in records}


def _utc_iso(stamp: str) -> bool:
    return stamp.endswith("Z") and datetime.fromisoformat(stamp.replace("Z", "+00:00")) is not None


@pytest.mark.parametrize("direct", [False, True])
def test_structlog_events_are_one_json_object_per_line(direct: bool) -> None:
    events = _by_event(_run(f"'info', direct={direct}"))
    placed = events["pod_placed"]
    assert placed["level"] == "info"
    assert (placed["pod"], placed["node"], placed["chips"]) == ("ml/job-0", "n1", [0, 1])
    assert placed["note"] == "two\nlines"  # kept, escaped inside the one line
    assert _utc_iso(placed["timestamp"])
    # The stdlib path names the logger; the direct path skips that work.
    assert placed.get("logger") == (None if direct else "vnpu_test")
    assert "debug_event" not in events
    crashed = events["crashed"]
    assert (crashed["level"], crashed["verb"]) == ("error", "bind")
    assert "RuntimeError: boom" in crashed["exception"]
    assert "Traceback" in crashed["exception"]


@pytest.mark.parametrize("direct", [False, True])
def test_stdlib_records_go_through_the_same_renderer(direct: bool) -> None:
    records = _run(f"'info', direct={direct}")
    events = _by_event(records)
    grpc = events["grpc says hello"]
    assert (grpc["logger"], grpc["level"]) == ("grpc", "info")
    assert _utc_iso(grpc["timestamp"])
    assert events["loud enough"]["level"] == "warning"
    assert "quiet by default" not in events
    assert "quiet by default too" not in events
    crash = events["stdlib crash"]
    assert "RuntimeError: boom" in crash["exception"]
    assert not any("pod" in record for record in records if record["event"] != "pod_placed")


def test_a_library_handler_prints_plain_text_unless_adopted() -> None:
    program = textwrap.dedent(PROGRAM).format(args="'info'", setup="")
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=20, check=False
    )
    assert "uvicorn started" in done.stdout.splitlines()  # the library's own plain line
    adopted = _by_event(_run("'info', adopt=('uvicorn', 'uvicorn.error')", setup=""))
    assert adopted["uvicorn started"]["logger"] == "uvicorn.error"


def test_debug_shows_debug_events_and_quiet_can_be_changed() -> None:
    events = _by_event(_run("'DEBUG', quiet=('urllib3',)"))
    assert events["debug_event"]["level"] == "debug"
    assert "quiet by default too" in events  # kubernetes is not held back any more
    assert "quiet by default" not in events  # urllib3 still is


@pytest.mark.parametrize("direct", [False, True])
def test_warning_drops_info_from_both_paths(direct: bool) -> None:
    events = _by_event(_run(f"'warning', direct={direct}"))
    assert set(events) == {"loud enough", "crashed", "stdlib crash"}


def test_an_unknown_level_is_refused_by_name() -> None:
    from vnpu_service import logs

    with pytest.raises(ValueError, match=r"log level 'verbose': not one of debug, info"):
        logs.configure("verbose")


def test_sigusr1_writes_every_threads_stack_and_the_service_goes_on() -> None:
    program = textwrap.dedent(
        """
        import os, signal, sys, threading
        from vnpu_service import logs

        logs.configure("info")
        parked = threading.Event()

        def worker_waits_here() -> None:
            parked.wait()

        worker = threading.Thread(target=worker_waits_here)
        worker.start()
        os.kill(os.getpid(), signal.SIGUSR1)
        parked.set()
        worker.join()
        print("still running")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "still running\n"
    assert "most recent call first" in done.stderr
    assert "worker_waits_here" in done.stderr  # the other thread's stack too
