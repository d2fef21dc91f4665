"""The ``vnpu-service`` command: check that a kubeconfig reaches the Kubernetes API as the services would.

``vnpu-service api [--kubeconfig PATH] [--timeout SECONDS]`` builds the API client with
``kubeapi.client`` (the kubeconfig file, or the pod's service account without one), asks the
server for ``/version`` and prints one JSON object on stdout: the server's address and version,
or the error class, status, reason, message and whether a retry can help, exactly as a vnpu
service would see that failure. Called by operators (``kubectl exec`` into a vnpu pod) and by
this package's tests.

Exit status: 0 when the API answered, 1 when it refused or could not be reached, 2 when no
client could be built (the kubeconfig or the service account is unusable).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes

from vnpu_service import kubeapi


def version(api_client: kubernetes.client.ApiClient, timeout: float) -> dict[str, Any]:
    """The API server's ``/version`` document; raises ``kubeapi.ApiError``."""
    versions = kubernetes.client.VersionApi(api_client)
    return kubeapi.fetch(
        lambda: versions.get_code(_preload_content=False, _request_timeout=timeout),
        "get /version",
    )


def check(kubeconfig: Path | None, timeout: float) -> tuple[int, dict[str, Any]]:
    """The exit status and the report of one ``/version`` call through ``kubeconfig``."""
    try:
        api_client = kubeapi.client(kubeconfig)
    except kubeapi.ConfigError as exc:
        return 2, {
            "ok": False,
            "error": "ConfigError",
            "source": exc.source,
            "problem": exc.problem,
        }
    try:
        answer = version(api_client, timeout)
    except kubeapi.ApiError as exc:
        return 1, {
            "ok": False,
            "server": api_client.configuration.host,
            "error": type(exc).__name__,
            "status": exc.status,
            "reason": exc.reason,
            "message": exc.message,
            "retryable": exc.retryable,
        }
    finally:
        kubeapi.close(api_client)
    return 0, {
        "ok": True,
        "server": api_client.configuration.host,
        "version": str(answer.get("gitVersion") or ""),
    }


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number (got {text!r})") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0 seconds (got {text!r})")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="vnpu-service", description="Shared plumbing of the vnpu services."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    api = commands.add_parser(
        "api", help="ask the Kubernetes API for its version through the services' client"
    )
    api.add_argument(
        "--kubeconfig", type=Path, help="kubeconfig file (default: the pod's service account)"
    )
    api.add_argument(
        "--timeout", type=_positive, default=10.0, help="seconds to wait for the answer"
    )
    args = parser.parse_args(argv)
    status, report = check(args.kubeconfig, args.timeout)
    sys.stdout.write(json.dumps(report) + "\n")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
