"""The sandbox's scheduling driver: kube-scheduler's part, played against the API emulator.

It takes pending pods of the configured profiles, filters and scores nodes with kube-scheduler's
default plugins, calls the extenders of a KubeSchedulerConfiguration exactly as kube-scheduler
does, and binds; it knows nothing of NPUs (the extender, vnpu-scheduler, does):

* ``config`` - the KubeSchedulerConfiguration file, checked like kube-scheduler checks it;
* ``quantities`` - Kubernetes quantities; ``podrequests`` - what a pod asks of a node;
* ``nodeinfo`` - a node's scheduling fields and the sums of the pods on it; ``cache`` - all
  nodes and every bound or assumed pod;
* ``predicates`` - the built-in filters and their reasons; ``priorities`` - the built-in
  scores; ``messages`` - the FitError text of an unschedulable pod;
* ``extender`` - the HTTP extender client (filter, prioritize, bind);
* ``queue`` - activeQ, backoffQ and the unschedulable pool;
* ``cluster`` - the Kubernetes API calls; ``informer`` - list+watch threads;
  ``events`` - the pod events, aggregated like client-go's recorder;
* ``report`` - the events and the ``PodScheduled`` condition of an outcome; ``binder`` - the
  binding cycle's worker pool;
* ``driver`` - :class:`~vnpu_sandbox.scheduling.driver.Driver`, the cycles wired together;
  ``command`` - the ``vnpu-sandbox scheduler`` subcommand; ``logs`` - JSON log lines.

Errors are in ``errors`` (one hierarchy rooted at ``SchedulingError``).
"""
