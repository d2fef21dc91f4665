"""vnpu-device-plugin: the node side of vnpu on Ascend NPUs.

* ``vnpu_device_plugin.npu`` - the NPU access layer: the ``Backend`` protocol, the DCMI
  backend (``libdcmi.so`` through ctypes) and the simulated backend. The device plugin
  server and the exporter both read chips through it.
* the kubelet device plugin (``vnpu-device-plugin``, ``plugin.Plugin``): registration and
  kubelet restarts (``registration``), the DevicePlugin service (``service``), device ids
  and health (``devices``, ``health``), node annotations (``publisher``), pod
  identification and Allocate (``finder``, ``podplan``, ``allocations``, ``environment``),
  vNPU ownership and reclaim (``lifecycle``, ``ledger``, ``reclaim``, ``reconciler``,
  ``podwatch``, ``podresources``), the API adapter (``cluster``), metrics and probes
  (``metrics``, ``monitoring``). docs/device-plugin.md.
"""

__version__ = "0.1.0"
