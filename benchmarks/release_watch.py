"""What ``bench_release`` watches: the node's vNPUs on its simulated chips, and the pods.

``VnpuWatch`` records when each vNPU of a simulated node was first seen gone: the state file
(``vnpu_npu.sim``) is replaced by a rename on every change, so its inode and mtime are
checked every ``POLL_SECONDS`` and the vNPUs read through the simulated backend, as the
tests read them, only when the file moved. ``PodWatch`` lists and watches one namespace's
pods: which run (by name, with their uid), and when each uid left the API (DELETED).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from vnpu_npu.sim import backend as sim_backend
from vnpu_npu.sim import state as sim_state

Json = dict[str, Any]
POLL_SECONDS = 0.005


class VnpuWatch:
    """The node's vNPUs: when each one was last seen and when it was first seen gone.

    The state file is replaced (renamed over) on every change, so its inode and mtime are
    checked every ``POLL_SECONDS`` and the vNPUs read through the simulated backend only
    when they moved.
    """

    def __init__(self, sim_dir: Path) -> None:
        self.sim = sim_backend.SimBackend(sim_dir)
        self.path = sim_dir / sim_state.STATE_FILE
        self.present: set[int] = set()
        self.gone_at: dict[int, float] = {}
        self.reads = 0
        self.guard = threading.Lock()
        self.changed = threading.Condition(self.guard)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="vnpu-watch", daemon=True)

    def __enter__(self) -> VnpuWatch:
        self.present = self._read()
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)

    def _read(self) -> set[int]:
        self.reads += 1
        return {v.vnpu_id for chip in self.sim.chips() for v in self.sim.vnpus(chip.phy_id)}

    def _run(self) -> None:
        seen: tuple[int, int] | None = None
        while not self.stopping.wait(POLL_SECONDS):
            try:
                stat = os.stat(self.path)
            except FileNotFoundError:
                continue
            if (stat.st_ino, stat.st_mtime_ns) == seen:
                continue
            seen = (stat.st_ino, stat.st_mtime_ns)
            now_present = self._read()
            now = time.monotonic()
            with self.changed:
                for vnpu in self.present - now_present:
                    self.gone_at.setdefault(vnpu, now)
                for vnpu in now_present - self.present:
                    self.gone_at.pop(vnpu, None)  # an id made again: a new vNPU
                self.present = now_present
                self.changed.notify_all()

    def wait_present(self, vnpus: Sequence[int], deadline: float) -> bool:
        """Until the watch has read every one of ``vnpus`` on the chips (made again after an
        earlier round: its old gone time dropped)."""
        with self.changed:
            return self.changed.wait_for(
                lambda: all(v in self.present and v not in self.gone_at for v in vnpus),
                max(deadline - time.monotonic(), 0),
            )

    def wait_gone(self, vnpus: Sequence[int], deadline: float) -> bool:
        with self.changed:
            return self.changed.wait_for(
                lambda: all(v in self.gone_at for v in vnpus), max(deadline - time.monotonic(), 0)
            )


class PodWatch:
    """The namespace's pods: Running ones, and when each pod left the API (DELETED)."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.core = kubernetes.client.CoreV1Api(api)
        self.namespace = namespace
        self.running: dict[str, str] = {}  # name -> uid
        self.deleted_at: dict[str, float] = {}  # uid -> when
        self.guard = threading.Lock()
        self.changed = threading.Condition(self.guard)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="pod-watch", daemon=True)

    def __enter__(self) -> PodWatch:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()

    def _see(self, kind: str, pod: Json) -> None:
        meta = pod["metadata"]
        name, uid = meta["name"], meta["uid"]
        with self.changed:
            if kind == "DELETED":
                self.deleted_at.setdefault(uid, time.monotonic())
                if self.running.get(name) == uid:
                    del self.running[name]
            elif (pod.get("status") or {}).get("phase") == "Running" and not meta.get(
                "deletionTimestamp"
            ):
                self.running[name] = uid
            self.changed.notify_all()

    def _run(self) -> None:
        version = ""
        while not self.stopping.is_set():
            try:
                if not version:
                    answer = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
                    listed = json.loads(answer.data)
                    for pod in listed["items"]:
                        self._see("ADDED", pod)
                    version = listed["metadata"]["resourceVersion"]
                stream = self.core.list_namespaced_pod(
                    self.namespace, watch=True, resource_version=version, timeout_seconds=60,
                    allow_watch_bookmarks=True, _preload_content=False, _request_timeout=90,
                )  # fmt: skip
            except (kubernetes.client.exceptions.ApiException, urllib3.exceptions.HTTPError):
                version = ""
                time.sleep(0.2)
                continue
            try:
                for line in stream:
                    if self.stopping.is_set():
                        break
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event["type"] == "ERROR":
                        version = ""
                        break
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._see(event["type"], event["object"])
            except (urllib3.exceptions.HTTPError, ValueError):
                version = ""
            finally:
                stream.release_conn()

    def wait(self, check: Callable[[], bool], deadline: float) -> bool:
        with self.changed:
            return self.changed.wait_for(check, max(deadline - time.monotonic(), 0))
