"""The whole vnpu platform on one machine: ``vnpu-sandbox up``, ``status`` and ``down``.

``up`` reads a cluster file (the shape ``vnpu plan --cluster`` reads), starts every part as
its own process (etcd, kube-apiserver, kube-controller-manager and kube-scheduler built by
``make k8s-bin``; the real vnpu-scheduler with its webhooks; per node a simulated kubelet,
simulated chips, the real device plugin and exporter; Prometheus), waits until the sandbox is
usable and records what it started in the sandbox directory, which ``status`` and ``down``
read. ``apiplane`` is the bare kube-apiserver the test suites share.
"""
