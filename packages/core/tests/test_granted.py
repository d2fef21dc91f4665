"""The node's grant report (``vnpu_core.granted``) and how it is reconciled with pod claims."""

import json

import hypothesis
import pytest
from hypothesis import strategies as st

from vnpu_core import catalog, errors, granted, inventory, ledger


def _model(word: str) -> catalog.ChipModel:
    found = catalog.BUILTIN.by_common_word(word)
    assert found is not None
    return found


P310 = _model("Ascend310P")
NODE = inventory.build_node("n1", P310, 2, uuid_prefix="U")
U0, U1 = (chip.uuid for chip in NODE.chips)
KEY = granted.annotation_key("Ascend310P")
WHOLE = granted.Holding(granted.Kind.WHOLE)
VIR02 = granted.Holding(granted.Kind.VNPU, template="vir02")
VIR04_INIT = granted.Holding(granted.Kind.VNPU, template="vir04", init=True)
VIR04 = granted.Holding(granted.Kind.VNPU, template="vir04")
SOFT = granted.Holding(granted.Kind.SOFT, memory_mib=4096, cores=30)


def test_encoding_is_compact_sorted_and_leaves_idle_chips_out() -> None:
    value = granted.encode({U1: {"b": [VIR02], "a": [VIR04, VIR04_INIT]}, U0: {}, "U9": {"c": []}})
    assert value == (
        '{"chips":{"U-Ascend310P-1":{"a":["init:vnpu:vir04","vnpu:vir04"],"b":["vnpu:vir02"]}},'
        '"v":1}'
    )
    assert granted.encode({}) == '{"chips":{},"v":1}'


@hypothesis.given(
    st.dictionaries(
        st.sampled_from([U0, U1]),
        st.dictionaries(
            st.text("abcdef0123456789-", min_size=1, max_size=8),
            st.lists(st.sampled_from([WHOLE, VIR02, VIR04, VIR04_INIT, SOFT]), min_size=1),
            min_size=1,
        ),
    )
)
def test_decode_reads_back_what_encode_wrote(
    grants: dict[str, dict[str, list[granted.Holding]]],
) -> None:
    decoded = granted.decode(KEY, granted.encode(grants))
    assert {
        u: {p: sorted(map(str, h)) for p, h in pods.items()} for u, pods in decoded.items()
    } == {u: {p: sorted(map(str, h)) for p, h in pods.items()} for u, pods in grants.items()}


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{", "not JSON"),
        ("[]", "exactly"),
        ('{"v":2,"chips":{}}', "version"),
        ('{"v":true,"chips":{}}', "version"),
        ('{"v":1,"chips":[]}', "object"),
        ('{"v":1,"chips":{"U0":["whole"]}}', "pod UIDs"),
        ('{"v":1,"chips":{"U0":{"p":"whole"}}}', "list of strings"),
        ('{"v":1,"chips":{"U0":{"p":["half"]}}}', "a holding is"),
        ('{"v":1,"chips":{"U0":{"p":["whole:1"]}}}', "a holding is"),
        ('{"v":1,"chips":{"U0":{"p":["vnpu:"]}}}', "a holding is"),
        ('{"v":1,"chips":{"U0":{"p":["soft:-1:5"]}}}', "whole number"),
        ('{"v":1,"chips":{"U0":{"p":["soft:4096"]}}}', "whole number"),
    ],
)
def test_a_malformed_report_is_refused_naming_the_key(value: str, problem: str) -> None:
    with pytest.raises(errors.ProtocolError) as caught:
        granted.decode(KEY, value)
    assert caught.value.key == KEY
    assert problem in str(caught.value)


def test_usage_by_pod_applies_the_init_peak_rule_and_drops_unknown_chips() -> None:
    grants = granted.decode(
        KEY,
        json.dumps(
            {
                "v": 1,
                "chips": {
                    U0: {"a": ["init:vnpu:vir04", "vnpu:vir02", "vnpu:vir02"]},
                    U1: {"b": ["whole"]},
                    "gone": {"c": ["whole"]},
                },
            }
        ),
    )
    usage = granted.by_pod(grants, NODE)
    assert set(usage) == {"a", "b"}
    a = usage["a"][U0]
    assert (a.vnpus, a.aicore) == (2, 4)  # two vir02 together, vir04 (4 cores) alone: peak
    assert usage["b"][U1].exclusive


def _claim(
    held: dict[str, inventory.ChipUsage] | ledger.Problem, pod: str = "ns/p"
) -> ledger.Claim:
    return ledger.Claim(pod, held)


def _vnpu(name: str) -> inventory.ChipUsage:
    return granted.holding_usage(P310, granted.Holding(granted.Kind.VNPU, template=name))


WHOLE_USAGE = granted.holding_usage(P310, WHOLE)
PROBLEM = ledger.Problem("ns/bad", errors.ProtocolError("k", "x", "unreadable"))


def test_a_node_that_does_not_report_is_counted_from_the_claims_as_before() -> None:
    claims = {"a": _claim({U0: _vnpu("vir02")}), "bad": _claim(PROBLEM)}
    result = ledger.reconcile(claims, None, {}, NODE)
    assert result.ledger.usage == {U0: _vnpu("vir02")}
    assert result.ledger.problems == (PROBLEM,)
    assert result.mismatches == ()
    assert result.clashes == ()


