"""vnpu-sandbox: the vnpu platform on one machine, without a cluster or NPUs.

``vnpu_sandbox.apiserver`` is a Kubernetes API emulator that the real vnpu services, the
``kubernetes`` Python client and kubectl talk to; ``vnpu_sandbox.cli`` is the
``vnpu-sandbox`` command that runs the parts.
"""

__version__ = "0.1.0"
