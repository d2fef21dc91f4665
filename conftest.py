"""Fixtures every package's tests share: one real kube-apiserver per test session.

``kube_plane`` is etcd and kube-apiserver (``vnpu_sandbox.platform.apiplane``, the binaries
``make k8s-bin`` builds), started once collection is done when any test asks for it (so its
start counts against no test's timeout) and stopped when the session ends.
``kube_namespace`` gives each test a namespace of its own on it and, when the test ends,
deletes what the test made there and every node, so each test starts on the same cluster. Without the binaries the tests that need them skip, naming the command that builds
them; with ``VNPU_REQUIRE_K8S=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest

_numbers = itertools.count(1)
_plane_key = pytest.StashKey["_Plane"]()


_PLANE_FIXTURES = frozenset({"kube_plane", "kube_namespace"})


class _Plane:
    """The session's kube-apiserver, started once collection shows a test needs it: before
    the first test runs, so its start never counts against a test's timeout."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.plane: Any = None
        self.problem: str | None = None

    def start(self) -> None:
        # Imported here: packages whose tests need no API (core) run without vnpu-sandbox.
        from vnpu_sandbox.platform import apiplane, controlplane, startup  # noqa: PLC0415

        try:
            self.plane = self.stack.enter_context(apiplane.serve())
        except (controlplane.ControlPlaneError, startup.StartError) as exc:
            self.problem = str(exc)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_plane_key] = _Plane()


def pytest_collection_finish(session: pytest.Session) -> None:
    wanted = any(_PLANE_FIXTURES & set(getattr(item, "fixturenames", ())) for item in session.items)
    if wanted and not session.config.option.collectonly:
        session.config.stash[_plane_key].start()


def pytest_unconfigure(config: pytest.Config) -> None:
    config.stash[_plane_key].stack.close()


@pytest.fixture(scope="session")
def kube_plane(pytestconfig: pytest.Config) -> Any:
    """The session's kube-apiserver (``apiplane.ApiPlane``)."""
    state = pytestconfig.stash[_plane_key]
    if state.plane is None and state.problem is None:  # asked for through getfixturevalue
        state.start()
    if state.plane is None:
        problem = state.problem or "it did not start"
        if os.environ.get("VNPU_REQUIRE_K8S") == "1":
            pytest.fail(f"the real control plane is required (VNPU_REQUIRE_K8S=1): {problem}")
        pytest.skip(f"the real control plane is not built: {problem}")
    return state.plane


@pytest.fixture
def kube_namespace(kube_plane: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A namespace of this test's own (``apiplane.Namespace``); cleared when the test ends."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    space = kube_plane.namespace(f"t{next(_numbers)}-{slug}")
    try:
        yield space
    finally:
        space.clear()
