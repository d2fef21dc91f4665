"""Running a third-party process that reads files at fixed paths, without touching the host.

Some programs the sandbox runs read files from paths they do not let you configure: Kueue its
metrics certificate below ``/etc``, Volcano's scheduler the service-account token and CA a pod
finds below ``/run/secrets`` (the only way it reads the device ConfigMap). ``overlay`` wraps
such a command: it runs in a mount namespace of its own (``unshare``; a user namespace too
when not root) where a read-only overlay shows a directory of the sandbox's on top of the
host's directory. The host's directory stays untouched; the overlay goes when the process
does. ``kueue`` and ``peers`` call it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

_SCRIPT = 'mount -t overlay "$0" -o "lowerdir=$1:$2" "$2" && shift 2 && exec "$@"'


class MountError(Exception):
    """The overlay cannot be set up: ``unshare`` missing, or a path overlayfs cannot take."""


def unshare() -> str:
    """The ``unshare`` command (util-linux); MountError when it is not on PATH."""
    found = shutil.which("unshare")
    if found is None:
        raise MountError("the process runs in a mount namespace of its own: put `unshare` "
                         "(util-linux) on PATH")  # fmt: skip
    return found


def overlay(
    command: str, name: str, upper: Path, target: str, argv: Sequence[str]
) -> tuple[str, ...]:
    """``argv`` run where ``target`` shows the files of ``upper`` over its own (``name``
    labels the mount in /proc/mounts); ``command`` is ``unshare``'s path."""
    if ":" in str(upper) or "," in str(upper):  # overlayfs's separators
        raise MountError(f"{upper}: a path with ':' or ',' cannot be mounted over {target}")
    user = () if os.geteuid() == 0 else ("--user", "--map-root-user")
    return (
        command,
        "--mount",
        "--propagation",
        "private",
        *user,
        "/bin/sh",
        "-c",
        _SCRIPT,
        name,
        str(upper),
        target,
        *argv,
    )
