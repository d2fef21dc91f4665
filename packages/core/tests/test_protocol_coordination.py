"""Table tests of the handshake and node-lock codecs against the values HAMi and Volcano write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from vnpu_core import coordination, errors, protocol

KEY = protocol.node_handshake_key("Ascend910B3")
Reported = coordination.HandshakeState.REPORTED
Requesting = coordination.HandshakeState.REQUESTING
Deleted = coordination.HandshakeState.DELETED
CST = timezone(timedelta(hours=8))

HANDSHAKES = [
    pytest.param(
        "Reported_2026.08.18 09:55:36", Reported, datetime(2026, 8, 18, 9, 55, 36), id="plugin"
    ),
    pytest.param(
        "Requesting_2026-08-18 09:56:05",
        Requesting,
        datetime(2026, 8, 18, 9, 56, 5),
        id="scheduler",
    ),
    pytest.param(
        "Deleted_2026-08-18 09:57:00", Deleted, datetime(2026, 8, 18, 9, 57), id="deleted"
    ),
]


@pytest.mark.parametrize(("value", "state", "time"), HANDSHAKES)
def test_handshake_round_trips_in_its_writers_layout(
    value: str, state: coordination.HandshakeState, time: datetime
) -> None:
    handshake = coordination.decode_handshake(KEY, value)
    assert handshake == coordination.Handshake(state, time)
    assert coordination.encode_handshake(handshake) == value


@pytest.mark.parametrize(
    ("value", "state"),
    [
        ("Requesting_2026.08.18 09:56:05", Requesting),  # older HAMi schedulers
        ("Deleted_2026.08.18 09:57:00", Deleted),  # older HAMi schedulers
        ("Reported_2026-08-18 09:55:36", Reported),
    ],
)
def test_handshake_accepts_either_layout_for_any_state(
    value: str, state: coordination.HandshakeState
) -> None:
    handshake = coordination.decode_handshake(KEY, value)
    assert handshake.state is state
    assert handshake.time == datetime(2026, 8, 18, 9, int(value[-5:-3]), int(value[-2:]))


def test_handshake_drops_sub_seconds_and_refuses_aware_time() -> None:
    h = coordination.Handshake(Reported, datetime(2026, 8, 18, 9, 55, 36, 999_999))
    assert coordination.encode_handshake(h) == "Reported_2026.08.18 09:55:36"
    with pytest.raises(ValueError, match="naive"):
        coordination.Handshake(Reported, datetime(2026, 8, 18, tzinfo=UTC))


BAD_HANDSHAKES = [
    pytest.param("", "", id="empty"),
    pytest.param("Reported", "Reported", id="no-time"),
    pytest.param("Reported_", "Reported_", id="empty-time"),
    pytest.param("reported_2026.08.18 09:55:36", "reported", id="lowercase-state"),
    pytest.param("Healthy_2026.08.18 09:55:36", "Healthy", id="unknown-state"),
    pytest.param("Reported_2026.08-18 09:55:36", "2026.08-18 09:55:36", id="mixed-separators"),
    pytest.param("Reported_2026.08.18 9:55:36", "2026.08.18 9:55:36", id="one-digit-hour"),
    pytest.param("Reported_2026.08.18T09:55:36", "2026.08.18T09:55:36", id="iso-t"),
    pytest.param("Reported_2026.13.18 09:55:36", "2026.13.18 09:55:36", id="month-13"),
    pytest.param("Requesting_2026-02-30 09:55:36", "2026-02-30 09:55:36", id="february-30"),
]


@pytest.mark.parametrize(("value", "fragment"), BAD_HANDSHAKES)
def test_handshake_rejects_malformed_values(value: str, fragment: str) -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        coordination.decode_handshake(KEY, value)
    assert (caught.value.key, caught.value.fragment) == (KEY, fragment)


# --- node lock ----------------------------------------------------------------------------

LOCKS = [
    pytest.param(
        "2026-08-18T09:56:10+08:00,default,npu-job-0",
        coordination.NodeLock(datetime(2026, 8, 18, 9, 56, 10, tzinfo=CST), "default", "npu-job-0"),
        id="hami",
    ),
    pytest.param(
        "2026-08-18T01:56:10Z",
        coordination.NodeLock(datetime(2026, 8, 18, 1, 56, 10, tzinfo=UTC)),
        id="volcano-utc",
    ),
    pytest.param(
        "2026-08-17T20:26:10-05:30,ml,train-1",
        coordination.NodeLock(
            datetime(2026, 8, 17, 20, 26, 10, tzinfo=timezone(-timedelta(hours=5, minutes=30))),
            "ml",
            "train-1",
        ),
        id="negative-offset",
    ),
]


@pytest.mark.parametrize(("value", "lock"), LOCKS)
def test_lock_round_trips_byte_for_byte(value: str, lock: coordination.NodeLock) -> None:
    decoded = coordination.decode_lock(value)
    assert decoded == lock
    assert (decoded.namespace, decoded.name) == (lock.namespace, lock.name)
    assert coordination.encode_lock(decoded) == value


def test_lock_reads_go_fractional_seconds_and_writes_whole_seconds() -> None:
    lock = coordination.decode_lock("2026-08-18T09:56:10.123456789+08:00,default,p")
    assert lock.time == datetime(2026, 8, 18, 9, 56, 10, 123456, tzinfo=CST)
    assert coordination.encode_lock(lock) == "2026-08-18T09:56:10+08:00,default,p"


@pytest.mark.parametrize(
    ("offset", "written"),
    [
        (timedelta(0), "Z"),
        (timedelta(seconds=-30), "+00:00"),  # Go truncates to whole minutes before signing
        (-timedelta(hours=1, seconds=1), "-01:00"),
        (timedelta(hours=5, minutes=45), "+05:45"),
    ],
)
def test_lock_writes_offsets_as_go_does(offset: timedelta, written: str) -> None:
    lock = coordination.NodeLock(datetime(2026, 8, 18, 9, 56, 10, tzinfo=timezone(offset)))
    assert coordination.encode_lock(lock) == "2026-08-18T09:56:10" + written


def test_lock_ownership() -> None:
    lock = coordination.decode_lock("2026-08-18T09:56:10+08:00,default,npu-job-0")
    assert lock.owned_by("default", "npu-job-0")
    assert not lock.owned_by("default", "npu-job-1")
    assert not lock.owned_by("other", "npu-job-0")
    assert not coordination.decode_lock("2026-08-18T09:56:10+08:00").owned_by(
        "default", "npu-job-0"
    )


def test_lock_expiry_is_strictly_older_than_ttl() -> None:
    lock = coordination.decode_lock("2026-08-18T09:56:10+08:00,default,p")
    ttl = timedelta(minutes=5)
    taken = datetime(2026, 8, 18, 1, 56, 10, tzinfo=UTC)  # the same instant, in UTC
    assert not lock.expired(taken + ttl, ttl)
    assert lock.expired(taken + ttl + timedelta(seconds=1), ttl)
    with pytest.raises(ValueError, match="timezone-aware"):
        lock.expired(datetime(2026, 8, 18, 2, 0), ttl)


BAD_LOCKS = [
    pytest.param("", "", id="empty"),
    pytest.param(
        "2026-08-18T09:56:10+08:00,default", "2026-08-18T09:56:10+08:00,default", id="two-parts"
    ),
    pytest.param("t,a,b,c", "t,a,b,c", id="four-parts"),
    pytest.param(
        "2026-08-18T09:56:10+08:00,,p", "2026-08-18T09:56:10+08:00,,p", id="empty-namespace"
    ),
    pytest.param(
        "2026-08-18 09:56:10+08:00,default,p", "2026-08-18 09:56:10+08:00", id="space-not-t"
    ),
    pytest.param("2026-08-18T09:56:10", "2026-08-18T09:56:10", id="no-offset"),
    pytest.param("2026-08-18T09:56:10+0800", "2026-08-18T09:56:10+0800", id="offset-without-colon"),
    pytest.param("2026-02-30T09:56:10Z", "2026-02-30T09:56:10Z", id="february-30"),
    pytest.param("2026-08-18T09:56:60Z", "2026-08-18T09:56:60Z", id="second-60"),
    pytest.param("2026-08-18T09:56:10+24:00", "2026-08-18T09:56:10+24:00", id="offset-24h"),
    pytest.param("1786000000,default,p", "1786000000", id="unix-seconds"),
]


@pytest.mark.parametrize(("value", "fragment"), BAD_LOCKS)
def test_lock_rejects_malformed_values(value: str, fragment: str) -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        coordination.decode_lock(value)
    assert (caught.value.key, caught.value.fragment) == (protocol.NODE_LOCK_KEY, fragment)


@pytest.mark.parametrize(
    ("time", "namespace", "name", "problem"),
    [
        (datetime(2026, 8, 18), "default", "p", "timezone-aware"),
        (datetime(2026, 8, 18, tzinfo=UTC), "default", None, "together"),
        (datetime(2026, 8, 18, tzinfo=UTC), "default", "a,b", "','"),
        (datetime(2026, 8, 18, tzinfo=UTC), "", "p", "non-empty"),
    ],
)
def test_lock_values_check_their_fields(
    time: datetime, namespace: str | None, name: str | None, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        coordination.NodeLock(time, namespace, name)
