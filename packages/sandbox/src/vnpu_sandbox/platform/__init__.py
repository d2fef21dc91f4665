"""The whole vnpu platform on one machine: ``vnpu-sandbox up``, ``status`` and ``down``.

``up`` reads a cluster file (the shape ``vnpu plan --cluster`` reads), starts every part as
its own process (the API emulator, the controllers, per node a simulated kubelet, simulated
chips, the real device plugin and exporter, the real vnpu-scheduler with its webhooks, the
scheduling driver and Prometheus), waits until every node is Ready with its NPUs published
and records what it started in the sandbox directory, which ``status`` and ``down`` read.
"""
