"""A Kubernetes API server emulator for the resources vnpu uses, over real HTTP.

Clients (the ``kubernetes`` Python client, kubectl, the vnpu services) use it unchanged.
Modules, from the wire inwards: ``server`` (settings, app, uvicorn), ``routes`` (dispatch),
``paths`` (URL shapes), ``codec`` (bodies and media types), ``schemas`` (field types),
``discovery``, ``tables`` (kubectl printing), ``watch`` (streams), ``admission`` (webhooks),
``registry`` (verb semantics), ``lists`` (paging), ``strategies`` (per-kind rules),
``quantities`` (canonical resource quantities), ``patches``, ``selectors``, ``store`` (objects, revisions, event history), ``persistence``
(``--state``), ``resources`` (the served types) and ``errors``. Programs embed it with
``harness.serve()`` and ``harness.write_kubeconfig()``; the CLI entry is ``command``.
"""
