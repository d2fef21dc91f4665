"""Which pod an Allocate is for, when a pod without a decision races a scheduled one.

The attack: a tenant creates a pod with ``spec.nodeName`` preset, ``hami.io/webhook: ignore``,
no annotations and one ``huawei.com/Ascend310P``. Kubelet admits it; its Allocate waits for
"its" pod's decision while vnpu-scheduler binds a legitimate pod to the node (owner lock and
decision). A plugin that took the first decision that showed gave the tenant the legitimate
pod's vNPU and refused the legitimate pod's own Allocate.

Each round places both pods on the real kube-apiserver, the simulated kubelet admits them over
the plugin's real socket, and the test decides where kubelet's calls meet the other pod: held
at GetPreferredAllocation, held at the Allocate's first look, or not held at all (the other
pod shows while the Allocate is already waiting). Held means the test stands in for the
plugin's allocation lock until the other pod is in the API, so every interleaving is certain
rather than left to timing.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from vnpu_core import protocol

Node = Any
Kit = Any
ROUNDS = 20
HOLDS = (1, 2, None)  # held at kubelet's 1st call (GetPreferredAllocation), 2nd (Allocate), none


class Gate:
    """Takes the place of the plugin's allocation lock. Once armed, kubelet's ``hold_at``-th
    call since is held before it takes the lock, until ``release``; calls are counted."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self._changed = threading.Condition()
        self._calls = 0
        self._hold_at: int | None = None
        self._open = True

    def arm(self, hold_at: int | None) -> None:
        with self._changed:
            self._calls, self._hold_at, self._open = 0, hold_at, hold_at is None

    def reached(self, calls: int) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._calls >= calls, timeout=10)

    def release(self) -> None:
        with self._changed:
            self._open = True
            self._changed.notify_all()

    def __enter__(self) -> None:
        with self._changed:
            self._calls += 1
            self._changed.notify_all()
            if self._calls == self._hold_at:
                self._changed.wait_for(lambda: self._open, timeout=10)
        self._lock.acquire()

    def __exit__(self, *_: object) -> None:
        self._lock.release()


def _settled(node: Node, name: str) -> str:
    phase = node.api.phase(name)
    return phase if phase in ("Running", "Failed") else ""


@pytest.mark.parametrize("first", ["rogue", "legitimate"])
def test_a_pod_without_a_decision_never_takes_a_scheduled_pods_vnpu(
    node: Node, kit: Kit, first: str
) -> None:
    node.start_plugin(allocate_wait=0.3)
    kit.wait_for(lambda: node.capacity() == (28, 28), what="registration")
    gate = Gate(node.plugin.allocations.lock)
    node.plugin.allocations.lock = gate
    stolen: list[str] = []
    failed: list[str] = []
    for number in range(ROUNDS):
        rogue, legitimate = f"rogue-{number}", f"legit-{number}"
        hold = HOLDS[number % len(HOLDS)]
        gate.arm(hold)
        decision = [[kit.Grant(number % 4, "vir01", 3072)]]
        if first == "rogue":
            node.bind_by_hand(rogue)
            assert gate.reached(hold or 2), "kubelet never called the plugin for the rogue pod"
            node.api.place(legitimate, decision)  # owner lock, then the Binding with the decision
        else:
            node.api.place(legitimate, decision)
            assert gate.reached(hold or 1), "kubelet never called the plugin for the pod"
            node.bind_by_hand(rogue)
        gate.release()
        legit_phase = kit.wait_for(lambda n=legitimate: _settled(node, n), what=legitimate)
        rogue_phase = kit.wait_for(lambda n=rogue: _settled(node, n), what=rogue)
        if rogue_phase == "Running" or node.kubelet.allocation(node.namespace, rogue) is not None:
            stolen.append(rogue)
        if legit_phase == "Failed":
            failed.append(legitimate)
            continue
        vnpu_id = int(node.env(legitimate, "c0")["ASCEND_VISIBLE_DEVICES"])
        owners = {r["pod"] for r in node.ledger() if r["vnpu_id"] == vnpu_id}
        assert owners == {legitimate}, f"round {number}: vNPU {vnpu_id} owned by {owners}"
        node.kubelet.complete_pod(node.namespace, legitimate)  # frees its device for the next
    assert (len(stolen), len(failed)) == (0, 0), f"stolen by {stolen}; failed: {failed}"
    message = str(node.api.pod("rogue-0")["status"].get("message", ""))
    assert "no decision" in message, message
    assert protocol.NODE_LOCK_KEY not in node.api.node_annotations()


def test_without_pod_resources_two_possible_pods_are_refused_by_name_not_guessed(
    node: Node, kit: Kit
) -> None:
    """Kubelet's records cannot settle it, so the rogue pod's Allocate, which could as well be
    the scheduled pod's, is refused naming both; once the rogue's failure shows in the API, the
    scheduled pod is the only one left and is served."""
    node.start_plugin(allocate_wait=1.0, pod_resources_socket=node.root / "none" / "kubelet.sock")
    kit.wait_for(lambda: node.capacity() == (28, 28), what="registration")
    gate = Gate(node.plugin.allocations.lock)
    node.plugin.allocations.lock = gate
    gate.arm(2)
    node.bind_by_hand("rogue")
    assert gate.reached(2), "kubelet never called Allocate for the rogue pod"
    node.api.place("legit", [[kit.Grant(2, "vir01", 3072)]])
    gate.release()
    kit.wait_for(lambda: node.running("legit"), what="the scheduled pod served")
    assert node.api.phase("rogue") == "Failed"
    assert node.kubelet.allocation(node.namespace, "rogue") is None
    message = str(node.api.pod("rogue")["status"].get("message", ""))
    assert (
        f"2 pods bound to this node could be the one ({node.namespace}/legit (decision for 1 "
        f"device(s)), {node.namespace}/rogue (no decision)); kubelet's PodResources does not "
        "answer, so nothing tells them apart; refused rather than guessed" in message
    ), message
    (vnpu,) = node.vnpus()
    assert node.env("legit", "c0")["ASCEND_VISIBLE_DEVICES"] == str(vnpu[1])
