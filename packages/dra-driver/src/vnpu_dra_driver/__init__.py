"""vnpu's DRA driver (``npu.vnpu.io``): the node agent of DRA mode.

* ``errors`` - the package's error hierarchy.
* ``slices`` - pure: a node's chips, their health and the chip model to the ResourceSlices
  of the node's pool (counter sets, partitionable devices, soft devices, taints).
* ``chips`` - reads the chips and their health from a ``vnpu_npu`` backend.
* ``cluster`` - the one module that imports the Kubernetes client (ResourceSlices, Nodes).
* ``publisher`` - makes the API hold exactly the slices ``slices`` built.
* ``devices`` - pure: an allocated device name back to its chip and kind (whole, template, soft).
* ``ledger`` - the claim ledger (``vnpu_npu.claimledger``'s document), kept: which claim owns
  each vNPU the driver created and each soft slice it prepared.
* ``cdi`` - the CDI spec of a prepared claim (Ascend's environment, device nodes,
  hami-vnpu-core's mounts for soft slices).
* ``asks`` - pure: what a claim's allocation asks of the node, checked before anything is
  made (kinds mixed, a device twice, a device that does not fit the node's mode or chip).
* ``prepare`` - NodePrepareResources / NodeUnprepareResources per claim, and the reconcile.
* ``plugin`` - the kubelet plugin: gRPC DRAPlugin and plugin Registration on unix sockets.

Not yet: see docs/dra.md, "Not yet".
"""
