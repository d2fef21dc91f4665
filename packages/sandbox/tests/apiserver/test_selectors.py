"""Label and field selector parsing and matching (pure functions, table-driven)."""

from __future__ import annotations

import pytest

from vnpu_sandbox.apiserver import errors, resources, selectors

LABELS = {"app": "web", "tier": "front", "n": "5", "example.com/role": "npu"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app = web", True),
        ("app!=web", False),
        ("app!=db", True),
        ("missing!=x", True),
        ("app in (db, web)", True),
        ("app in (db)", False),
        ("app notin (db)", True),
        ("missing notin (db)", True),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("n>4", True),
        ("n<4", False),
        ("app=web,tier=front", True),
        ("app=web,tier=back", False),
        ("example.com/role=npu", True),
        ("app=", False),
        ("missing=", False),
    ],
)
def test_label_selectors_match_like_the_real_server(text: str, matches: bool) -> None:
    requirements = selectors.parse_labels(text)
    assert all(r.matches(LABELS) for r in requirements) is matches


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a b", "found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("a in b", "found 'b', expected: '('"),
        ("a in (b", "found '', expected: ',', ')' or identifier"),
        ("a=b c", "found 'c', expected: ',' or 'end of string'"),
        (",", "found ',', expected: identifier"),
        ("!", "found '', expected: identifier"),
        (
            "a>b",
            "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer",
        ),
        (
            "a=b$",
            'unable to parse requirement: values[0][a]: Invalid value: "b$": a valid label must be',
        ),
        (
            "-a=b",
            'unable to parse requirement: key: Invalid value: "-a": name part must consist of',
        ),
    ],
)
def test_bad_label_selectors_are_rejected_with_the_real_wording(text: str, message: str) -> None:
    with pytest.raises(selectors.SelectorError) as caught:
        selectors.parse_labels(text)
    assert str(caught.value).startswith(message)


POD = {
    "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
    "spec": {"nodeName": "n1", "schedulerName": "default-scheduler"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("fields", "matches"),
    [
        ("spec.nodeName=n1", True),
        ("spec.nodeName==n1", True),
        ("spec.nodeName!=n1", False),
        ("spec.nodeName=", False),
        ("status.phase!=Succeeded,status.phase!=Failed", True),
        ("metadata.name=p,metadata.namespace=ns", True),
        ("spec.hostNetwork=false", True),
        ("spec.restartPolicy=", True),
    ],
)
def test_field_selectors_compare_the_printed_field(fields: str, matches: bool) -> None:
    selector = selectors.Selector.parse("", fields, resources.PODS)
    assert selector.matches(POD) is matches


def test_field_selector_errors_and_escapes() -> None:
    with pytest.raises(errors.BadRequest) as caught:
        selectors.Selector.parse("", "spec.nodeName=n1,spec.image=x", resources.PODS)
    assert caught.value.message == "field label not supported: spec.image"
    with pytest.raises(errors.BadRequest) as caught:
        selectors.Selector.parse("", "spec.nodeName", resources.PODS)
    assert (
        caught.value.message
        == "invalid selector: 'spec.nodeName'; can't understand 'spec.nodeName'"
    )
    escaped = selectors.Selector.parse("", r"metadata.name=a\,b", resources.CONFIGMAPS)
    assert escaped.single_name() == "a,b"
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "uid": "u"},
        "source": {"component": "kubelet"},
    }
    assert selectors.Selector.parse(
        "", "involvedObject.uid=u,source=kubelet", resources.EVENTS
    ).matches(event)


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        (None, True),
        ({}, True),
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "db"}}, False),
        (
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}]},
            True,
        ),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["front"]}]}, False),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Sometimes"}]}, False),
    ],
)
def test_label_selector_structs(selector: object, matches: bool) -> None:
    assert selectors.label_selector_matches(selector, LABELS) is matches
