"""How long the wire codecs take on realistic annotation values (pure CPU, no I/O).

The scheduler decodes every node's register annotation and every bound pod's
devices-allocated annotation when it rebuilds its cache; the device plugin decodes and
erases devices-to-allocate in each Allocate. Prints a Markdown section.
"""

from __future__ import annotations

import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

from vnpu_core import coordination, protocol

ROUNDS = 5
CALLS = 2000


def _uuid(i: int) -> str:
    return f"7866F664-80406578-6B60A233-E0500485-{i:08X}"


def _cases() -> list[tuple[str, Callable[[], object]]]:
    chips = [
        protocol.RegisteredChip(_uuid(i), i, 4, 65536, 20, "Ascend910B3", True, i // 4 % 2)
        for i in range(16)
    ]
    register = protocol.encode_node_register(chips)
    pod = [
        (),
        tuple(protocol.DeviceEntry(_uuid(i), "Ascend910B3", 65536, 0) for i in range(8)),
        (protocol.DeviceEntry(_uuid(9), "Ascend910B3", 16384, 0),),
        (),
    ]
    devices = protocol.encode_devices(pod)
    runtime = protocol.encode_runtime(
        [protocol.RuntimeInfo(_uuid(i), "vir05_1c_16g", 16384, 0) for i in range(8)]
    )
    lock = coordination.NodeLock(datetime(2026, 8, 18, 1, 56, 10, tzinfo=UTC), "default", "job-0")
    lock_text = coordination.encode_lock(lock)
    rkey = protocol.node_register_key("Ascend910B3")
    dkey = protocol.to_allocate_key("Ascend910B3")
    tkey = protocol.runtime_key("Ascend910B3")
    hkey = protocol.node_handshake_key("Ascend910B3")
    return [
        ("encode node register, 16 chips", lambda: protocol.encode_node_register(chips)),
        ("decode node register, 16 chips", lambda: protocol.decode_node_register(rkey, register)),
        ("encode devices, 4 containers / 9 devices", lambda: protocol.encode_devices(pod)),
        (
            "decode devices, 4 containers / 9 devices",
            lambda: protocol.decode_devices(dkey, devices),
        ),
        (
            "erase first container (text in, text out)",
            lambda: protocol.erase_first_container(devices, key=dkey),
        ),
        ("decode runtime info, 8 devices", lambda: protocol.decode_runtime(tkey, runtime)),
        ("decode node lock", lambda: coordination.decode_lock(lock_text)),
        (
            "decode handshake",
            lambda: coordination.decode_handshake(hkey, "Reported_2026.08.18 09:55:36"),
        ),
    ]


def main() -> None:
    print("### Wire codecs (`vnpu_core.protocol`, `vnpu_core.coordination`)\n")
    print(
        f"Python {sys.version.split()[0]} on {platform.machine()}; best of {ROUNDS} rounds of {CALLS} calls.\n"
    )
    print("| operation | µs per call |")
    print("|---|---:|")
    for name, call in _cases():
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(CALLS):
                call()
            best = min(best, time.perf_counter() - start)
        print(f"| {name} | {best / CALLS * 1e6:.1f} |")


if __name__ == "__main__":
    main()
