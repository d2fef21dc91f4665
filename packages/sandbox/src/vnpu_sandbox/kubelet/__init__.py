"""The simulated kubelet of the sandbox: one per simulated node.

It speaks the real kubelet's node-local APIs to real device plugins and DRA drivers and the
Kubernetes API to kube-apiserver (as ``system:node:<node>``), so the vnpu device plugin, DRA
driver, scheduler and exporter run against it unchanged:

* ``registration`` - the v1beta1 Registration service on ``<device plugin dir>/kubelet.sock``;
* ``pluginclient`` - the connection to one registered plugin (ListAndWatch, socket watch, calls);
* ``devicemanager`` - plugin health, capacity, the kubelet's device-picking rules, checkpoint;
* ``checkpoint`` - the device manager's checkpoint file;
* ``draplugins`` - the plugin-registration watcher on ``plugins_registry`` and the clients of
  the registered DRA drivers;
* ``dramanager`` - the claim cache, NodePrepareResources / NodeUnprepareResources, and the
  claims each container gets;
* ``drasync`` - the pod worker's prepare and unprepare calls and their retries;
* ``slicewiper`` - deleting the node's ResourceSlices at start and a gone driver's after 30 s;
* ``cdi`` - CDI device names resolved to container edits with the CDI spec files;
* ``admission`` - admitting one pod (devices for each container, PreStartContainer);
* ``podstatus`` - the pod status documents the kubelet writes;
* ``podevents`` - the kubelet's Warning Events on pods;
* ``podworker`` - watching the node's pods, admitting them one at a time, in order, preparing
  their claims before they start and unpreparing them after;
* ``statusmanager`` - pod status writes and final deletes, retried until they land;
* ``podresources`` - the PodResources v1 service;
* ``nodestatus`` - the Node object and its status, published on change and on a heartbeat;
* ``lease`` - the node's Lease in ``kube-node-lease``, renewed with each status publish;
* ``apiclient`` - the calls to the Kubernetes API, through the official client;
* ``allocations`` - what each admitted pod got, in memory and as JSON files;
* ``kubelet`` - :class:`~vnpu_sandbox.kubelet.kubelet.Kubelet`, which wires them together,
  and its configuration; ``command`` - the ``vnpu-sandbox kubelet`` subcommand.

Errors are in ``errors`` (one hierarchy rooted at ``KubeletError``).
"""
