"""Property tests: every codec round-trips, erasure matches HAMi's algorithm, decoders only raise ProtocolError."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from vnpu_core import coordination, errors, gojson, protocol

KEY = "hami.io/Ascend910B3-devices-to-allocate"

tokens = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters=",:;"),
    min_size=1,
    max_size=12,
).filter(lambda text: not any(c.isspace() for c in text))
anything = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
int32 = st.integers(0, gojson.INT32_MAX)
int64 = st.integers(0, gojson.INT64_MAX)

device_entries = st.builds(protocol.DeviceEntry, tokens, tokens, int32, int32)
containers = st.lists(st.lists(device_entries, max_size=3).map(tuple), max_size=5).map(tuple)

chips = st.lists(
    st.builds(
        protocol.RegisteredChip,
        id=tokens,
        index=int64,
        count=int32,
        devmem=int32,
        devcore=int32,
        type=tokens,
        health=st.booleans(),
        network_id=st.none() | int64,
        numa=int64,
        mode=anything,
        vendor=anything,
    ),
    max_size=4,
    unique_by=lambda chip: chip.id,
)
runtime_infos = st.lists(
    st.builds(protocol.RuntimeInfo, tokens, st.none() | anything.filter(bool), int64, int32),
    max_size=4,
)

naive_times = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9998, 12, 31)).map(
    lambda t: t.replace(microsecond=0)
)
zones = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
k8s_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)


@given(containers)
def test_devices_round_trip(value: protocol.Containers) -> None:
    assert protocol.decode_devices(KEY, protocol.encode_devices(value)) == value


def hami_erase(value: str) -> str:
    """HAMi's plugin, step by step: split on ';' (tail kept), empty the first non-empty, re-join."""
    parts = value.split(";")
    first = next(i for i, part in enumerate(parts) if part)
    parts[first] = ""
    return "".join(part + ";" for part in parts)


@given(containers.filter(any))
def test_erase_equals_hamis_algorithm(value: protocol.Containers) -> None:
    text = protocol.encode_devices(value)
    erased = protocol.erase_first_container(text, key=KEY)
    assert erased == hami_erase(text)
    assert erased == protocol.erase_first_container(value)
    first = next(i for i, devices in enumerate(value) if devices)
    expected = (*value[:first], (), *value[first + 1 :], ())
    assert protocol.decode_devices(KEY, erased) == expected


@given(chips)
def test_node_register_round_trips_as_go_json(value: list[protocol.RegisteredChip]) -> None:
    text = protocol.encode_node_register(value)
    assert not {"<", ">", "&", "\u2028", "\u2029"} & set(text)
    assert protocol.decode_node_register(KEY, text) == tuple(value)
    for element, chip in zip(json.loads(text), value, strict=True):
        assert ("health" in element) is chip.health
        assert ("index" in element) is (chip.index != 0)
        assert next(iter(element)) == "id"


@given(runtime_infos)
def test_runtime_round_trips(value: list[protocol.RuntimeInfo]) -> None:
    assert protocol.decode_runtime(KEY, protocol.encode_runtime(value)) == tuple(value)


@given(int64)
def test_timestamp_round_trips(seconds: int) -> None:
    assert protocol.decode_timestamp(KEY, protocol.encode_timestamp(seconds)) == seconds


@given(st.sampled_from(coordination.HandshakeState), naive_times)
def test_handshake_round_trips(state: coordination.HandshakeState, time: datetime) -> None:
    handshake = coordination.Handshake(state, time)
    assert coordination.decode_handshake(KEY, coordination.encode_handshake(handshake)) == handshake


@given(naive_times, zones, st.none() | st.tuples(k8s_names, k8s_names))
def test_lock_round_trips(time: datetime, zone: timezone, owner: tuple[str, str] | None) -> None:
    namespace, name = owner or (None, None)
    lock = coordination.NodeLock(time.replace(tzinfo=zone), namespace, name)
    decoded = coordination.decode_lock(coordination.encode_lock(lock))
    assert decoded == lock
    assert decoded.time.utcoffset() == lock.time.utcoffset()
    assert (decoded.namespace, decoded.name) == (namespace, name)


json_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | anything,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "type", "UUID", "memory", "custominfo", "NetworkID", "health"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=10,
).map(json.dumps)


@given(st.one_of(st.text(max_size=40), json_documents))
def test_decoders_raise_only_protocol_errors(value: str) -> None:
    decoders = (
        lambda: protocol.decode_node_register(KEY, value),
        lambda: protocol.decode_runtime(KEY, value),
        lambda: protocol.decode_devices(KEY, value),
        lambda: protocol.decode_timestamp(KEY, value),
        lambda: protocol.decode_bind_phase(value),
        lambda: coordination.decode_handshake(KEY, value),
        lambda: coordination.decode_lock(value),
    )
    refused: list[errors.ProtocolError] = []
    for decode in decoders:
        try:
            decode()
        except errors.ProtocolError as exc:
            refused.append(exc)
    # a fragment is a piece of the value, or a JSON path such as [2].devmem
    assert all(exc.fragment in value or exc.fragment.startswith("[") for exc in refused)
