"""Soft slices and unknown devices in DRA mode's attribution."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from vnpu_exporter import attribution, claims, podresources
from vnpu_npu import claimledger

MiB = 1024**2


def _device(
    pod: str, name: str, uid: str = "", container: str = "main"
) -> podresources.ClaimDevice:
    """``name`` held by ``container`` of pod ``pod`` (namespace ml) through claim ``<pod>-npu``,
    with the driver's CDI id when ``uid`` is given."""
    cdi_ids = (f"npu.vnpu.io/claim={uid}-{name}",) if uid else ()
    return podresources.ClaimDevice(
        "ml", pod, container, "ml", f"{pod}-npu", "npu-node-1", name, cdi_ids
    )


def _slice(
    pod: str, device: str, memory: int, cores: int, uid: str = "uid-s", chip: int = 3
) -> claimledger.Record:
    """The driver's record of a soft slice of claim ``<pod>-npu``."""
    return claimledger.soft_slice(
        claim_uid=uid,
        namespace="ml",
        claim=f"{pod}-npu",
        request="npu",
        device=device,
        chip=chip,
        chip_uuid="U",
        memory_mib=memory,
        core_percent=cores,
        created_at=1.0,
    )


def test_soft_slices_and_unknown_devices(kit: Any, node310: Any) -> None:
    """A soft slice the claim ledger does not size is attributed without a size (PodResources
    does not carry it); a device of a chip the node lacks, or a name the driver does not
    publish, is left out."""
    c = node310.chips()
    found = attribution.attribute(
        kit.NODE,
        c,
        {},
        [],
        [
            _device("s", "chip-3-soft"),
            _device("gone", "chip-9-whole"),
            _device("odd", "chip-0-gpu"),
        ],
    )
    (soft,) = found.allocations
    assert (soft.owner.pod, soft.phy, soft.kind, soft.memory_mib, soft.aicores) == (
        "s",
        3,
        attribution.Kind.SOFT,
        0,
        0,
    )
    assert found.usage[c[3].uuid].soft_slices == 1


@pytest.mark.parametrize(
    ("memory", "cores", "aicores", "exclusive"),
    [
        (4096, 30, 8 * 0.3, False),
        (1024, 0, 0.0, False),  # no share reserved: it competes for idle cores
        (21527, 0, 8.0, True),  # all the allocatable memory: the chip is the slice's
        (2048, 100, 8.0, True),
    ],
)
def test_the_claim_ledger_sizes_a_soft_slice_as_classic_mode_does(
    kit: Any, node310: Any, memory: int, cores: int, aicores: float, exclusive: bool
) -> None:
    c = node310.chips()
    dra = attribution.attribute(
        kit.NODE, c, {}, [], [_device("s", "chip-3-soft", "uid-s")],
        claim_records=[_slice("s", "chip-3-soft", memory, cores)],
    )  # fmt: skip
    classic = attribution.attribute(
        kit.NODE, c, {}, [kit.pod("s", [[kit.Device(c[3], None, memory, cores)]], soft=True)], []
    )
    (held,) = dra.allocations
    (same,) = classic.allocations
    assert (held.kind, held.template, held.vnpu_id, held.attribution) == (
        attribution.Kind.SOFT,
        "",
        None,
        attribution.How.NOT_APPLICABLE,
    )
    assert (held.memory_mib, held.aicores, held.core_percent) == (memory, aicores, cores)
    assert (held.memory_mib, held.aicores, held.share) == (
        same.memory_mib,
        same.aicores,
        same.share,
    )
    assert dra.usage[c[3].uuid] == classic.usage[c[3].uuid]
    assert dra.usage[c[3].uuid].exclusive is exclusive


