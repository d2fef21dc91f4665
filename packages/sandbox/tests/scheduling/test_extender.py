"""The extender client against a real HTTP(S) server on loopback: answers decoded like Go, errors worded like kube-scheduler."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from starlette.responses import Response

from vnpu_sandbox.scheduling import config, errors, extender, nodeinfo

from .conftest import FakeExtender, node_object

Json = dict[str, Any]
POD: Json = {
    "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
    "spec": {"containers": []},
}
NODES = [nodeinfo.parse_node(node_object(name)) for name in ("n1", "n2")]


def spec(url: str, **fields: Any) -> config.Extender:
    document = {
        "urlPrefix": url,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": 1,
        "nodeCacheCapable": True,
        **fields,
    }
    parsed = config.parse(
        {"apiVersion": config.API_VERSION, "kind": config.KIND, "extenders": [document]}
    )
    return parsed.extenders[0]


@pytest.fixture
def fake() -> Iterator[FakeExtender]:
    server = FakeExtender(None)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def client(fake: FakeExtender) -> Iterator[extender.Extender]:
    made = extender.Extender(spec(fake.url))
    try:
        yield made
    finally:
        made.close()


def test_go_style_decoding_matches_keys_ignoring_case(
    fake: FakeExtender, client: extender.Extender
) -> None:
    fake.on_filter = lambda body: {"nodenames": ["n2"], "failedNodes": {"n1": "busy"}, "error": ""}
    result = client.filter(POD, NODES)
    assert result == extender.FilterResult(("n2",), {"n1": "busy"}, {})
    fake.on_prioritize = lambda body: [{"host": "n1", "score": 3}, {"Host": "n2", "Score": 7}]
    assert client.prioritize(POD, NODES) == {"n1": 3, "n2": 7}


def test_null_answers(fake: FakeExtender, client: extender.Extender) -> None:
    fake.on_filter = lambda body: {
        "NodeNames": None,
        "Nodes": None,
        "FailedNodes": None,
        "Error": "",
    }
    assert client.filter(POD, NODES).nodes == ()  # kube-scheduler: no survivors
    fake.on_bind = lambda body: Response("null", media_type="application/json")
    client.bind("default", "p", "u1", "n1")  # no Error: bound


@pytest.mark.parametrize(
    ("verb", "answer", "message"),
    [
        ("filter", {"NodeNames": [], "Error": "cache not synced"}, "cache not synced"),
        (
            "filter",
            {"NodeNames": ["n9"]},
            'claims a filtered node "n9" which is not found in the input node list',
        ),
        ("filter", {"NodeNames": "n1"}, "NodeNames must be a list of node names"),
        (
            "filter",
            {"NodeNames": [], "FailedNodes": ["n1"]},
            "FailedNodes must map node names to reasons",
        ),
        ("filter", [], "must be an ExtenderFilterResult object"),
        ("filter", Response("<html>", media_type="text/html"), "is not JSON"),
        (
            "filter",
            Response("no", status_code=404),
            "failed filter with extender at URL {url}/filter, code 404",
        ),
        (
            "prioritize",
            [{"Host": "n1", "Score": 2.5}],
            "every entry needs a string Host and an integer Score",
        ),
        ("prioritize", {"Host": "n1"}, "must be a HostPriorityList"),
        ("bind", {"Error": "node n1 is locked"}, "node n1 is locked"),
        ("bind", {"Error": 3}, "Error must be a string"),
    ],
)
def test_failures_are_worded_like_kube_scheduler(
    fake: FakeExtender, client: extender.Extender, verb: str, answer: object, message: str
) -> None:
    setattr(fake, f"on_{verb}", lambda body: answer)
    call = {
        "filter": lambda: client.filter(POD, NODES),
        "prioritize": lambda: client.prioritize(POD, NODES),
        "bind": lambda: client.bind("default", "p", "u1", "n1"),
    }[verb]
    with pytest.raises(errors.ExtenderError) as caught:
        call()
    assert message.format(url=fake.url) in str(caught.value)
    assert caught.value.verb == verb


def test_the_claim_names_the_extender_as_go_quotes_it(
    fake: FakeExtender, client: extender.Extender
) -> None:
    fake.on_filter = lambda body: {"NodeNames": ["n9"]}
    with pytest.raises(errors.ExtenderError) as caught:
        client.filter(POD, NODES)
    assert str(caught.value) == (
        f'extender "{fake.url}" claims a filtered node "n9" which is not found in the input node list'
    )


def test_http_timeout_bounds_a_call(fake: FakeExtender) -> None:
    def slow(body: Json) -> Json:
        time.sleep(3.0)
        return {"NodeNames": []}

    fake.on_filter = slow
    quick = extender.Extender(spec(fake.url, httpTimeout="200ms"))
    started = time.monotonic()
    try:
        with pytest.raises(
            errors.ExtenderError, match=r"timed out after 0.2 s \(httpTimeout\)"
        ) as caught:
            quick.filter(POD, NODES)
    finally:
        quick.close()
    assert time.monotonic() - started < 2.5  # the reply would have come at 3 s
    assert str(caught.value).startswith(f'Post "{fake.url}/filter": ')


def test_an_unreachable_extender() -> None:
    gone = extender.Extender(spec("http://127.0.0.1:9"))
    try:
        with pytest.raises(errors.ExtenderError) as caught:
            gone.bind("default", "p", "u1", "n1")
    finally:
        gone.close()
    assert str(caught.value).startswith('Post "http://127.0.0.1:9/bind": ')


@pytest.mark.parametrize(
    ("managed", "pod", "interested"),
    [
        ((), POD, True),
        (("example.com/chip",), POD, False),
        (
            ("example.com/chip",),
            {"spec": {"containers": [{"resources": {"limits": {"example.com/chip": "1"}}}]}},
            True,
        ),
        (
            ("example.com/chip-memory",),
            {
                "spec": {
                    "initContainers": [
                        {"resources": {"requests": {"example.com/chip-memory": "1"}}}
                    ]
                }
            },
            True,
        ),
        (
            ("example.com/chip",),
            {"spec": {"containers": [{"resources": {"limits": {"example.com/other": "1"}}}]}},
            False,
        ),
    ],
)
def test_interest_follows_managed_resources(
    managed: tuple[str, ...], pod: Json, interested: bool
) -> None:
    made = extender.Extender(
        spec("http://127.0.0.1:9", managedResources=[{"name": m} for m in managed])
    )
    try:
        assert made.interested(pod) is interested
    finally:
        made.close()


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[FakeExtender, trustme.CA]]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    key_path, chain_path = tmp_path / "key.pem", tmp_path / "chain.pem"
    cert.private_key_pem.write_to_path(str(key_path))
    cert.cert_chain_pems[0].write_to_path(str(chain_path))
    server = FakeExtender(None, ssl={"ssl_keyfile": str(key_path), "ssl_certfile": str(chain_path)})
    try:
        yield server, ca
    finally:
        server.stop()


def test_https_with_and_without_a_ca(tls_server: tuple[FakeExtender, trustme.CA]) -> None:
    server, ca = tls_server
    ca_data = base64.b64encode(ca.cert_pem.bytes()).decode()
    verified = extender.Extender(spec(server.url, enableHTTPS=True, tlsConfig={"caData": ca_data}))
    unverified = extender.Extender(spec(server.url, enableHTTPS=True))  # no CA: not verified
    stranger = base64.b64encode(trustme.CA().cert_pem.bytes()).decode()
    mistrusting = extender.Extender(
        spec(server.url, enableHTTPS=True, tlsConfig={"caData": stranger})
    )
    try:
        assert verified.filter(POD, NODES).nodes == ("n1", "n2")
        assert unverified.filter(POD, NODES).nodes == ("n1", "n2")
        with pytest.raises(errors.ExtenderError, match="CERTIFICATE_VERIFY_FAILED"):
            mistrusting.filter(POD, NODES)
    finally:
        for made in (verified, unverified, mistrusting):
            made.close()
