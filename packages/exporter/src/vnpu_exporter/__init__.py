"""vnpu-exporter: Prometheus metrics of one node's Ascend NPUs, vNPUs and the pods that hold them.

``__main__`` reads ``settings`` and wires the parts: ``sampler`` refreshes readings from the
NPU access layer (``vnpu_npu``), the Kubernetes API (``pods``), the kubelet
(``kubelet``, read into ``podresources``) and the device plugin's ledger (``ownership``) in the background;
``collector`` turns one snapshot per scrape into the families of ``metrics`` (and
``compat``'s npu-exporter names), tying allocations to pods with ``attribution``;
``server`` answers ``/metrics`` and ``/healthz``. ``dashboards`` generates the Grafana
dashboards from ``metrics``. Modules are imported by name (``from vnpu_exporter import
metrics``).
"""

__version__ = "0.1.0"
