"""vnpu's DRA driver (``npu.vnpu.io``): the node agent of DRA mode, first part.

* ``errors`` - the package's error hierarchy.
* ``slices`` - pure: a node's chips, their health and the chip model to the ResourceSlices
  of the node's pool (counter sets, partitionable devices, soft devices, taints).
* ``chips`` - reads the chips and their health from a ``vnpu_npu`` backend.
* ``cluster`` - the one module that imports the Kubernetes client (ResourceSlices, Nodes).
* ``publisher`` - makes the API hold exactly the slices ``slices`` built.

Not yet: the kubelet plugin (NodePrepareResources / NodeUnprepareResources), DeviceClasses
(see docs/dra.md).
"""
