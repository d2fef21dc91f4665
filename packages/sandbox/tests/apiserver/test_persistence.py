"""The --state file keeps objects and the revision counter across restarts; bad files are refused."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from vnpu_sandbox.apiserver import errors, harness

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def test_objects_and_revisions_survive_a_restart(tmp_path: Path, make_http: Any) -> None:
    state = tmp_path / "state.json"
    with harness.serve(state_file=state) as url:
        http = make_http(url)
        status, kept = http.json(
            "POST",
            CONFIGMAPS,
            {"metadata": {"name": "kept", "finalizers": ["vnpu.test/hold"]}, "data": {"a": "1"}},
        )
        assert status == 201
        http.json(
            "POST", "/api/v1/nodes", {"metadata": {"name": "node-1", "labels": {"npu": "yes"}}}
        )
        http.json("POST", CONFIGMAPS, {"metadata": {"name": "dropped"}})
        http.json("DELETE", f"{CONFIGMAPS}/dropped")
        last = int(http.json("GET", CONFIGMAPS)[1]["metadata"]["resourceVersion"])
    saved = json.loads(state.read_text())
    assert saved["resourceVersion"] == last
    assert not (tmp_path / "state.json.tmp").exists()
    with harness.serve(state_file=state) as url:
        http = make_http(url)
        status, again = http.json("GET", f"{CONFIGMAPS}/kept")
        assert status == 200
        assert again == kept
        assert http.json("GET", "/api/v1/nodes/node-1")[1]["metadata"]["labels"] == {"npu": "yes"}
        assert http.json("GET", f"{CONFIGMAPS}/dropped")[0] == 404
        status, fresh = http.json("POST", CONFIGMAPS, {"metadata": {"name": "after"}})
        assert int(fresh["metadata"]["resourceVersion"]) == last + 1
        events = http.watch(f"{CONFIGMAPS}?watch=true&resourceVersion={last - 1}&timeoutSeconds=1")
        assert [(e["type"], e["object"]["code"]) for e in events] == [("ERROR", 410)], (
            "history does not survive a restart"
        )
        _, names = http.json("GET", "/api/v1/namespaces")
        assert sorted(n["metadata"]["name"] for n in names["items"]) == [
            "default",
            "kube-node-lease",
            "kube-public",
            "kube-system",
        ]


def test_writes_reach_the_file_while_serving(tmp_path: Path, make_http: Any) -> None:
    state = tmp_path / "live.json"
    with harness.serve(state_file=state, flush_interval=0.05) as url:
        make_http(url).json("POST", CONFIGMAPS, {"metadata": {"name": "live"}})
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            names = [o["metadata"]["name"] for o in json.loads(state.read_text())["objects"]]
            if "live" in names:
                break
            time.sleep(0.02)
        else:
            pytest.fail("the state file never showed the new object")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"objects": []}', 'not a state file: "format" must be'),
        (
            '{"format": "vnpu-sandbox-apiserver-state/v1", "resourceVersion": -1, "objects": []}',
            "resourceVersion must be a non-negative integer",
        ),
        (
            '{"format": "vnpu-sandbox-apiserver-state/v1", "resourceVersion": 3, "objects": [{"kind": "Widget"}]}',
            "bad object: unknown object kind",
        ),
    ],
)
def test_a_bad_state_file_is_refused_with_its_name(
    tmp_path: Path, content: str, reason: str
) -> None:
    state = tmp_path / "bad.json"
    state.write_text(content)
    with pytest.raises(errors.StateFileError) as caught, harness.serve(state_file=state):
        pass
    assert caught.value.path == str(state)
    assert caught.value.reason.startswith(reason)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vnpu_sandbox", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_the_command_reports_a_bad_state_file_and_bad_flags(tmp_path: Path) -> None:
    state = tmp_path / "broken.json"
    state.write_text("[]")
    done = _cli("apiserver", "--port", str(_free_port()), "--state", str(state))
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f'vnpu-sandbox apiserver: state file {state}: not a state file: "format" must be "vnpu-sandbox-apiserver-state/v1"'
    )
    unwritable = tmp_path / "missing-directory" / "state.json"
    done = _cli("apiserver", "--port", str(_free_port()), "--state", str(unwritable))
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"vnpu-sandbox apiserver: state file {unwritable}: No such file or directory"
    )
    done = _cli("apiserver", "--port", "70000")
    assert done.returncode == 2
    assert "'70000' is not a TCP port (1-65535)" in done.stderr


def test_the_command_serves_until_interrupted_and_saves_its_state(
    tmp_path: Path, make_http: Any
) -> None:
    port, state = _free_port(), tmp_path / "cli.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vnpu_sandbox",
            "apiserver",
            "--port",
            str(port),
            "--state",
            str(state),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        http = make_http(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 15
        while True:
            try:
                if http.json("GET", "/version")[0] == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.05)
        assert http.json("POST", CONFIGMAPS, {"metadata": {"name": "from-cli"}})[0] == 201
        process.send_signal(2)
        output, _ = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, output
    names = [o["metadata"]["name"] for o in json.loads(state.read_text())["objects"]]
    assert "from-cli" in names
    assert os.path.getsize(state) > 0
