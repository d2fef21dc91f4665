"""The sandbox's controller manager: what kube-controller-manager does for Deployments.

It plays the deployment controller, the replicaset controller and the garbage collector
against any Kubernetes API server (the API emulator in the sandbox), through the official
``kubernetes`` client with list and watch, so ``kubectl apply``/``scale``/``delete`` of a
Deployment end as in a cluster:

* ``cluster`` - the API calls (JSON in and out) and the kinds they address;
* ``informer`` - list-then-watch caches of one kind, with event handlers;
* ``workqueue`` - the deduplicated, delayable queue of objects to sync;
* ``ownership`` - ownerReferences, selectors, adoption and release, pod readiness;
* ``replicasets`` - pods for each ReplicaSet, its status;
* ``deployments`` - ReplicaSets for each Deployment, rolling updates and Recreate, its status;
* ``rollout`` - the arithmetic of a rollout and the Deployment status (pure functions);
* ``garbagecollector`` - dependents of deleted owners, foreground and orphan deletion;
* ``recorder`` - the Events the controllers write;
* ``manager`` - :class:`~vnpu_sandbox.controllers.manager.ControllerManager`, which wires
  them together; ``command`` - the ``vnpu-sandbox controllers`` subcommand.

Errors are in ``errors`` (one hierarchy rooted at ``ControllerError``).
"""
