"""Fault levels and the Healthy/Unhealthy decision the device plugin sends to kubelet."""

from __future__ import annotations

import pytest

from vnpu_npu import backend, faults
from vnpu_npu.faults import FaultLevel

H = backend.Health


@pytest.mark.parametrize(
    ("health", "codes", "level", "healthy"),
    [
        (H.OK, (), FaultLevel.NORMAL, True),
        (H.MINOR, (), FaultLevel.NOT_HANDLE, True),
        (H.MAJOR, (), FaultLevel.SEPARATE_NPU, False),
        (H.CRITICAL, (), FaultLevel.SEPARATE_NPU, False),
        (H.ABSENT, (), FaultLevel.SEPARATE_NPU, False),
        (H.CRITICAL, (0x80E18402,), FaultLevel.SEPARATE_NPU, False),
        (H.MINOR, (0x80E18405,), FaultLevel.SUB_HEALTH, True),
        (H.MAJOR, (0x81078603,), FaultLevel.NOT_HANDLE, True),  # known codes keep their level
        (H.MAJOR, (0x8C03A000,), FaultLevel.RESTART_NPU, False),
        (H.MINOR, (0x12345678,), FaultLevel.NOT_HANDLE, True),  # unknown, at most minor
        (H.OK, (0x12345678,), FaultLevel.NOT_HANDLE, True),
        (H.MAJOR, (0x12345678,), FaultLevel.SEPARATE_NPU, False),  # unknown, worse than minor
        (H.ABSENT, (0x12345678,), FaultLevel.SEPARATE_NPU, False),  # unknown severity
        (H.MAJOR, (0x80E21007, 0x8C204E00, 0x80C98008), FaultLevel.RESTART_BUSINESS, False),
    ],
)
def test_assess(health: H, codes: tuple[int, ...], level: FaultLevel, healthy: bool) -> None:
    verdict = faults.assess(backend.ChipHealth(health, codes))

    assert (verdict.level, verdict.healthy, verdict.codes) == (level, healthy, codes)
    assert verdict.kubelet_health == ("Healthy" if healthy else "Unhealthy")


@pytest.mark.parametrize(
    ("code", "in_use", "grace", "healthy"),
    [
        (0x8C0E4E00, True, True, True),  # FreeRestartNPU waits for the running job
        (0x8C0E4E00, False, True, False),
        (0x8C0E4E00, True, False, False),
        (0x80E18402, True, True, False),  # SeparateNPU never waits
    ],
)
def test_grace_while_in_use(code: int, in_use: bool, grace: bool, healthy: bool) -> None:
    health = backend.ChipHealth(H.MAJOR, (code,))
    assert faults.assess(health, in_use=in_use, grace=grace).healthy is healthy


def test_pre_separate_waits_for_the_job_with_a_custom_table() -> None:
    table = {**faults.KNOWN_CODES, 0xA1B2C3D4: FaultLevel.PRE_SEPARATE_NPU}
    health = backend.ChipHealth(H.MAJOR, (0xA1B2C3D4,))

    assert faults.assess(health, in_use=True, table=table).healthy
    assert not faults.assess(health, in_use=False, table=table).healthy
    assert faults.assess(health).level is FaultLevel.SEPARATE_NPU  # the default table lacks it


def test_gone_chip_gets_the_card_drop_code() -> None:
    verdict = faults.assess(None, in_use=True)

    assert verdict == faults.Verdict(
        FaultLevel.RESTART_NPU, (0x40F84E00,), healthy=False, gone=True
    )


def test_levels_rank_worst_highest() -> None:
    assert FaultLevel.MANUALLY_SEPARATE_NPU.rank > FaultLevel.SEPARATE_NPU.rank
    assert (
        FaultLevel.SEPARATE_NPU.rank
        > FaultLevel.PRE_SEPARATE_NPU.rank
        > FaultLevel.RESTART_NPU.rank
    )
    assert FaultLevel.SUB_HEALTH.rank > FaultLevel.NOT_HANDLE.rank > FaultLevel.NORMAL.rank


@pytest.mark.parametrize(
    ("text", "code"), [("80E18402", 0x80E18402), ("0x40f84e00", 0x40F84E00), ("1", 1)]
)
def test_parse_code(text: str, code: int) -> None:
    assert faults.parse_code(text) == code
    assert faults.format_code(code) == f"{code:08X}"


@pytest.mark.parametrize("text", ["", "0x", "80E1840Z", "180E18402"])
def test_parse_code_names_bad_text(text: str) -> None:
    with pytest.raises(ValueError, match="fault code"):
        faults.parse_code(text)


def test_unknown_raw_health_counts_as_absent() -> None:
    assert backend.Health.from_raw(7) is backend.Health.ABSENT
    assert backend.Health.from_raw(2) is backend.Health.MAJOR
