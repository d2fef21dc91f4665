"""vnpu-device-plugin: the node side of vnpu on Ascend NPUs.

* ``vnpu_device_plugin.npu`` - the NPU access layer: the ``Backend`` protocol, the DCMI
  backend (``libdcmi.so`` through ctypes) and the simulated backend. The device plugin
  server and the exporter both read chips through it.
"""

__version__ = "0.1.0"