@pytest.mark.parametrize(
    "record",
    [
        _slice("s", "chip-3-soft", 4096, 30, uid="uid-old"),  # a claim of that name, gone
        _slice("s", "chip-3-soft", 4096, 30, chip=2),  # another chip than the device's
        _slice("s", "chip-3-soft", 21528, 30),  # more than the chip's allocatable memory
        dataclasses.replace(  # a vNPU's record under the soft device's name
            _slice("s", "chip-3-soft", 4096, 30),
            kind=claimledger.Kind.VNPU,
            vnpu_id=100,
            template="vir01",
            memory_mib=0,
            core_percent=0,
        ),
    ],
)
def test_a_record_that_does_not_fit_the_soft_device_sizes_nothing(
    kit: Any, node310: Any, record: claimledger.Record
) -> None:
    found = attribution.attribute(
        kit.NODE, node310.chips(), {}, [], [_device("s", "chip-3-soft", "uid-s")],
        claim_records=[record],
    )  # fmt: skip
    (soft,) = found.allocations
    assert (soft.kind, soft.memory_mib, soft.aicores) == (attribution.Kind.SOFT, 0, 0)


def test_a_soft_claim_shared_by_two_containers_is_held_once_on_its_chip(
    kit: Any, node310: Any
) -> None:
    c = node310.chips()
    found = attribution.attribute(
        kit.NODE, c, {}, [],
        [_device("s", "chip-3-soft", "uid-s", "a"), _device("s", "chip-3-soft", "uid-s", "b")],
        claim_records=[_slice("s", "chip-3-soft", 4096, 30)],
    )  # fmt: skip
    assert [(a.owner.container, a.memory_mib) for a in found.allocations] == [
        ("a", 4096),
        ("b", 4096),
    ]
    used = found.usage[c[3].uuid]
    assert (used.soft_slices, used.memory_mib, used.core_percent) == (1, 4096, 30)


SOFT_METRICS = (
    "vnpu_allocation_info",
    "vnpu_allocation_memory_limit_bytes",
    "vnpu_allocation_memory_used_bytes",
    "vnpu_allocation_aicores",
    "vnpu_allocation_aicore_share_ratio",
    "vnpu_allocation_aicore_utilization_ratio",
    "vnpu_chip_allocations",
    "vnpu_chip_allocated_memory_bytes",
    "vnpu_chip_allocated_aicores",
    "vnpu_chip_allocated_ratio",
    "vnpu_chip_stranded_memory_bytes",
    "vnpu_chip_stranded_aicores",
    "vnpu_namespace_allocations",
    "vnpu_namespace_allocated_memory_bytes",
    "vnpu_namespace_allocated_aicores",
    "vnpu_namespace_used_memory_bytes",
    "vnpu_namespace_used_aicores",
    "vnpu_namespace_unmeasured_allocations",
)


def test_a_dra_soft_slice_shows_the_metrics_of_a_classic_one(
    kit: Any, node310: Any, tmp_path: Path
) -> None:
    """One soft slice of chip 2 held by pod ml/infer, container c0: once as classic mode's
    annotations say it, once as a claim device with the driver's claim ledger; every sample
    of every allocation, chip and namespace family is the same."""
    c = node310.chips()
    classic = kit.Exporter(
        node310,
        kit.StaticPods(
            [kit.pod("infer", [[kit.Device(c[2], None, 4096, 30)]], namespace="ml", soft=True)]
        ),
    ).refresh()
    state_dir = tmp_path / "dra-driver"
    state_dir.mkdir()
    claimledger.write(
        state_dir / claimledger.FILE,
        [_slice("infer", "chip-2-soft", 4096, 30, chip=2)],
        durable=False,
    )
    dra = kit.Exporter(
        node310,
        kit.StaticPods([]),
        kit.StaticDevices([_device("infer", "chip-2-soft", "uid-s", "c0")]),
        claim_ledger=claims.ClaimLedgerFile(state_dir),
    ).refresh()
    allocated = {
        (s["pod"], s["container"], s["kind"]): v
        for s, v in dra.samples("vnpu_allocation_memory_limit_bytes")
    }
    assert allocated == {("infer", "c0", "soft"): 4096 * MiB}
    for name in SOFT_METRICS:
        ordered = sorted(classic.samples(name), key=repr)
        assert sorted(dra.samples(name), key=repr) == ordered, name
        assert ordered, name  # each family has samples to compare