def test_clearing_ones_own_annotations_frees_nothing() -> None:
    grants = {"a": {U0: WHOLE_USAGE}}
    result = ledger.reconcile({}, grants, {"a": "ns/a"}, NODE)
    assert result.ledger.usage[U0].exclusive
    assert result.mismatches == (
        ledger.Mismatch("ns/a", ledger.Disagreement.ANNOTATION_MISSING, (U0,), "a"),
    )


def test_a_pod_gone_but_still_granted_counts_without_a_mismatch() -> None:
    result = ledger.reconcile({}, {"gone": {U0: WHOLE_USAGE}}, {}, NODE)
    assert result.ledger.usage[U0].exclusive
    assert result.mismatches == ()


def test_shrinking_ones_annotations_counts_the_grant() -> None:
    claims = {"a": _claim({U0: _vnpu("vir01")})}
    result = ledger.reconcile(claims, {"a": {U0: _vnpu("vir04")}}, {"a": "ns/p"}, NODE)
    assert result.ledger.usage[U0].aicore == 4
    assert [m.reason for m in result.mismatches] == [ledger.Disagreement.ANNOTATION_DIFFERS]


def test_a_claim_not_yet_granted_still_counts_and_is_no_mismatch() -> None:
    # Two containers decided, one served so far: the second is still on its way.
    claims = {"a": _claim({U0: _vnpu("vir02").plus(_vnpu("vir02")), U1: _vnpu("vir01")})}
    result = ledger.reconcile(claims, {"a": {U0: _vnpu("vir02")}}, {"a": "ns/p"}, NODE)
    assert result.ledger.usage[U0].vnpus == 2
    assert result.ledger.usage[U1].vnpus == 1
    assert result.mismatches == ()


def test_an_unreadable_pod_counts_as_what_the_node_granted_and_denies_nothing() -> None:
    claims = {"bad": _claim(PROBLEM, "ns/bad")}
    result = ledger.reconcile(claims, {"bad": {U1: _vnpu("vir02")}}, {"bad": "ns/bad"}, NODE)
    assert result.ledger.problems == ()
    assert result.ledger.usage == {U1: _vnpu("vir02")}
    assert result.mismatches == (
        ledger.Mismatch("ns/bad", ledger.Disagreement.ANNOTATION_UNREADABLE, (U1,), "bad"),
    )
    nothing = ledger.reconcile(claims, {}, {"bad": "ns/bad"}, NODE)
    assert nothing.ledger.usage == {}
    assert nothing.ledger.problems == ()


def test_a_chip_held_whole_and_claimed_by_another_pod_is_a_clash() -> None:
    claims = {"b": _claim({U0: WHOLE_USAGE}, "ns/b")}
    result = ledger.reconcile(claims, {"a": {U0: WHOLE_USAGE}}, {}, NODE)
    assert [uuid for uuid, _ in result.clashes] == [U0]
    assert "held whole" in result.clashes[0][1]


@pytest.mark.parametrize(
    ("held", "why"),
    [
        ([_vnpu("vir04"), _vnpu("vir04"), _vnpu("vir02")], "memory"),
        ([_vnpu("vir02"), inventory.soft_usage(1024, 10, False)], "soft slices"),
        ([inventory.soft_usage(1024, 60, False), inventory.soft_usage(1024, 60, False)], "core"),
        ([WHOLE_USAGE, _vnpu("vir01")], "held whole"),
        ([_vnpu("vir04"), _vnpu("vir04_3c")], ""),
        ([_vnpu("vir04"), _vnpu("vir04")], "AI CPUs"),
        ([WHOLE_USAGE, inventory.IDLE], ""),
    ],
)
def test_overcommitted_names_the_budget(held: list[inventory.ChipUsage], why: str) -> None:
    found = inventory.overcommitted(NODE.chips[0], held)
    assert (why in found) if why else found == ""


def test_covers_compares_every_budget() -> None:
    assert _vnpu("vir04").covers(_vnpu("vir02"))
    assert not _vnpu("vir02").covers(_vnpu("vir04"))
    assert not _vnpu("vir04").covers(WHOLE_USAGE)
    assert WHOLE_USAGE.covers(inventory.IDLE)


def test_node_usage_reconciles_listed_pods_with_the_nodes_report() -> None:
    def pod(uid: str, annotations: dict[str, str], phase: str = "Running") -> dict[str, object]:
        return {
            "metadata": {"name": uid, "namespace": "ns", "uid": uid, "annotations": annotations},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
            "status": {"phase": phase},
        }

    decision = {"hami.io/Ascend310P-devices-allocated": f"{U1},Ascend310P,3072,0:;"}
    pods = [pod("cleared", {}), pod("small", decision), pod("done", {}, "Succeeded")]
    report = granted.encode({U0: {"cleared": [WHOLE]}, U1: {"small": [VIR02]}})
    node = {"metadata": {"name": "n1", "annotations": {KEY: report}}}
    found = granted.node_usage(pods, node, NODE, catalog.BUILTIN)
    assert found.ledger.usage[U0].exclusive
    assert found.ledger.usage[U1].templates == ("vir01", "vir02")  # claim vir01, grant vir02
    assert found.ledger.usage[U1].aicore == 2
    reasons = sorted((m.pod, m.reason.value) for m in found.mismatches)
    assert reasons == [("ns/cleared", "annotation_missing"), ("ns/small", "annotation_differs")]
    without = granted.node_usage(pods, {"metadata": {"name": "n1"}}, NODE, catalog.BUILTIN)
    assert set(without.ledger.usage) == {U1}
    assert granted.report(NODE, {KEY: "{"}) == ("unreadable", None)
