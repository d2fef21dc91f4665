"""The two time-stamped node annotations the scheduler and the device plugin coordinate through.

* ``hami.io/node-handshake-<CW>``: the device plugin writes ``Reported_<time>`` each time it
  publishes its chips; the scheduler answers ``Requesting_<time>`` and judges the plugin
  dead when no new report arrives in time. HAMi once wrote ``Deleted_<time>`` too. The
  two writers use different Go time layouts (``2006.01.02 15:04:05`` for the plugin,
  ``2006-01-02 15:04:05`` for the scheduler), both naive local time.
* ``hami.io/mutex.lock``: the scheduler's Bind takes it as ``<RFC3339>,<namespace>,<pod>``
  (Volcano writes a bare RFC3339 time); the device plugin uses it to find the pod its
  next Allocate is for, and releases it.

The scheduler and the device plugin call these; the key constants live in
``vnpu_core.protocol``. Malformed values raise ``errors.ProtocolError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum

from vnpu_core import errors, protocol

# --- handshake ----------------------------------------------------------------------------


class HandshakeState(StrEnum):
    """Which side wrote the handshake last."""

    REPORTED = "reported"  # the device plugin published its chips
    REQUESTING = "requesting"  # the scheduler saw the report and waits for the next one
    DELETED = "deleted"  # older HAMi schedulers: the node's devices were dropped


_PREFIX = {
    HandshakeState.REPORTED: "Reported",
    HandshakeState.REQUESTING: "Requesting",
    HandshakeState.DELETED: "Deleted",
}
_STATE_BY_PREFIX = {word: state for state, word in _PREFIX.items()}
# The date separator each state is written with: the plugin uses Go layout
# "2006.01.02 15:04:05", the scheduler (and HAMi's last Deleted_ writer) "2006-01-02 15:04:05".
_DATE_SEPARATOR = {
    HandshakeState.REPORTED: ".",
    HandshakeState.REQUESTING: "-",
    HandshakeState.DELETED: "-",
}
_HANDSHAKE_TIME = re.compile(
    r"(?P<y>[0-9]{4})(?P<sep>[.-])(?P<mo>[0-9]{2})(?P=sep)(?P<d>[0-9]{2}) "
    r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
)


@dataclass(frozen=True, slots=True)
class Handshake:
    """A handshake value; ``time`` is naive local time, whole seconds on the wire."""

    state: HandshakeState
    time: datetime

    def __post_init__(self) -> None:
        if self.time.tzinfo is not None:
            raise ValueError(f"handshake time must be naive local time, got {self.time!r}")


def encode_handshake(handshake: Handshake) -> str:
    """``<Prefix>_<time>`` in the layout the state's writer uses; sub-seconds are dropped."""
    t = handshake.time
    sep = _DATE_SEPARATOR[handshake.state]
    stamp = (
        f"{t.year:04d}{sep}{t.month:02d}{sep}{t.day:02d} {t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    )
    return f"{_PREFIX[handshake.state]}_{stamp}"


def decode_handshake(key: str, value: str) -> Handshake:
    """A handshake in either layout for any state."""
    prefix, _, stamp = value.partition("_")
    state = _STATE_BY_PREFIX.get(prefix)
    if state is None:
        known = ", ".join(f"{word}_" for word in _PREFIX.values())
        raise errors.ProtocolError(key, prefix, f"handshake must start with one of {known}")
    match = _HANDSHAKE_TIME.fullmatch(stamp)
    if match is None:
        raise errors.ProtocolError(
            key, stamp or value, "time must be 'YYYY.MM.DD HH:MM:SS' or 'YYYY-MM-DD HH:MM:SS'"
        )
    try:
        time = _civil_time(match)
    except ValueError as exc:
        raise errors.ProtocolError(key, stamp, f"not a valid time: {exc}") from exc
    return Handshake(state, time)


def _civil_time(match: re.Match[str]) -> datetime:
    """The naive date and time of a match with groups y, mo, d, h, mi, s."""
    return datetime(
        int(match["y"]),
        int(match["mo"]),
        int(match["d"]),
        int(match["h"]),
        int(match["mi"]),
        int(match["s"]),
    )


# --- node lock ----------------------------------------------------------------------------

_RFC3339 = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})"
    r"T(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})(?:\.(?P<frac>[0-9]{1,9}))?"
    r"(?:(?P<utc>Z)|(?P<sign>[+-])(?P<oh>[0-9]{2}):(?P<om>[0-9]{2}))"
)


