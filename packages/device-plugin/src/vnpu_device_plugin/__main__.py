"""``vnpu-device-plugin``: run the device plugin until SIGTERM or SIGINT.

Exit status: 0 after a clean stop, 2 for bad settings (the field and value are printed),
1 when the plugin cannot start (no chips, a broken ledger, the NPU driver or the API
unusable). SIGHUP re-registers with kubelet, as HAMi's plugin does.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

import structlog

from vnpu_device_plugin import errors, plugin, settings
from vnpu_npu import errors as npu_errors
from vnpu_service import kubeapi, logs

log = structlog.get_logger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = settings.from_args(argv)
    except errors.SettingsError as exc:
        sys.stderr.write(f"vnpu-device-plugin: {exc}\n")
        return 2
    logs.configure(options.log_level, quiet=("urllib3", "kubernetes", "grpc"))
    try:
        node = plugin.Plugin(options)
    except errors.SettingsError as exc:
        sys.stderr.write(f"vnpu-device-plugin: {exc}\n")
        return 2
    except (errors.DevicePluginError, kubeapi.ApiError, npu_errors.NpuError, OSError) as exc:
        log.error("plugin_start_failed", error=str(exc))
        sys.stderr.write(f"vnpu-device-plugin: cannot start: {exc}\n")
        return 1
    stop = threading.Event()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        if number == signal.SIGHUP:
            log.info("sighup_reregister")
            node.link.reregister()
            return
        log.info("signal_received", signal=signal.Signals(number).name)
        stop.set()

    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, on_signal)
    try:
        node.start()
    except (errors.DevicePluginError, kubeapi.ApiError, npu_errors.NpuError, OSError) as exc:
        log.error("plugin_start_failed", error=str(exc))
        sys.stderr.write(f"vnpu-device-plugin: cannot start: {exc}\n")
        node.stop()
        return 1
    stop.wait()
    node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
