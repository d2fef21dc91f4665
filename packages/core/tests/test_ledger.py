from typing import Any

import pytest

from vnpu_core import catalog, errors, ledger

U0 = "D7E96E64-2060C1F1-E8E618E4-AED8030A-94003019"
U1 = "7866F664-80406578-6B60A233-E0500485-104301E3"


def bound(annotations: dict[str, str], phase: str = "Running", **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
        "spec": {"nodeName": "n1", "containers": [{"name": "main"}]},
        "status": {"phase": phase},
    }
    pod["metadata"].update(extra.pop("metadata", {}))
    pod["spec"].update(extra.pop("spec", {}))
    return pod


def test_hami_written_310p_pod_counts_its_template() -> None:
    pod = bound(
        {
            "hami.io/Ascend310P-devices-allocated": f"{U0},Ascend310P,6144,0:;",
            "huawei.com/Ascend310P": f'[{{"UUID":"{U0}","temp":"vir02","memory":6144}}]',
        }
    )
    usage = ledger.node_usage([pod], "n1", catalog.BUILTIN).usage[U0]
    assert (usage.vnpus, usage.memory_mib, usage.aicore, usage.aicpu, usage.templates) == (
        1,
        6144,
        2,
        2,
        ("vir02",),
    )


def test_template_is_recovered_from_memory_when_runtime_info_is_missing() -> None:
    pod = bound({"hami.io/Ascend310P-devices-allocated": f"{U0},Ascend310P,3000,0:;"})
    usage = ledger.pod_usage(pod, catalog.BUILTIN)[U0]
    assert usage.templates == ("vir01",)


def test_whole_chips_and_volcano_runtime_info() -> None:
    pod = bound(
        {
            "hami.io/Ascend910B3-devices-allocated": f"{U0},Ascend910B3,65536,0:{U1},Ascend910B3,65536,0:;",
            "huawei.com/Ascend910B3": f'[{{"UUID":"{U0}"}},{{"UUID":"{U1}"}}]',
        }
    )
    usage = ledger.pod_usage(pod, catalog.BUILTIN)
    assert usage[U0].exclusive
    assert usage[U1].exclusive


@pytest.mark.parametrize(
    ("phase", "deleting", "counts"),
    [
        ("Pending", False, True),
        ("Running", False, True),
        ("Running", True, True),
        ("Succeeded", False, False),
        ("Failed", False, False),
    ],
)
def test_which_pods_hold_devices(phase: str, deleting: bool, counts: bool) -> None:
    meta = {"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}
    pod = bound(
        {"hami.io/Ascend310P-devices-allocated": f"{U0},Ascend310P,3072,0:;"}, phase, metadata=meta
    )
    assert (U0 in ledger.node_usage([pod], "n1", catalog.BUILTIN).usage) is counts


def test_pods_of_other_nodes_and_unbound_pods_do_not_count() -> None:
    pod = bound({"hami.io/Ascend310P-devices-allocated": f"{U0},Ascend310P,3072,0:;"})
    assert ledger.node_usage([pod], "n2", catalog.BUILTIN).usage == {}
    pod["spec"]["nodeName"] = ""
    assert ledger.node_usage([pod], "n1", catalog.BUILTIN).usage == {}


def test_soft_pods_count_memory_and_core_percent() -> None:
    pod = bound(
        {
            "huawei.com/vnpu-mode": "hami-core",
            "hami.io/Ascend310P-devices-allocated": f"{U0},Ascend310P,4096,90:;",
            "huawei.com/Ascend310P": f'[{{"UUID":"{U0}","memory":4096,"core":90}}]',
        }
    )
    usage = ledger.pod_usage(pod, catalog.BUILTIN)[U0]
    assert (usage.soft_slices, usage.memory_mib, usage.core_percent, usage.vnpus) == (
        1,
        4096,
        90,
        0,
    )


def test_unknown_template_names_are_read_from_their_grammar() -> None:
    model = catalog.BUILTIN.by_common_word("Ascend910B4")
    assert model is not None
    template = ledger.template_from_name(model, "vir10_4c_16g_m")
    assert (template.aicore, template.aicpu, template.memory_mib) == (10, 4, 16384)
    worst = ledger.template_from_name(model, "mystery")
    assert (worst.aicore, worst.aicpu) == (model.aicore, model.aicpu)


def test_a_malformed_pod_is_reported_not_dropped_silently() -> None:
    good = bound({"hami.io/Ascend310P-devices-allocated": f"{U0},Ascend310P,3072,0:;"})
    bad = bound({"hami.io/Ascend310P-devices-allocated": "garbage"}, metadata={"name": "broken"})
    result = ledger.node_usage([good, bad], "n1", catalog.BUILTIN)
    assert U0 in result.usage
    (problem,) = result.problems
    assert problem.pod == "ns/broken"
    assert isinstance(problem.error, errors.ProtocolError)
    assert problem.error.key == "hami.io/Ascend310P-devices-allocated"


def test_two_pods_on_one_chip_add_up() -> None:
    pods = [
        bound(
            {"hami.io/Ascend310P-devices-allocated": f"{U0},Ascend310P,3072,0:;"},
            metadata={"name": f"p{i}"},
        )
        for i in range(3)
    ]
    usage = ledger.node_usage(pods, "n1", catalog.BUILTIN).usage[U0]
    assert (usage.vnpus, usage.memory_mib) == (3, 9216)