@dataclass(frozen=True, slots=True)
class NodeLock:
    """The node lock: when it was taken and, for HAMi's form, by which pod.

    A Volcano lock has no owner (``namespace`` and ``name`` are None) and is owned by nobody.
    """

    time: datetime  # timezone-aware
    namespace: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if self.time.utcoffset() is None:
            raise ValueError(f"lock time must be timezone-aware, got {self.time!r}")
        if (self.namespace is None) != (self.name is None):
            raise ValueError("lock namespace and name are given together or not at all")
        for part in (self.namespace, self.name):
            if part is not None and (not part or "," in part):
                raise ValueError(
                    f"lock owner parts must be non-empty and free of ',', got {part!r}"
                )

    def owned_by(self, namespace: str, name: str) -> bool:
        """Whether pod ``namespace/name`` holds this lock."""
        return self.namespace == namespace and self.name == name

    def expired(self, now: datetime, ttl: timedelta) -> bool:
        """Whether the lock is older than ``ttl`` at ``now`` (timezone-aware), as HAMi judges it."""
        if now.utcoffset() is None:
            raise ValueError(f"now must be timezone-aware, got {now!r}")
        return now - self.time > ttl


def _format_rfc3339(t: datetime) -> str:
    """Go's ``time.RFC3339`` layout: whole seconds, ``Z`` for a zero offset, else ``±hh:mm``."""
    offset = t.utcoffset()
    assert offset is not None
    seconds = int(offset.total_seconds())
    if seconds == 0:
        zone = "Z"
    else:
        minutes = abs(seconds) // 60  # Go truncates the offset to whole minutes, then signs it
        sign = "-" if seconds < 0 and minutes else "+"
        zone = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{t.hour:02d}:{t.minute:02d}:{t.second:02d}{zone}"
    )


def _parse_rfc3339(stamp: str) -> datetime:
    """Parse what Go's ``time.Parse(time.RFC3339, ...)`` accepts (fraction beyond µs dropped)."""
    match = _RFC3339.fullmatch(stamp)
    if match is None:
        raise ValueError("must be an RFC 3339 time such as 2026-08-18T09:56:10+08:00")
    if match["utc"]:
        zone = UTC
    else:
        hours, minutes = int(match["oh"]), int(match["om"])
        if hours > 23 or minutes > 59:
            raise ValueError(f"offset {match['oh']}:{match['om']} is out of range")
        delta = timedelta(hours=hours, minutes=minutes)
        zone = timezone(-delta if match["sign"] == "-" else delta)
    micros = int((match["frac"] or "0").ljust(6, "0")[:6])
    return _civil_time(match).replace(microsecond=micros, tzinfo=zone)


def encode_lock(lock: NodeLock) -> str:
    """``<RFC3339>,<namespace>,<pod>``, or the bare time for an owner-less lock."""
    stamp = _format_rfc3339(lock.time)
    if lock.namespace is None or lock.name is None:
        return stamp
    return f"{stamp},{lock.namespace},{lock.name}"


def decode_lock(value: str) -> NodeLock:
    """HAMi's ``<RFC3339>,<namespace>,<pod>`` or Volcano's bare RFC3339 time."""
    key = protocol.NODE_LOCK_KEY
    parts = value.split(",")
    if len(parts) not in (1, 3):
        raise errors.ProtocolError(
            key, value, f"lock is '<time>' or '<time>,<namespace>,<pod>', got {len(parts)} parts"
        )
    if len(parts) == 3 and not (parts[1] and parts[2]):
        raise errors.ProtocolError(key, value, "lock owner namespace and pod must not be empty")
    try:
        time = _parse_rfc3339(parts[0])
    except ValueError as exc:
        raise errors.ProtocolError(key, parts[0], str(exc)) from exc
    if len(parts) == 1:
        return NodeLock(time)
    return NodeLock(time, parts[1], parts[2])
