"""The DRA driver's errors: one hierarchy, each error carrying the data that explains it.

``slices`` raises ``SliceError`` for inputs it cannot publish (nothing retrying can fix);
``publisher`` raises ``PublishError`` when the API refused or could not be reached, with
``retryable`` telling the caller whether the next sync may succeed unchanged::

    DraDriverError
    ├── SliceError      a node's chips cannot become slices (field, value, reason)
    └── PublishError    the pool could not be written (node, reason; retryable)
"""

from __future__ import annotations


class DraDriverError(Exception):
    """Base of every error this package raises."""

    retryable = False


class SliceError(DraDriverError):
    """``field`` = ``value`` cannot be published as a ResourceSlice, because ``reason``."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}={value!r}: {reason}")


class PublishError(DraDriverError):
    """The slices of ``node`` could not be published: ``reason``."""

    def __init__(self, node: str, reason: str, *, retryable: bool) -> None:
        self.node = node
        self.reason = reason
        self.retryable = retryable
        super().__init__(f"node {node}: {reason}")
