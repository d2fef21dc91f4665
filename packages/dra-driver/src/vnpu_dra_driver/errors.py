"""The DRA driver's errors: one hierarchy, each error carrying the data that explains it.

``slices`` raises ``SliceError`` for inputs it cannot publish (nothing retrying can fix);
``publisher`` raises ``PublishError`` when the API refused or could not be reached, with
``retryable`` telling the caller whether the next sync may succeed unchanged. The kubelet
plugin's ``prepare`` raises ``ClaimError`` for a claim it cannot prepare or unprepare; the
gRPC server turns it into that claim's ``error`` in the answer (the kubelet retries)::

    DraDriverError
    ├── SliceError      a node's chips cannot become slices (field, value, reason)
    ├── PublishError    the pool could not be written (node, reason; retryable)
    ├── ClaimError      a claim cannot be (un)prepared (claim, device, reason; retryable)
    │   └── DeviceError an allocated device this node cannot give (device, reason)
    │       └── CapacityError  a soft slice asks what its chip cannot give (field, value)
    └── ClaimLedgerError the claim ledger cannot be read or written (path, reason)
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


class ClaimError(DraDriverError):
    """Claim ``claim`` (``namespace/name``) cannot be prepared or unprepared: ``reason``;
    ``device`` names the allocated device at fault, when one is."""

    def __init__(self, claim: str, reason: str, *, device: str = "", retryable: bool) -> None:
        self.claim = claim
        self.device = device
        self.reason = reason
        self.retryable = retryable
        where = f"claim {claim}" + (f" device {device}" if device else "")
        super().__init__(f"{where}: {reason}")


class DeviceError(ClaimError):
    """An allocated device of ``claim`` that this node cannot give (unknown name, no such chip,
    a template the chip's model lacks): retrying never helps."""

    def __init__(self, claim: str, device: str, reason: str) -> None:
        super().__init__(claim, reason, device=device, retryable=False)


class CapacityError(DeviceError):
    """A soft device of ``claim`` whose consumed capacity ``field`` (``memory``,
    ``corePercent``) is ``value``, which its chip cannot give: ``reason``."""

    def __init__(self, claim: str, device: str, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        super().__init__(claim, device, f"consumedCapacity {field} {value}: {reason}")


class ClaimLedgerError(DraDriverError):
    """The claim ledger at ``path`` cannot be read or written: ``reason``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"claim ledger {path}: {reason}")
