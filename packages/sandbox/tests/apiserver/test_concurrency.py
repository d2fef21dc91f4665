"""Many watchers and writers at once, from threads, as the vnpu services use the emulator."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

WATCHERS = 12
WRITERS = 4
WRITES_EACH = 15


def test_every_watcher_sees_every_write_in_revision_order(
    client_for: Any, fresh_api: Any, unique: Any
) -> None:
    url = fresh_api()
    start = (
        k8s.CoreV1Api(client_for(url))
        .list_namespaced_config_map("default")
        .metadata.resource_version
    )
    ready = threading.Barrier(WATCHERS + 1)
    expected = WRITERS * WRITES_EACH * 2  # each write creates then patches one object

    def watch_all() -> list[tuple[str, str, int]]:
        api = k8s.CoreV1Api(client_for(url))
        stream = k8s_watch.Watch().stream(
            api.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=10
        )
        ready.wait()
        seen: list[tuple[str, str, int]] = []
        for event in stream:
            meta = event["object"].metadata
            seen.append((event["type"], meta.name, int(meta.resource_version)))
            if len(seen) == expected:
                break
        return seen

    def write(writer: int) -> list[str]:
        api = k8s.CoreV1Api(client_for(url))
        names = []
        for number in range(WRITES_EACH):
            name = f"w{writer}-{number}"
            api.create_namespaced_config_map("default", {"metadata": {"name": name}})
            api.patch_namespaced_config_map(name, "default", {"data": {"n": str(number)}})
            names.append(name)
        return names

    with ThreadPoolExecutor(WATCHERS + WRITERS) as pool:
        watchers = [pool.submit(watch_all) for _ in range(WATCHERS)]
        ready.wait()
        writers = [pool.submit(write, w) for w in range(WRITERS)]
        written = {name for future in writers for name in future.result(timeout=25)}
        results = [future.result(timeout=25) for future in watchers]

    for seen in results:
        assert len(seen) == expected
        revisions = [rv for _, _, rv in seen]
        assert revisions == sorted(revisions)
        assert len(set(revisions)) == expected
        assert {name for _, name, _ in seen} == written
        for name in written:
            assert [t for t, n, _ in seen if n == name] == ["ADDED", "MODIFIED"]
    assert results.count(results[0]) == WATCHERS, "all watchers see the same sequence"


def test_concurrent_conflicting_updates_let_exactly_one_win(
    client_for: Any, api: str, unique: Any
) -> None:
    name = unique("race")
    core = k8s.CoreV1Api(client_for(api))
    base = core.create_namespaced_config_map(
        "default", {"metadata": {"name": name}, "data": {"v": "0"}}
    )

    def update(value: int) -> int:
        body = k8s.V1ConfigMap(
            metadata=k8s.V1ObjectMeta(name=name, resource_version=base.metadata.resource_version),
            data={"v": str(value)},
        )
        try:
            k8s.CoreV1Api(client_for(api)).replace_namespaced_config_map(name, "default", body)
        except k8s.ApiException as exc:
            return int(exc.status)
        return 200

    with ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(update, range(1, 9)))
    assert sorted(codes) == [200] + [409] * 7
