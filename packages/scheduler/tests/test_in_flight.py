"""Filters fit each pod behind the binds in flight to the node, not on the chips they will take.

kube-scheduler binds asynchronously, so a bind can wait for a node's lock while the next pods
are filtered. Here a bind for a whole chip waits behind a lock held for another pod's
Allocate; meanwhile a pod asking for both of the node's chips is refused with the number of
chips left behind that bind, and a pod asking for one still fits. Once the bind has written
its decision, the cache counts it and the filter says the same.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from vnpu_core import coordination

LOCK = "hami.io/mutex.lock"
WORD = "Ascend310P"


def _filter(scheduler: Any, kube: Any, name: str) -> dict[str, Any]:
    body = {"Pod": kube.pod(name), "NodeNames": ["n1"]}
    answer: dict[str, Any] = scheduler.post("filter", body).json()
    return answer


def _bind(scheduler: Any, kube: Any, name: str, errors: list[str]) -> None:
    pod = kube.pod(name)
    body = {"PodName": name, "PodNamespace": kube.namespace, "PodUID": pod["metadata"]["uid"]}
    errors.append(scheduler.post("bind", body | {"Node": "n1"}).json()["Error"])


def test_a_pod_filtered_while_a_bind_waits_for_the_lock_is_fitted_behind_it(
    kube: Any, make: Any, start_scheduler: Any
) -> None:
    scheduler = start_scheduler(lock_wait=20.0)
    kube.add_node(make.node("n1", WORD, chips=2))
    kube.add_pod(make.npu_pod("other", WORD, annotations={"hami.io/bind-phase": "allocating"}))
    when = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=0)
    held = coordination.encode_lock(coordination.NodeLock(when, kube.namespace, "other"))
    kube.annotate_node("n1", {LOCK: held})
    for name, count in (("first", 1), ("both", 2), ("one", 1)):
        kube.add_pod(make.npu_pod(name, WORD, count=count))
    assert _filter(scheduler, kube, "both")["NodeNames"] == ["n1"]  # nothing in flight yet

    errors: list[str] = []
    binding = threading.Thread(target=_bind, args=(scheduler, kube, "first", errors))
    binding.start()
    scheduler.wait_for(lambda: scheduler.service.locks.busy("n1"))

    refused = _filter(scheduler, kube, "both")
    assert refused["NodeNames"] == []
    assert refused["FailedNodes"] == {
        "n1": f"{WORD}: no 2 free whole chips (asked 2, 1 of 2 chips are free)"
    }
    assert _filter(scheduler, kube, "one")["NodeNames"] == ["n1"]
    # The waiting bind's own retry is not fitted behind itself.
    assert _filter(scheduler, kube, "first")["NodeNames"] == ["n1"]

    kube.annotate_node("n1", {LOCK: None})  # the other pod's Allocate is done
    binding.join(timeout=30)
    assert errors == [""]
    assert not scheduler.service.in_flight.by_node()
    time.sleep(0.2)
    again = _filter(scheduler, kube, "both")
    assert again["FailedNodes"] == {
        "n1": f"{WORD}: no 2 free whole chips (asked 2, 1 of 2 chips are free)"
    }
