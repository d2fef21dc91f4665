"""Table tests of the annotation codecs against the values HAMi and Volcano write."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from vnpu_core import errors, gojson, protocol

D310 = "D7E96E64-2060C1F1-E8E618E4-AED8030A-94003019"
D910 = "7866F664-80406578-6B60A233-E0500485-104301E3"
REGISTER_KEY = protocol.node_register_key("Ascend910B3")
DEVICES_KEY = protocol.to_allocate_key("Ascend310P")
RUNTIME_KEY = protocol.runtime_key("Ascend910B3")


def test_keys_follow_the_peers() -> None:
    cw = "Ascend310P"
    assert protocol.node_register_key(cw) == "hami.io/node-register-Ascend310P"
    assert protocol.node_handshake_key(cw) == "hami.io/node-handshake-Ascend310P"
    assert protocol.to_allocate_key(cw) == "hami.io/Ascend310P-devices-to-allocate"
    assert protocol.allocated_key(cw) == "hami.io/Ascend310P-devices-allocated"
    assert protocol.runtime_key(cw) == "huawei.com/Ascend310P"
    assert protocol.use_uuid_key(cw) == "hami.io/use-Ascend310P-uuid"
    assert protocol.no_use_uuid_key(cw) == "hami.io/no-use-Ascend310P-uuid"
    assert protocol.SOFT_MODE_NODE_KEY == "hami-vnpu-core"
    assert protocol.NODE_LOCK_KEY == "hami.io/mutex.lock"
    assert protocol.VGPU_NODE_KEY == "hami.io/vgpu-node"
    assert protocol.VGPU_TIME_KEY == "hami.io/vgpu-time"
    assert protocol.BIND_PHASE_KEY == "hami.io/bind-phase"
    assert protocol.BIND_TIME_KEY == "hami.io/bind-time"
    assert protocol.PREDICATE_TIME_KEY == "predicate-time"
    assert protocol.VNPU_MODE_KEY == "huawei.com/vnpu-mode"
    assert protocol.SOFT_MODE_VALUE == "hami-core"
    assert protocol.DEVICE_POLICY_KEY == "hami.io/gpu-scheduler-policy"
    assert protocol.NODE_POLICY_KEY == "hami.io/node-scheduler-policy"
    assert (protocol.WEBHOOK_IGNORE_KEY, protocol.WEBHOOK_IGNORE_VALUE) == (
        "hami.io/webhook",
        "ignore",
    )


# --- node register ------------------------------------------------------------------------

CHIP_910 = protocol.RegisteredChip(
    id=D910,
    index=5,
    count=4,
    devmem=65536,
    devcore=20,
    type="Ascend910B3",
    health=True,
    network_id=1,
)

REGISTER_EXAMPLES = [
    pytest.param(
        '[{"id":"' + D910 + '","index":5,"count":4,"devmem":65536,"devcore":20,'
        '"type":"Ascend910B3","health":true,"custominfo":{"NetworkID":1}}]',
        (CHIP_910,),
        id="hami-910B3",
    ),
    pytest.param(
        '[{"id":"'
        + D310
        + '","count":7,"devmem":21527,"devcore":8,"type":"Ascend310P","health":true}]',
        (protocol.RegisteredChip(D310, 0, 7, 21527, 8, "Ascend310P", True, None),),
        id="volcano-310P-index-0-omitted",
    ),
    pytest.param(
        '[{"id":"a0","count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","custominfo":{"NetworkID":0}},'
        '{"id":"a1","index":1,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3","health":true,'
        '"custominfo":{"NetworkID":0}}]',
        (
            protocol.RegisteredChip("a0", 0, 4, 65536, 20, "Ascend910B3", False, 0),
            protocol.RegisteredChip("a1", 1, 4, 65536, 20, "Ascend910B3", True, 0),
        ),
        id="unhealthy-health-omitted-network-0-kept",
    ),
    pytest.param(
        '[{"id":"s0","count":8,"devmem":21527,"devcore":100,"type":"Ascend310P","numa":1,'
        '"mode":"hami-core","health":true,"devicevendor":"Ascend310P"}]',
        (
            protocol.RegisteredChip(
                "s0", 0, 8, 21527, 100, "Ascend310P", True, None, 1, "hami-core", "Ascend310P"
            ),
        ),
        id="soft-mode-every-field",
    ),
    pytest.param("[]", (), id="no-chips"),
]


@pytest.mark.parametrize(("value", "chips"), REGISTER_EXAMPLES)
def test_node_register_round_trips_byte_for_byte(
    value: str, chips: tuple[protocol.RegisteredChip, ...]
) -> None:
    assert protocol.decode_node_register(REGISTER_KEY, value) == chips
    assert protocol.encode_node_register(chips) == value


def test_node_register_ignores_fields_added_by_later_versions() -> None:
    value = (
        '[{"id":"'
        + D910
        + '","index":5,"count":4,"devmem":65536,"devcore":20,"type":"Ascend910B3",'
        '"migtemplate":[],"migProfiles":null,"health":true,"custominfo":{"NetworkID":1,"Extra":"x"},'
        '"devicepairscore":{}}]'
    )
    assert protocol.decode_node_register(REGISTER_KEY, value) == (CHIP_910,)


def test_node_register_escapes_like_go() -> None:
    chip = protocol.RegisteredChip("c0", 0, 1, 1, 1, "Ascend310P", True, None, mode="a<b>&c\u2028é")
    assert '"mode":"a\\u003cb\\u003e\\u0026c\\u2028é"' in protocol.encode_node_register([chip])
    assert protocol.decode_node_register(REGISTER_KEY, protocol.encode_node_register([chip])) == (
        chip,
    )


GOOD = '{"id":"a","type":"Ascend910B3"}'

BAD_REGISTER = [
    pytest.param("", "", id="empty"),
    pytest.param("{}", "{}", id="object-not-array"),
    pytest.param("null", "null", id="null"),
    pytest.param("[1]", "[0]", id="element-not-object"),
    pytest.param('[{"id":"a","type":"T"', "", id="truncated"),
    pytest.param(
        f'[{GOOD},{{"id":"b","type":"T"}},{{"id":"c","type":"T","devmem":"x"}}]',
        "[2].devmem",
        id="devmem-string",
    ),
    pytest.param('[{"id":"a","type":"T","count":1.5}]', "[0].count", id="count-float"),
    pytest.param('[{"id":"a","type":"T","count":1.0}]', "[0].count", id="count-float-integral"),
    pytest.param('[{"id":"a","type":"T","count":true}]', "[0].count", id="count-bool"),
    pytest.param('[{"id":"a","type":"T","count":-1}]', "[0].count", id="count-negative"),
    pytest.param(
        '[{"id":"a","type":"T","devcore":2147483648}]', "[0].devcore", id="devcore-over-int32"
    ),
    pytest.param('[{"id":"a","type":"T","index":-1}]', "[0].index", id="index-negative"),
    pytest.param('[{"id":"a","type":"T","health":"true"}]', "[0].health", id="health-string"),
    pytest.param('[{"type":"T"}]', "[0].id", id="id-missing"),
    pytest.param('[{"id":"a,b","type":"T"}]', "[0].id", id="id-with-comma"),
    pytest.param('[{"id":"a"}]', "[0].type", id="type-missing"),
    pytest.param('[{"id":"a","type":"T","mode":7}]', "[0].mode", id="mode-number"),
    pytest.param('[{"id":"a","type":"T","custominfo":[]}]', "[0].custominfo", id="custominfo-list"),
    pytest.param(
        '[{"id":"a","type":"T","custominfo":{"NetworkID":"1"}}]',
        "[0].custominfo.NetworkID",
        id="network-string",
    ),
    pytest.param(f"[{GOOD},{GOOD}]", "[1].id", id="duplicate-id"),
]


@pytest.mark.parametrize(("value", "fragment"), BAD_REGISTER)
def test_node_register_rejects_malformed_values(value: str, fragment: str) -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        protocol.decode_node_register(REGISTER_KEY, value)
    assert caught.value.key == REGISTER_KEY
    assert caught.value.fragment == fragment


def test_node_register_rejects_nan_naming_the_value() -> None:
    value = '[{"id":"a","type":"T","devmem":NaN}]'
    with pytest.raises(errors.ProtocolError, match="NaN") as caught:
        protocol.decode_node_register(REGISTER_KEY, value)
    assert caught.value.fragment == value[:40]


# --- devices grammar -----------------------------------------------------------------------


def entry(
    uuid: str, memory: int, cores: int = 0, kind: str = "Ascend910B3"
) -> protocol.DeviceEntry:
    return protocol.DeviceEntry(uuid, kind, memory, cores)


DEVICE_EXAMPLES = [
    pytest.param(
        f"{D310},Ascend310P,6144,0:;", ((entry(D310, 6144, kind="Ascend310P"),),), id="310P-vir02"
    ),
    pytest.param(
        ";U1,Ascend910B3,65536,0:U2,Ascend910B3,65536,0:;",
        ((), (entry("U1", 65536), entry("U2", 65536))),
        id="second-container-two-whole-chips",
    ),
    pytest.param(
        "u1,Ascend910B3,65536,0:u2,Ascend910B3,65536,0:;",
        ((entry("u1", 65536), entry("u2", 65536)),),
        id="volcano-two-whole-chips",
    ),
    pytest.param(
        "u1,Ascend310P,4096,90:;",
        ((entry("u1", 4096, 90, "Ascend310P"),),),
        id="soft-mode-core-percent",
    ),
    pytest.param(
        "i,Ascend310P,3072,0:;;m,Ascend310P,3072,0:;",
        ((entry("i", 3072, kind="Ascend310P"),), (), (entry("m", 3072, kind="Ascend310P"),)),
        id="init-first-empty-kept",
    ),
    pytest.param(";;", ((), ()), id="erased-by-plugin"),
    pytest.param("", (), id="empty-annotation"),
]


@pytest.mark.parametrize(("value", "containers"), DEVICE_EXAMPLES)
def test_devices_round_trip_byte_for_byte(value: str, containers: protocol.Containers) -> None:
    assert protocol.decode_devices(DEVICES_KEY, value) == containers
    assert protocol.encode_devices(containers) == value


BAD_DEVICES = [
    pytest.param("U1,Ascend310P,6144,0:", "U1,Ascend310P,6144,0:", id="container-not-closed"),
    pytest.param("A,Ascend310P,1,0:;garbage", "garbage", id="trailing-garbage"),
    pytest.param("U1,Ascend310P,6144,0;", "U1,Ascend310P,6144,0", id="device-not-closed"),
    pytest.param("U1,Ascend310P,6144:;", "U1,Ascend310P,6144", id="three-fields"),
    pytest.param("U1,Ascend310P,6144,0,x:;", "U1,Ascend310P,6144,0,x", id="five-fields"),
    pytest.param("U1,Ascend310P,abc,0:;", "U1,Ascend310P,abc,0", id="memory-not-a-number"),
    pytest.param("U1,Ascend310P,-1,0:;", "U1,Ascend310P,-1,0", id="memory-negative"),
    pytest.param(
        "U1,Ascend310P,2147483648,0:;", "U1,Ascend310P,2147483648,0", id="memory-over-int32"
    ),
    pytest.param("U1,Ascend310P,1,+5:;", "U1,Ascend310P,1,+5", id="cores-signed"),
    pytest.param("U1,Ascend310P,\u0661,0:;", "U1,Ascend310P,\u0661,0", id="memory-non-ascii-digit"),
    pytest.param(",Ascend310P,1,0:;", ",Ascend310P,1,0", id="uuid-empty"),
    pytest.param("U 1,Ascend310P,1,0:;", "U 1,Ascend310P,1,0", id="uuid-with-space"),
    pytest.param("U1,,1,0:;", "U1,,1,0", id="type-empty"),
    pytest.param("U1,Ascend310P,1,0::;", "U1,Ascend310P,1,0::", id="empty-device"),
]


@pytest.mark.parametrize(("value", "fragment"), BAD_DEVICES)
def test_devices_reject_malformed_values(value: str, fragment: str) -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        protocol.decode_devices(DEVICES_KEY, value)
    assert caught.value.key == DEVICES_KEY
    assert caught.value.fragment == fragment


ERASURES = [
    pytest.param(f"{D310},Ascend310P,6144,0:;", 1, ";;", id="single-container"),
    pytest.param(
        ";U1,Ascend910B3,65536,0:U2,Ascend910B3,65536,0:;", 1, ";;;", id="second-container"
    ),
    pytest.param(
        "A,Ascend310P,3072,0:;B,Ascend310P,3072,0:;",
        1,
        ";B,Ascend310P,3072,0:;;",
        id="first-of-two",
    ),
    pytest.param(";B,Ascend310P,3072,0:;;", 1, ";;;;", id="second-allocate-grows-again"),
    pytest.param("A,Ascend310P,3072,0:;B,Ascend310P,3072,0:;", 2, ";;;", id="two-in-one-allocate"),
    pytest.param(
        "i,Ascend310P,1,0:;;m,Ascend310P,1,0:;",
        1,
        ";;m,Ascend310P,1,0:;;",
        id="init-container-first",
    ),
]


@pytest.mark.parametrize(("value", "count", "erased"), ERASURES)
def test_erase_matches_hami_plugin_output(value: str, count: int, erased: str) -> None:
    assert protocol.erase_first_container(value, key=DEVICES_KEY, count=count) == erased
    decoded = protocol.decode_devices(DEVICES_KEY, value)
    assert protocol.erase_first_container(decoded, count=count) == erased


@pytest.mark.parametrize("value", [";;", "", "A,Ascend310P,1,0:;;"])
def test_erase_without_enough_pending_containers_is_a_protocol_error(value: str) -> None:
    count = 2 if value.startswith("A") else 1
    with pytest.raises(errors.ProtocolError, match="left to serve") as caught:
        protocol.erase_first_container(value, key=DEVICES_KEY, count=count)
    assert (caught.value.key, caught.value.fragment) == (DEVICES_KEY, value)


def test_erase_refuses_a_zero_count() -> None:
    with pytest.raises(ValueError, match="count"):
        protocol.erase_first_container("A,Ascend310P,1,0:;", count=0)


# --- runtime info ---------------------------------------------------------------------------

RUNTIME_EXAMPLES = [
    pytest.param(
        '[{"UUID":"' + D910 + '","temp":"vir05_1c_16g","memory":16384}]',
        (protocol.RuntimeInfo(D910, "vir05_1c_16g", 16384, 0),),
        id="hami-template-with-memory",
    ),
    pytest.param(
        '[{"UUID":"device-0","temp":"vir08","memory":8738,"core":1}]',
        (protocol.RuntimeInfo("device-0", "vir08", 8738, 1),),
        id="hami-test-fixture",
    ),
    pytest.param(
        '[{"UUID":"u1"},{"UUID":"u2"}]',
        (protocol.RuntimeInfo("u1", None, 0, 0), protocol.RuntimeInfo("u2", None, 0, 0)),
        id="whole-chips",
    ),
    pytest.param(
        '[{"UUID":"u1","temp":"vir02"}]',
        (protocol.RuntimeInfo("u1", "vir02", 0, 0),),
        id="volcano-template",
    ),
    pytest.param(
        '[{"UUID":"u1","memory":4096,"core":90}]',
        (protocol.RuntimeInfo("u1", None, 4096, 90),),
        id="soft",
    ),
]


@pytest.mark.parametrize(("value", "infos"), RUNTIME_EXAMPLES)
def test_runtime_round_trips_byte_for_byte(
    value: str, infos: tuple[protocol.RuntimeInfo, ...]
) -> None:
    assert protocol.decode_runtime(RUNTIME_KEY, value) == infos
    assert protocol.encode_runtime(infos) == value


def test_runtime_reads_absent_and_null_as_zero_and_no_template() -> None:
    value = '[{"UUID":"u1","temp":null,"extra":[1,2]},{"UUID":"u2","temp":""}]'
    assert protocol.decode_runtime(RUNTIME_KEY, value) == (
        protocol.RuntimeInfo("u1", None, 0, 0),
        protocol.RuntimeInfo("u2", None, 0, 0),
    )


BAD_RUNTIME = [
    pytest.param("", "", id="empty"),
    pytest.param('{"UUID":"u1"}', '{"UUID":"u1"}', id="object-not-array"),
    pytest.param('[{"temp":"vir02"}]', "[0].UUID", id="uuid-missing"),
    pytest.param('[{"UUID":7}]', "[0].UUID", id="uuid-number"),
    pytest.param('[{"UUID":"u1"},"x"]', "[1]", id="element-not-object"),
    pytest.param('[{"UUID":"u1","temp":5}]', "[0].temp", id="temp-number"),
    pytest.param('[{"UUID":"u1","memory":"16384"}]', "[0].memory", id="memory-string"),
    pytest.param('[{"UUID":"u1","core":-1}]', "[0].core", id="core-negative"),
    pytest.param('[{"UUID":"u1","core":2147483648}]', "[0].core", id="core-over-int32"),
]


@pytest.mark.parametrize(("value", "fragment"), BAD_RUNTIME)
def test_runtime_rejects_malformed_values(value: str, fragment: str) -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        protocol.decode_runtime(RUNTIME_KEY, value)
    assert caught.value.key == RUNTIME_KEY
    assert caught.value.fragment == fragment


# --- bind phase, timestamps, soft-mode flag -------------------------------------------------


@pytest.mark.parametrize("phase", list(protocol.BindPhase))
def test_bind_phase_round_trips(phase: protocol.BindPhase) -> None:
    assert protocol.decode_bind_phase(str(phase)) is phase


@pytest.mark.parametrize("value", ["", "Success", "done", "allocating "])
def test_bind_phase_rejects_other_values(value: str) -> None:
    with pytest.raises(errors.ProtocolError, match="allocating, success, failed") as caught:
        protocol.decode_bind_phase(value)
    assert (caught.value.key, caught.value.fragment) == (protocol.BIND_PHASE_KEY, value)


def test_timestamp_round_trips() -> None:
    assert protocol.encode_timestamp(1786000000) == "1786000000"
    assert protocol.decode_timestamp(protocol.BIND_TIME_KEY, "1786000000") == 1786000000


@pytest.mark.parametrize(
    "value", ["", "-5", "1.5", "1e9", " 17", "\u0661\u0662", "9223372036854775808"]
)
def test_timestamp_rejects_non_decimal_seconds(value: str) -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        protocol.decode_timestamp(protocol.VGPU_TIME_KEY, value)
    assert (caught.value.key, caught.value.fragment) == (protocol.VGPU_TIME_KEY, value)


def test_soft_mode_flag() -> None:
    assert [protocol.encode_soft_mode_node(flag) for flag in (True, False)] == ["true", "false"]
    assert protocol.decode_soft_mode_node("true") is True
    assert protocol.decode_soft_mode_node("false") is False
    with pytest.raises(errors.ProtocolError) as caught:
        protocol.decode_soft_mode_node("True")
    assert (caught.value.key, caught.value.fragment) == (protocol.SOFT_MODE_NODE_KEY, "True")


# --- the values themselves refuse what a peer could not read -------------------------------


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: protocol.DeviceEntry("a,b", "Ascend310P", 1, 0), "uuid"),
        (lambda: protocol.DeviceEntry("a", "Ascend 310P", 1, 0), "type"),
        (lambda: protocol.DeviceEntry("a", "Ascend310P", -1, 0), "memory_mib"),
        (lambda: protocol.DeviceEntry("a", "Ascend310P", 1, 2**31), "cores"),
        (lambda: protocol.RegisteredChip("a", -1, 1, 1, 1, "T", True, None), "index"),
        (lambda: protocol.RegisteredChip("", 0, 1, 1, 1, "T", True, None), "id"),
        (lambda: protocol.RegisteredChip("a", 0, 1, 1, 1, "T", True, -1), "network_id"),
        (lambda: protocol.RuntimeInfo("u1", "", 0, 0), "template"),
        (lambda: protocol.RuntimeInfo("u1", None, -5, 0), "memory_mib"),
        (lambda: protocol.encode_timestamp(-1), "seconds"),
    ],
)
def test_values_check_their_fields(build: Callable[[], object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        build()


# --- keys read as Go's encoding/json reads them into a struct ---------------------------


def chip_of(value: str) -> protocol.RegisteredChip:
    (chip,) = protocol.decode_node_register(REGISTER_KEY, value)
    return chip


def test_node_register_field_names_match_in_any_case() -> None:
    chip = chip_of(
        '[{"ID":"u1","Index":2,"COUNT":4,"DevMem":65536,"devCore":20,"Type":"Ascend910B3",'
        '"Health":true,"Numa":1,"CustomInfo":{"NetworkID":1}}]'
    )
    assert chip == protocol.RegisteredChip("u1", 2, 4, 65536, 20, "Ascend910B3", True, 1, numa=1)


@pytest.mark.parametrize(
    ("members", "wanted"),
    [
        ('"id":"a","ID":"b"', "b"),
        ('"ID":"b","id":"a"', "a"),
        # Go keeps the last key of the document, whatever its case; a dict keeps the first
        # place of a repeated key, so this one needs the pairs in order.
        ('"id":"a","ID":"b","id":"c"', "c"),
        ('"Id":"a","iD":"b"', "b"),
    ],
)
def test_of_several_keys_for_one_field_the_last_wins(members: str, wanted: str) -> None:
    chip = chip_of("[{" + members + ',"type":"Ascend910B3","health":true}]')
    assert chip.id == wanted


@pytest.mark.parametrize(
    ("custom", "network_id"),
    [
        ('"custominfo":{"NetworkID":1}', 1),
        ('"custominfo":{"networkid":1}', None),  # a map key: Go compares it exactly
        ('"custominfo":{"NetworkID":1},"CustomInfo":{"other":2}', 1),  # merged into one map
        ('"custominfo":{"NetworkID":1},"CustomInfo":{"NetworkID":0}', 0),
        ('"custominfo":{"NetworkID":1},"CUSTOMINFO":null', None),  # null empties the map
        ('"cu\\u017ftominfo":{"NetworkID":1}', 1),  # U+017F folds to s, as in Go
    ],
)
def test_custominfo_is_read_as_go_fills_a_map(custom: str, network_id: int | None) -> None:
    chip = chip_of('[{"id":"u1","type":"Ascend910B3",' + custom + "}]")
    assert chip.network_id == network_id


def test_a_bad_value_under_another_case_is_named_as_written() -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        chip_of('[{"id":"u1","type":"Ascend910B3","DevMem":"big"}]')
    assert caught.value.fragment == "[0].DevMem"


def test_runtime_field_names_match_in_any_case() -> None:
    infos = protocol.decode_runtime(
        RUNTIME_KEY, '[{"uuid":"u1","Temp":"vir02","MEMORY":6144,"Core":5}]'
    )
    assert infos == (protocol.RuntimeInfo("u1", "vir02", 6144, 5),)
    (last,) = protocol.decode_runtime(RUNTIME_KEY, '[{"UUID":"u1","uuid":"u2"}]')
    assert last.uuid == "u2"


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("id", "ID", True),
        ("custominfo", "CustomInfo", True),
        ("custominfo", "cu\u017ftominfo", True),
        ("k", "\u212a", True),  # Kelvin sign
        ("id", "i d", False),
        ("id", "\u0130d", False),  # dotted capital I is not in i's simple fold set
        ("devmem", "devmen", False),
    ],
)
def test_fold_matches_go(a: str, b: str, same: bool) -> None:
    assert (gojson.fold(a) == gojson.fold(b)) is same
