"""The DCMI backend: Ascend's ``libdcmi.so`` through ctypes.

* ``structs`` - the C structures and constants of the DCMI header, typed for ctypes.
* ``library`` - finding and loading ``libdcmi.so``, per-symbol lookup, return-code checks.
* ``backend`` - ``DcmiBackend``, the ``Backend`` protocol over the library, with the
  fallbacks older drivers need.
"""
