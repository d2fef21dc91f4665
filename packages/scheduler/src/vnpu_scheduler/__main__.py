"""``vnpu-scheduler``: read the settings, connect to the cluster, serve until told to stop.

Exit status 2 means a setting (flag, environment variable, kubeconfig, device-config
file) is invalid; the message on stderr names it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

import structlog

from vnpu_scheduler import app, cluster, errors, server, settings
from vnpu_service import logs

# Connections beyond the API threads' own: each informer's watch holds one for as long as it
# streams. With fewer, the threads' calls find the pool full and open a TLS connection each.
WATCH_CONNECTIONS = 8


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = settings.from_args(argv)
    except errors.SettingsError as exc:
        print(f"vnpu-scheduler: {exc}", file=sys.stderr)
        return 2
    # Our own events take structlog's direct path: one line per request is written on the
    # event loop, so it has to be cheap. uvicorn's records join the same JSON stream; its
    # access line would repeat the app's line per request.
    logs.configure(
        config.log_level,
        quiet=("urllib3", "kubernetes", "uvicorn.access"),
        adopt=("uvicorn", "uvicorn.error", "uvicorn.access"),
        direct=True,
    )
    log = structlog.get_logger("vnpu_scheduler")
    try:
        pool = config.api_threads + WATCH_CONNECTIONS
        api = cluster.KubeCluster.connect(config.kubeconfig, config.api_timeout, pool)
        application = app.build(config, api, tune_gc=True)
    except errors.SettingsError as exc:
        log.error("bad_setting", field=exc.field, value=str(exc.value), problem=exc.problem)
        print(f"vnpu-scheduler: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(server.serve(application, config))
    finally:
        api.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
