"""The NPU access layer: what vnpu needs from the Ascend driver, behind one protocol.

* ``backend`` - the ``Backend`` protocol and the frozen values it returns.
* ``errors`` - the error hierarchy and the translation of DCMI return codes.
* ``faults`` - DCMI health and fault codes to fault levels and Healthy/Unhealthy.
* ``limits`` - vNPU id ranges and which budget a chip lacks for a template (both backends).
* ``dcmi`` - the real backend: ``libdcmi.so`` through ctypes.
* ``sim`` - the simulated backend over a directory, with fault and load injection.
* ``statefile`` - node-local state files: replaced whole by a rename, read or refused by path.
* ``ledger`` - the vNPU ownership ledger's document, which the device plugin writes and the
  exporter reads.
* ``claimledger`` - the DRA driver's claim ledger document (its vNPUs and soft slices by
  claim), which the DRA driver writes and the exporter reads.
* ``runtime`` - what a container is told about its NPUs (Ascend's and hami-vnpu-core's
  variables, mounts and host files), for the device plugin's answers and the DRA driver's
  CDI specs alike.

The device plugin and the exporter both import this package, so it stays free of gRPC,
Kubernetes and Prometheus (an import-linter contract checks it).
"""
