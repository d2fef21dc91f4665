"""The parts of ``vnpu-sandbox up/status/down`` that need no running sandbox.

Cluster files, the process records (a PID whose start time differs is never signalled),
the sandbox record, and the commands' refusals of bad input, each through the real code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vnpu_sandbox import cli
from vnpu_sandbox.platform import clusterfile, components, layout, manifests, processes, up


def test_the_default_cluster_has_one_node_per_sharing_mode() -> None:
    nodes = clusterfile.read(up.DEFAULT_CLUSTER)
    assert [(n.name, n.model, n.chips, n.server, n.soft) for n in nodes] == [
        ("duo", "310P3", 4, "300i-duo", False),
        ("a2", "910B3", 8, "910b-8", False),
        ("b4-soft", "910B4", 4, "pcie", True),
    ]
    assert nodes[0].resource == "huawei.com/Ascend310P"


def test_replicas_become_numbered_nodes(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nodes: [{name: duo, chip: Ascend310P, chips: 2, replicas: 2}]\n")
    assert [n.name for n in clusterfile.read(path)] == ["duo-0", "duo-1"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: [{name: x, chip: 999X, chips: 2}]", "nodes[0].chip: unknown chip model"),
        ("nodes: [{name: x, chip: 310P3, chips: 0}]", "nodes[0].chips: must be an integer"),
        ("nodes: [", "not valid YAML"),
        ("pods: []", "must be a mapping with a nodes: list"),
    ],
)
def test_a_bad_cluster_file_names_the_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(clusterfile.ClusterFileError, match=re_escape(message)):
        clusterfile.read(path)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_missing_cluster_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(clusterfile.ClusterFileError, match="cannot read it"):
        clusterfile.read(tmp_path / "absent.yaml")


def test_stop_ends_a_process_it_started(tmp_path: Path) -> None:
    record, child = processes.spawn("sleeper", ["sleep", "30"], tmp_path / "log")
    assert processes.alive(record)
    assert processes.stop([record], grace=5) == []
    assert child.wait(timeout=5) != 0  # ended by SIGTERM
    assert not processes.alive(record)


def test_stop_never_signals_a_pid_whose_start_time_differs(tmp_path: Path) -> None:
    record, child = processes.spawn("sleeper", ["sleep", "30"], tmp_path / "log")
    other = processes.Process("reused", record.pid, record.start_time + 1, ("x",), "log")
    try:
        assert not processes.alive(other)
        processes.stop([other], grace=0.5)
        assert child.poll() is None  # still running: the record named another process
    finally:
        processes.stop([record], grace=5)
        child.wait(timeout=5)


def test_stop_kills_what_ignores_sigterm(tmp_path: Path) -> None:
    script = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(30)"
    record, child = processes.spawn("stubborn", [sys.executable, "-c", script], tmp_path / "log")
    deadline = 50
    while not (tmp_path / "log").read_text() and deadline:
        deadline -= 1
        subprocess.run(["sleep", "0.1"], check=True)
    killed = processes.stop([record], grace=0.5)
    assert [p.name for p in killed] == ["stubborn"]
    assert child.wait(timeout=5) == -9


def test_the_record_reads_back_as_written(tmp_path: Path) -> None:
    where = layout.Layout.at(tmp_path)
    nodes = clusterfile.read(up.DEFAULT_CLUSTER)
    record = layout.Record(
        api_url="http://127.0.0.1:1",
        kubeconfig=str(where.kubeconfig),
        cluster_file="c.yaml",
        nodes=list(nodes),
        ports={"api": 1},
        processes=[processes.Process("a", 1, 2, ("x", "y"), "a.log")],
        ready=True,
    )
    layout.write(where, record)
    assert layout.read(where) == record
    assert layout.read(layout.Layout.at(tmp_path / "none")) is None


def test_a_damaged_record_is_named(tmp_path: Path) -> None:
    where = layout.Layout.at(tmp_path)
    where.record.write_text('{"format": "something-else"}')
    with pytest.raises(layout.RecordError, match="not a sandbox record"):
        layout.read(where)


def test_up_refuses_a_bad_cluster_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("nodes: [{name: x, chip: 310P3, chips: 99}]")
    assert cli.main(["up", "--cluster", str(bad), "--dir", str(tmp_path / "sb")]) == 2
    assert "nodes[0].chips" in capsys.readouterr().err


def test_up_refuses_a_directory_whose_sandbox_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = layout.Layout.at(tmp_path)
    running, child = processes.spawn("apiserver", ["sleep", "30"], tmp_path / "log")
    try:
        layout.write(where, layout.Record("http://127.0.0.1:9", "k", "c", [], processes=[running]))
        assert cli.main(["up", "--dir", str(tmp_path)]) == 1
        assert "already running" in capsys.readouterr().err
        assert child.poll() is None
    finally:
        processes.stop([running])
        child.wait(timeout=5)


def test_up_refuses_a_directory_too_deep_for_unix_sockets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / ("d" * 90)
    assert cli.main(["up", "--dir", str(deep), "--no-prometheus"]) == 2
    assert "over Linux's 107" in capsys.readouterr().err
    assert not deep.exists()


def test_down_and_status_of_an_empty_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["down", "--dir", str(tmp_path)]) == 0
    assert "nothing to stop" in capsys.readouterr().out
    assert cli.main(["status", "--dir", str(tmp_path)]) == 1


def test_every_node_gets_its_own_ports_and_files(tmp_path: Path) -> None:
    nodes = clusterfile.read(up.DEFAULT_CLUSTER)
    pick = components.PortPicker()
    try:
        ports = components.choose_ports(nodes, pick)
    finally:
        pick.close()
    assert len(set(ports.as_dict().values())) == len(ports.as_dict()) == 3 + 2 * len(nodes)
    where = layout.Layout.at(tmp_path)

    def credentials(role: str, node: str | None) -> str:
        return f"{role}-{node}.yaml"

    names = [c.name for c in components.services(where, nodes, ports, "prometheus", credentials)]
    assert names[0] == "vnpu-scheduler"
    assert names[-1] == "prometheus"
    assert "device-plugin-b4-soft" in names
    soft = next(
        c
        for c in components.services(where, nodes, ports, None, credentials)
        if c.name == "device-plugin-b4-soft"
    )
    assert "--hami-vnpu-core" in soft.argv


def test_managed_resources_cover_every_model_once() -> None:
    resources = manifests.managed_resources()
    names = [r["name"] for r in resources]
    assert len(names) == len(set(names))
    assert {"name": "huawei.com/Ascend310P", "ignoredByScheduler": False} in resources
    assert {"name": "huawei.com/Ascend310P-memory", "ignoredByScheduler": True} in resources
