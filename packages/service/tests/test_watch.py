"""``watch``: watch streams and the list-then-watch loop, against a real kube-apiserver.

The watched resource is the ConfigMaps of the test's own namespace (``kube_namespace``),
read and written through the real ``kubernetes`` client. ``Recorder`` is a ``watch.Handler``
that lists and watches them as the services' handlers do and writes down what the
``Reflector`` tells it. Where the API server cannot be made to answer something (a line that
is not JSON, a cut-off answer), the loopback ``fake_api`` answers instead.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from vnpu_service import kubeapi, watch

Json = dict[str, Any]
Call = tuple[Any, ...]


def _wait_for(condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def core(kube_namespace: Any) -> Iterator[kubernetes.client.CoreV1Api]:
    """The real client, with the test's namespace as its kubeconfig's default."""
    api_client = kubeapi.client(kube_namespace.kubeconfig)
    try:
        yield kubernetes.client.CoreV1Api(api_client)
    finally:
        kubeapi.close(api_client)


def _create(core: kubernetes.client.CoreV1Api, namespace: str, name: str) -> str:
    """Create ConfigMap ``name``; its resourceVersion."""
    body: Any = {"metadata": {"name": name}}
    made = kubeapi.fetch(
        lambda: core.create_namespaced_config_map(
            namespace, body, _preload_content=False, _request_timeout=10
        ),
        f"create configmap {name}",
    )
    return str(made["metadata"]["resourceVersion"])


def _list(core: kubernetes.client.CoreV1Api, namespace: str) -> tuple[list[Json], str]:
    listed = kubeapi.fetch(
        lambda: core.list_namespaced_config_map(
            namespace, _preload_content=False, _request_timeout=10
        ),
        f"list configmaps in {namespace}",
    )
    return list(listed["items"]), str(listed["metadata"]["resourceVersion"])


def _open(
    core: kubernetes.client.CoreV1Api, namespace: str, revision: str, timeout: int = 300
) -> watch.Stream:
    return watch.open_stream(
        core.list_namespaced_config_map,
        f"watch configmaps in {namespace}",
        revision,
        timeout,
        (10.0, timeout + 10.0),
        namespace=namespace,
    )


def _name(obj: Json) -> str:
    return str(obj["metadata"]["name"])


class Recorder:
    """A ``watch.Handler`` over the ConfigMaps of ``namespace`` that writes down each call.

    ``refusals``: how many watches to open with a field selector the API refuses (400);
    ``crash_on``: the name of a ConfigMap whose first event makes ``upsert`` raise; ``fail``:
    an exception for the first ``relist`` to raise.
    """

    def __init__(
        self,
        core: kubernetes.client.CoreV1Api,
        namespace: str,
        *,
        timeout: int = 300,
        refusals: int = 0,
        crash_on: str = "",
        fail: Exception | None = None,
    ) -> None:
        self._core = core
        self._namespace = namespace
        self._timeout = timeout
        self._refusals = refusals
        self._crash_on = crash_on
        self._fail = fail
        self._lock = threading.Lock()
        self.calls: list[Call] = []
        self.handling: list[bool] = []  # per failed/crashed: was its exception being handled

    def _record(self, *call: Any) -> None:
        with self._lock:
            self.calls.append(call)

    def kinds(self) -> list[str]:
        with self._lock:
            return [call[0] for call in self.calls]

    def of(self, kind: str) -> list[Call]:
        with self._lock:
            return [call for call in self.calls if call[0] == kind]

    def relist(self) -> str:
        if self._fail is not None:
            error, self._fail = self._fail, None
            raise error
        items, revision = _list(self._core, self._namespace)
        self._record("relist", revision, sorted(_name(item) for item in items))
        return revision

    def watch_from(self, revision: str) -> watch.Stream:
        self._record("watch_from", revision)
        if self._refusals > 0:
            self._refusals -= 1
            return watch.open_stream(
                self._core.list_namespaced_config_map,
                f"watch configmaps in {self._namespace}",
                revision,
                self._timeout,
                (10.0, self._timeout + 10.0),
                namespace=self._namespace,
                field_selector="no.such.field=1",
            )
        return _open(self._core, self._namespace, revision, self._timeout)

    def upsert(self, obj: Json) -> None:
        self._record("upsert", _name(obj), obj["metadata"]["resourceVersion"])
        if self._crash_on and _name(obj) == self._crash_on:
            self._crash_on = ""
            raise RuntimeError(f"cannot take {_name(obj)}")

    def remove(self, obj: Json) -> None:
        self._record("remove", _name(obj))

    def opened(self) -> None:
        self._record("opened")

    def ended(self) -> None:
        self._record("ended")

    def expired(self) -> None:
        self._record("expired")

    def failed(self, error: Exception, retry_in: float) -> None:
        self.handling.append(sys.exc_info()[1] is error)
        self._record("failed", error, retry_in)

    def crashed(self, error: Exception, retry_in: float) -> None:
        self.handling.append(sys.exc_info()[1] is error)
        self._record("crashed", error, retry_in)


@contextmanager
def _running(reflector: watch.Reflector, revision: str = "") -> Iterator[threading.Thread]:
    """``reflector.run`` in a thread; stopped on the way out, which must end it at once."""
    thread = threading.Thread(target=reflector.run, args=(revision,), daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        reflector.stop()
        thread.join(5)
    assert not thread.is_alive()


# -- one stream ------------------------------------------------------------------------


def test_a_stream_has_the_events_after_its_revision_and_close_ends_it_at_once(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    namespace = kube_namespace.name
    _items, revision = _list(core, namespace)
    made = _create(core, namespace, "a")
    stream = _open(core, namespace, revision)
    events: list[Json] = []
    problems: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        try:
            events.extend(stream)
        except BaseException as exc:
            problems.append(exc)
        finally:
            done.set()

    threading.Thread(target=read, daemon=True).start()
    _wait_for(lambda: events, "the ADDED event")
    assert [(e["type"], _name(e["object"])) for e in events] == [("ADDED", "a")]
    assert events[0]["object"]["metadata"]["resourceVersion"] == made
    assert not done.is_set()  # the API keeps it open for 300 s
    began = time.monotonic()
    stream.close()
    assert done.wait(5)
    assert time.monotonic() - began < 2.0
    assert problems == []  # a stream closed on purpose ends quietly
    stream.close()  # and closing it again is harmless


def test_the_api_ends_a_stream_after_its_timeout(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    _items, revision = _list(core, kube_namespace.name)
    began = time.monotonic()
    assert list(_open(core, kube_namespace.name, revision, timeout=1)) == []
    assert 0.9 < time.monotonic() - began < 10.0


def test_a_refused_watch_is_the_error_its_status_names(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    namespace = kube_namespace.name
    with pytest.raises(kubeapi.Invalid) as caught:
        watch.open_stream(
            core.list_namespaced_config_map,
            f"watch configmaps in {namespace}",
            "",
            5,
            (10.0, 15.0),
            namespace=namespace,
            field_selector="no.such.field=1",
        )
    assert caught.value.status == 400
    assert caught.value.reason == "BadRequest"
    assert caught.value.message.startswith(f"watch configmaps in {namespace}: ")
    assert "no.such.field" in caught.value.message
    assert isinstance(caught.value.__cause__, kubernetes.client.exceptions.ApiException)


def test_a_watch_nobody_answers_is_unavailable_with_status_0(tmp_path: Path, kit: Any) -> None:
    api_client = kubeapi.client(kit.write_kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:9"))
    try:
        core = kubernetes.client.CoreV1Api(api_client)
        with pytest.raises(kubeapi.Unavailable) as caught:
            _open(core, "default", "", timeout=5)
    finally:
        kubeapi.close(api_client)
    assert caught.value.status == 0
    assert caught.value.message.startswith("watch configmaps in default: ")
    assert caught.value.retryable


ADDED = b'{"type": "ADDED", "object": {}}\n'


@pytest.mark.parametrize(
    ("answer", "before", "reason"),
    [
        # The body comes in one piece: the event before the bad line is read first.
        ({"body": ADDED + b"not json\n"}, [{"type": "ADDED", "object": {}}], "BadResponse"),
        # Shorter than announced: the read of the whole fails, so no event comes before.
        ({"body": ADDED, "cut": True}, [], "ProtocolError"),
    ],
    ids=["not-json", "cut-off"],
)
def test_an_unreadable_stream_is_unavailable(
    kit: Any,
    fake_api: Any,
    kubeconfig: Path,
    answer: dict[str, Any],
    before: list[Json],
    reason: str,
) -> None:
    fake_api.answers["/api/v1/namespaces/x/configmaps"] = kit.Answer(200, **answer)
    api_client = kubeapi.client(kubeconfig)
    try:
        stream = _open(kubernetes.client.CoreV1Api(api_client), "x", "7", timeout=5)
        events: list[Json] = []
        with pytest.raises(kubeapi.Unavailable) as caught:
            events.extend(stream)
    finally:
        kubeapi.close(api_client)
    assert events == before
    assert caught.value.status == 0
    assert caught.value.reason == reason
    assert caught.value.message.startswith("watch configmaps in x: ")


STATUSES = [
    # the ERROR event's Status, the class, status and reason of the error it stands for
    ({"code": 410, "reason": "Gone", "message": "too old"}, kubeapi.Expired, 410, "Expired"),
    ({"code": 410}, kubeapi.Expired, 410, "Expired"),
    ({"code": 500, "reason": "InternalError", "message": "x"}, kubeapi.Unavailable, 500, None),
    ({"code": 404, "reason": "NotFound", "message": "x"}, kubeapi.NotFound, 404, None),
    ({"code": 403, "reason": "Forbidden", "message": "x"}, kubeapi.Invalid, 403, None),
    ({"code": 401, "reason": "Unauthorized", "message": "x"}, kubeapi.ApiError, 401, None),
    ({"reason": "Unknown", "message": "x"}, kubeapi.Unavailable, 0, None),
]


@pytest.mark.parametrize(("status", "cls", "code", "reason"), STATUSES)
def test_an_error_event_is_the_error_its_status_names(
    status: Json, cls: type[kubeapi.ApiError], code: int, reason: str | None
) -> None:
    error = watch.status_error(status)
    assert type(error) is cls
    assert error.status == code
    assert error.reason == (reason or status.get("reason", ""))
    assert error.message == status.get("message", "")


# -- the loop --------------------------------------------------------------------------


def test_the_loop_lists_then_applies_each_change_and_stop_ends_it(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    namespace = kube_namespace.name
    _create(core, namespace, "before")
    recorder = Recorder(core, namespace)
    reflector = watch.Reflector(recorder)
    with _running(reflector) as thread:
        _wait_for(reflector.watching.is_set, "the watch open")
        made = _create(core, namespace, "a")
        core.patch_namespaced_config_map("a", namespace, {"data": {"k": "v"}})
        core.delete_namespaced_config_map("a", namespace)
        _wait_for(lambda: recorder.of("remove"), "the deletion")
        began = time.monotonic()
    assert time.monotonic() - began < 2.0
    assert not thread.is_alive()
    assert not reflector.watching.is_set()
    (relist,) = recorder.of("relist")
    assert relist[2] == ["before"]
    assert recorder.kinds() == ["relist", "watch_from", "opened", "upsert", "upsert", "remove"]
    assert recorder.of("watch_from") == [("watch_from", relist[1])]
    added, modified = recorder.of("upsert")
    assert added == ("upsert", "a", made)
    assert modified[1] == "a"
    assert int(modified[2]) > int(made)
    assert recorder.of("remove") == [("remove", "a")]


def test_a_watch_the_api_ends_is_opened_again_from_the_last_revision(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    namespace = kube_namespace.name
    recorder = Recorder(core, namespace, timeout=1)
    reflector = watch.Reflector(recorder)
    with _running(reflector):
        _wait_for(reflector.watching.is_set, "the watch open")
        made = _create(core, namespace, "a")
        _wait_for(lambda: recorder.kinds().count("ended") >= 2, "two watches ended")
        _wait_for(lambda: len(recorder.of("watch_from")) >= 3, "the third watch")
    assert recorder.kinds().count("relist") == 1  # an ended watch goes on; it does not list
    assert "failed" not in recorder.kinds()
    assert "crashed" not in recorder.kinds()
    revisions = [int(call[1]) for call in recorder.of("watch_from")]
    assert revisions == sorted(revisions)
    assert revisions[-1] >= int(made)  # after "a": from its revision or a later bookmark's


def test_an_expired_revision_lists_again(tmp_path: Path, kube_plane: Any) -> None:
    """A plane of its own, without a watch cache (which would still serve the revision): once
    etcd is compacted past it, a watch from it meets 410 Expired, and the loop lists again.
    ``kube_plane`` is asked for only so that the test skips, like the others, when the
    binaries are not built."""
    from vnpu_sandbox.platform import apiplane  # here: the other tests need no vnpu-sandbox

    with apiplane.serve(tmp_path / "plane", api_args=("--watch-cache=false",)) as plane:
        space = plane.namespace("expiry")
        api_client = kubeapi.client(space.kubeconfig)
        try:
            core = kubernetes.client.CoreV1Api(api_client)
            _items, old = _list(core, space.name)
            for number in range(4):
                _create(core, space.name, f"c{number}")
            assert plane.compact() > int(old)  # the API no longer keeps the revision
            recorder = Recorder(core, space.name)
            reflector = watch.Reflector(recorder)
            with _running(reflector, old):
                _wait_for(lambda: recorder.of("relist"), "the list after the expiry")
                _wait_for(reflector.watching.is_set, "the watch open again")
        finally:
            kubeapi.close(api_client)
    kinds = [kind for kind in recorder.kinds() if kind != "opened"]  # opened: the 410 came in it
    assert kinds == ["watch_from", "expired", "relist", "watch_from"]
    (relist,) = recorder.of("relist")
    assert relist[2] == ["c0", "c1", "c2", "c3"]
    assert recorder.of("watch_from") == [("watch_from", old), ("watch_from", relist[1])]


def test_a_refusal_backs_off_and_watches_again_from_the_same_revision(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    namespace = kube_namespace.name
    recorder = Recorder(core, namespace, refusals=2)
    reflector = watch.Reflector(recorder)
    with _running(reflector):
        _wait_for(lambda: recorder.of("failed"), "the first refusal")
        made = _create(core, namespace, "meanwhile")  # the watch from the list sees it
        _wait_for(lambda: recorder.of("upsert"), "the ConfigMap made meanwhile")
    (relist,) = recorder.of("relist")
    assert recorder.kinds() == [
        "relist",
        "watch_from",
        "failed",
        "watch_from",
        "failed",
        "watch_from",
        "opened",
        "upsert",
    ]
    assert {call[1] for call in recorder.of("watch_from")} == {relist[1]}
    failures = recorder.of("failed")
    assert [type(call[1]) for call in failures] == [kubeapi.Invalid, kubeapi.Invalid]
    assert [call[2] for call in failures] == [watch.FIRST_BACKOFF, 2 * watch.FIRST_BACKOFF]
    assert recorder.handling == [True, True]
    assert recorder.of("upsert") == [("upsert", "meanwhile", made)]


class Passing(Exception):
    """A handler's own error for a passing trouble (as the scheduler's ``SchedulerError``)."""


def test_the_callers_failures_back_off_without_counting_as_crashes(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    trouble = Passing("the cache is busy")
    recorder = Recorder(core, kube_namespace.name, fail=trouble)
    reflector = watch.Reflector(recorder, failures=(Passing, kubeapi.ApiError))
    with _running(reflector):
        _wait_for(reflector.watching.is_set, "the watch open")
    assert recorder.kinds() == ["failed", "relist", "watch_from", "opened"]
    assert recorder.of("failed") == [("failed", trouble, watch.FIRST_BACKOFF)]


def test_a_crash_is_reported_while_handled_and_lists_again(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    namespace = kube_namespace.name
    recorder = Recorder(core, namespace, crash_on="bad")
    reflector = watch.Reflector(recorder)
    with _running(reflector):
        _wait_for(reflector.watching.is_set, "the watch open")
        _create(core, namespace, "bad")
        _wait_for(lambda: len(recorder.of("relist")) == 2, "the list after the crash")
        _wait_for(reflector.watching.is_set, "the watch open again")
        _create(core, namespace, "after")
        _wait_for(lambda: ("upsert", "after") in [c[:2] for c in recorder.of("upsert")], "after")
    ((_, error, retry_in),) = recorder.of("crashed")
    assert isinstance(error, RuntimeError)
    assert str(error) == "cannot take bad"
    assert retry_in == watch.FIRST_BACKOFF
    assert recorder.handling == [True]  # so that log.exception shows the traceback
    assert "failed" not in recorder.kinds()
    first, second = recorder.of("relist")
    assert first[2] == []
    assert second[2] == ["bad"]  # the list takes in what the crashed event carried


def test_stop_before_the_loop_runs_ends_it_without_a_call(
    core: kubernetes.client.CoreV1Api, kube_namespace: Any
) -> None:
    recorder = Recorder(core, kube_namespace.name)
    stopping = threading.Event()
    reflector = watch.Reflector(recorder, stopping=stopping)
    reflector.stop()
    assert stopping.is_set()  # the caller's event: its other threads end with the loop
    reflector.run()
    assert recorder.calls == []
