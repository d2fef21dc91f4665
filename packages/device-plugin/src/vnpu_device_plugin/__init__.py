"""vnpu-device-plugin: the node side of vnpu on Ascend NPUs in classic mode. Chips are read and
changed through the NPU access layer, ``vnpu_npu`` (package vnpu-npu).

* the kubelet device plugin (``vnpu-device-plugin``, ``plugin.Plugin``): registration and
  kubelet restarts (``registration``), the DevicePlugin service (``service``), device ids
  and health (``devices``, ``health``), node annotations (``publisher``), pod
  identification and Allocate (``finder``, ``podplan``, ``allocations``, ``environment``),
  vNPU ownership and reclaim (``lifecycle``, ``ledger``, ``reclaim``, ``reconciler``,
  ``podwatch``, ``podresources``), the API adapter (``cluster``), metrics and probes
  (``metrics``, ``monitoring``). docs/device-plugin.md.
"""

__version__ = "0.1.0"
