"""Running kubectl against a sandbox, as a person would, for the demo and the e2e tests.

``Kubectl(kubeconfig)`` runs the ``kubectl`` on PATH with ``KUBECONFIG`` set; ``json`` runs a
command with ``-o json`` and parses the answer. A failing command raises ``KubectlError``
with the command line and kubectl's own message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any


class KubectlError(Exception):
    """kubectl is missing, or a command failed (the message quotes kubectl's stderr)."""


class Kubectl:
    def __init__(self, kubeconfig: str, binary: str | None = None) -> None:
        found = binary or shutil.which("kubectl")
        if found is None:
            raise KubectlError(
                "kubectl is not on PATH (Debian/Ubuntu: apt-get install kubernetes-client)"
            )
        self.binary = found
        self.env = {**os.environ, "KUBECONFIG": kubeconfig}

    def run(self, args: Sequence[str], timeout: float = 60.0) -> str:
        command = [self.binary, *args]
        try:
            done = subprocess.run(
                command, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise KubectlError(f"`kubectl {' '.join(args)}` took over {timeout:g} s") from exc
        if done.returncode != 0:
            raise KubectlError(f"`kubectl {' '.join(args)}` failed: {done.stderr.strip()}")
        return done.stdout

    def json(self, args: Sequence[str]) -> Any:
        return json.loads(self.run([*args, "-o", "json"]))

    def items(self, args: Sequence[str]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.json(args).get("items", [])
        return items
