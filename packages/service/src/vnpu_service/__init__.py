"""vnpu-service: what the vnpu services (scheduler, device plugin, exporter) share around the core.

* ``vnpu_service.logs`` - ``configure``: structlog and stdlib records as JSON lines on stdout.
* ``vnpu_service.kubeapi`` - the Kubernetes API client from a kubeconfig or the service account,
  and the error hierarchy its failures are translated into.
* ``vnpu_service.watch`` - watch streams and ``Reflector``, the list-then-watch loop the
  scheduler's cache and the device plugin's pod watch run.
* ``vnpu_service.cli`` - the ``vnpu-service`` command (``vnpu-service api``: does the API answer).

Unlike ``vnpu_core`` this package does I/O and imports structlog and the Kubernetes client;
it imports no service package, no gRPC and no web framework.
"""

__version__ = "0.1.0"
