"""vnpu-scheduler: the kube-scheduler extender and admission webhook for Ascend NPUs.

``__main__`` reads the settings and serves ``app.build``; the modules are imported by
name (``from vnpu_scheduler import extender``).
"""

__version__ = "0.1.0"
