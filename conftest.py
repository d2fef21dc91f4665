"""Fixtures every package's tests share: one real kube-apiserver per test session.

``kube_plane`` starts etcd and kube-apiserver (``vnpu_sandbox.platform.apiplane``, the binaries
``make k8s-bin`` builds) the first time a test asks for it and stops them when the session
ends. ``kube_namespace`` gives each test a namespace of its own on it and, when the test
ends, deletes what the test made there and every node, so each test starts on the same
cluster. Without the binaries the tests that need them skip, naming the command that builds
them; with ``VNPU_REQUIRE_K8S=1`` (set by ``.ci/run``) they fail instead.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_numbers = itertools.count(1)


@pytest.fixture(scope="session")
def kube_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's kube-apiserver (``apiplane.ApiPlane``)."""
    # Imported here: packages whose tests need no API (core) run without vnpu-sandbox.
    from vnpu_sandbox.platform import apiplane, controlplane  # noqa: PLC0415

    try:
        controlplane.binaries()
    except controlplane.ControlPlaneError as exc:
        if os.environ.get("VNPU_REQUIRE_K8S") == "1":
            pytest.fail(f"the real control plane is required (VNPU_REQUIRE_K8S=1): {exc}")
        pytest.skip(f"the real control plane is not built: {exc}")
    directory: Path = tmp_path_factory.mktemp("kube-apiserver")
    with apiplane.serve(directory) as plane:
        yield plane


@pytest.fixture
def kube_namespace(kube_plane: Any, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A namespace of this test's own (``apiplane.Namespace``); cleared when the test ends."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    space = kube_plane.namespace(f"t{next(_numbers)}-{slug}")
    try:
        yield space
    finally:
        space.clear()
