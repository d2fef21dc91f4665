"""Errors of the controller manager; every module of ``vnpu_sandbox.controllers`` raises these.

Only API calls fail at run time, so the hierarchy is short::

    ControllerError
    └── ApiError    a Kubernetes API call failed (verb, target, status, message);
                    ``status`` 0 means the server did not answer

The manager retries every failed sync with a backoff; ``unreachable`` tells it to report the
failure once for the whole process rather than once per object.
"""

from __future__ import annotations


class ControllerError(Exception):
    """Base of every error raised by the controller manager."""


class ApiError(ControllerError):
    """A Kubernetes API call failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, verb: str, target: str, status: int, message: str) -> None:
        self.verb = verb
        self.target = target
        self.status = status
        self.message = message
        super().__init__(f"{verb} {target}: HTTP {status}: {message}")

    @property
    def unreachable(self) -> bool:
        """The server did not answer (refused, reset, timed out)."""
        return self.status == 0

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        """409: the object changed under us, or a name is taken; a fresh read resolves it."""
        return self.status == 409

    @property
    def expired(self) -> bool:
        """410: a watch or list from a revision the server no longer has; relist."""
        return self.status == 410
