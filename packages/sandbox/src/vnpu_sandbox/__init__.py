"""vnpu-sandbox: the vnpu platform on one machine, without a cluster or NPUs.

``vnpu_sandbox.platform`` runs the real Kubernetes control plane (built by ``make k8s-bin``)
with vnpu's real services around it; ``vnpu_sandbox.kubelet`` is the simulated kubelet of
each node (no container runtime here); ``vnpu_sandbox.cli`` is the ``vnpu-sandbox`` command
that runs the parts.
"""

__version__ = "0.1.0"
