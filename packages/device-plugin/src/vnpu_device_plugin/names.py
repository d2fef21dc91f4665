"""Names of pods, namespaces and containers as the plugin accepts them, whatever the API let through.

The plugin puts these names in host paths (hami-vnpu-core's per-container directory
``containers/<pod UID>_<container>``), in its state files and in node annotations, so it
checks them itself before using them: an API server or a webhook that lets
``../../../escaped`` through must not make the plugin create or mount a directory outside
its own. The rules are Kubernetes' own:

* container names and namespaces: DNS-1123 labels (lower-case letters, digits and ``-``,
  starting and ending with a letter or digit, at most 63 characters);
* pod names: DNS-1123 subdomains (labels joined by ``.``, at most 253 characters), as the
  API server validates them; the grammar allows no ``/``, no empty label and so no ``..``;
* pod UIDs: UUIDs (``8-4-4-4-12`` hexadecimal digits), as the API server generates them.

Each check raises ``errors.InvalidName`` naming the field (``metadata.namespace``,
``spec.containers[1].name``, ...) and the value. ``podplan`` calls them for every pod it
reads; ``environment`` checks the directory it builds stays under ``containers/``.
"""

from __future__ import annotations

import re

from vnpu_device_plugin import errors

_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
LABEL_MAX = 63
SUBDOMAIN_MAX = 253


def label(pod: str, field: str, value: object) -> str:
    """``value`` when it is a DNS-1123 label, else ``errors.InvalidName``."""
    if not isinstance(value, str) or len(value) > LABEL_MAX or not _LABEL.fullmatch(value):
        raise errors.InvalidName(
            pod,
            field,
            value,
            f"not a DNS-1123 label (lower-case letters, digits and '-', at most {LABEL_MAX})",
        )
    return value


def subdomain(pod: str, field: str, value: object) -> str:
    """``value`` when it is a DNS-1123 subdomain, else ``errors.InvalidName``."""
    if not isinstance(value, str) or len(value) > SUBDOMAIN_MAX or not _SUBDOMAIN.fullmatch(value):
        raise errors.InvalidName(
            pod,
            field,
            value,
            "not a DNS-1123 subdomain (labels of lower-case letters, digits and '-' "
            f"joined by '.', at most {SUBDOMAIN_MAX})",
        )
    return value


def uid(pod: str, field: str, value: object) -> str:
    """``value`` when it is a UUID, else ``errors.InvalidName``."""
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        raise errors.InvalidName(pod, field, value, "not a UUID (8-4-4-4-12 hexadecimal digits)")
    return value
