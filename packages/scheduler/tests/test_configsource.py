"""The device-config source alone: rejections kept, logged once, counted once, undone.

No API server is needed: a ``ConfigSource`` reads a file and reports to a registry of its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
from structlog import testing

from vnpu_core import catalog, deviceconfig
from vnpu_scheduler import configsource, errors, metrics

GOOD = "vnpus:\n  configs:\n  - {commonWord: Ascend310P, aiCPU: 6}\n"
OTHER_GOOD = "vnpus:\n  configs:\n  - {commonWord: Ascend310P, aiCPU: 5}\n"


class Source:
    """A config source over a file of the test's own, with its registry and changes seen."""

    def __init__(self, path: Path, on_change: Any = None) -> None:
        self.path = path
        self.registry = prometheus_client.CollectorRegistry()
        self.seen: list[catalog.Catalog] = []
        self.source = configsource.ConfigSource(
            path, metrics.Metrics(self.registry), on_change or self.seen.append
        )

    def write(self, text: str) -> None:
        """New content in one step, as a ConfigMap volume swaps it."""
        staged = self.path.with_name(f".{self.path.name}.new")
        staged.write_text(text)
        os.replace(staged, self.path)

    def sample(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    def failed(self) -> float:
        return self.sample("vnpu_scheduler_device_config_reloads_total", result="failed")

    def aicpu(self) -> int:
        model = self.source.catalog.by_common_word("Ascend310P")
        assert model is not None
        return model.aicpu


@pytest.fixture
def source(tmp_path: Path) -> Source:
    path = tmp_path / "device-config.yaml"
    path.write_text(GOOD)
    return Source(path)


def test_the_bomb_is_rejected_once_and_the_last_good_config_serves(
    source: Source, alias_bomb: str
) -> None:
    good = source.source.status.digest
    source.write(alias_bomb)
    with testing.capture_logs() as logged:
        assert source.source.poll() is False
        assert source.source.poll() is False  # the same content is not parsed or counted again
    status = source.source.status
    assert (status.loaded, status.digest, status.source_rejected) == (True, good, True)
    assert status.rejected_digest not in ("", good)
    assert "YAML anchor &a refused at line 1, column 4" in status.error
    assert "aliases (*name) are not allowed" in status.error
    assert source.aicpu() == 6
    assert source.failed() == 1
    assert source.sample("vnpu_scheduler_device_config_ok") == 0
    rejected = [line for line in logged if line["event"] == "device_config_rejected"]
    assert len(rejected) == 1
    assert rejected[0]["log_level"] == "error"
    assert rejected[0]["error"] == status.error
    assert rejected[0]["kept"] == good[: configsource.SHOWN_DIGEST]

    source.write(OTHER_GOOD)
    assert source.source.poll() is True
    assert source.source.status.source_rejected is False
    assert source.source.status.error == ""
    assert source.aicpu() == 5
    assert source.seen == [source.source.catalog]
    assert source.sample("vnpu_scheduler_device_config_ok") == 1
    assert source.sample("vnpu_scheduler_device_config_reloads_total", result="ok") == 2


def test_each_rejected_content_counts_once(source: Source, alias_bomb: str) -> None:
    for n, text in enumerate([alias_bomb, "vnpus: [\n", alias_bomb, "vnpus: [\n"], start=1):
        source.write(text)
        source.source.poll()
        source.source.poll()
        assert source.failed() == n


def test_going_back_to_the_config_in_use_clears_the_rejection(
    source: Source, alias_bomb: str
) -> None:
    source.write(alias_bomb)
    source.source.poll()
    rejected = source.source.status
    assert rejected.source_rejected
    source.write(GOOD)
    with testing.capture_logs() as logged:
        assert source.source.poll() is False  # nothing new to load
    cleared = source.source.status
    assert (cleared.source_rejected, cleared.error, cleared.digest) == (False, "", rejected.digest)
    assert source.sample("vnpu_scheduler_device_config_ok") == 1
    assert [line["event"] for line in logged] == ["device_config_rejection_cleared"]
    assert source.seen == []


def test_a_file_above_the_limit_is_refused_unread(source: Source) -> None:
    source.write("vnpus: []\n" + "#" * (2 * deviceconfig.MAX_BYTES))
    assert source.source.poll() is False
    size = source.path.stat().st_size
    assert source.source.status.error == (
        f"{source.path}: (document): YAML document too large: {size} bytes, more than the "
        f"limit of {deviceconfig.MAX_BYTES} bytes (got {size})"
    )
    assert source.source.status.rejected_digest == ""
    source.source.poll()
    assert source.failed() == 1
    assert source.aicpu() == 6


def test_a_file_gone_is_a_rejection_and_its_return_loads(source: Source) -> None:
    source.path.unlink()
    assert source.source.poll() is False
    assert "No such file or directory" in source.source.status.error
    assert source.failed() == 1
    source.write(OTHER_GOOD)
    assert source.source.poll() is True
    assert source.aicpu() == 5


def test_any_failure_while_loading_is_a_rejection_and_later_reloads_go_on(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(GOOD)
    failures = [MemoryError()]

    def apply(models: catalog.Catalog) -> None:
        if failures:
            raise failures.pop()

    source = Source(path, apply)
    source.write(OTHER_GOOD)
    with testing.capture_logs() as logged:
        assert source.source.poll() is False
    assert source.source.status.error == f"{path}: internal error while loading: MemoryError()"
    assert source.aicpu() == 6  # not taken: it could not be applied
    assert source.failed() == 1
    assert logged[0]["event"] == "device_config_rejected"
    assert isinstance(logged[0]["exc_info"], MemoryError)
    source.write(GOOD.replace("6", "4"))
    assert source.source.poll() is True
    assert source.aicpu() == 4


def test_a_bomb_at_start_is_a_settings_error(tmp_path: Path, alias_bomb: str) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(alias_bomb)
    registry = prometheus_client.CollectorRegistry()
    with pytest.raises(errors.SettingsError) as refused:
        configsource.ConfigSource(path, metrics.Metrics(registry))
    assert refused.value.field == "device_config"
    assert "YAML anchor &a refused" in str(refused.value)
    failed = {"result": "failed"}
    assert registry.get_sample_value("vnpu_scheduler_device_config_reloads_total", failed) == 1
