"""``vnpu dra-scoring``: the kube-scheduler scoring for DRA mode, printed for the cluster's models."""

from __future__ import annotations

import io

import yaml

from vnpu_core import catalog, cli, draclasses


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["dra-scoring", *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_it_prints_most_allocated_over_the_named_models_resources() -> None:
    code, out, err = _run("--model", "310P3", "--model", "Ascend910B3", "--model", "310P3")
    assert (code, err) == (0, "")
    (entry,) = yaml.safe_load(out)["pluginConfig"]
    assert entry["name"] == "NodeResourcesFit"
    names = [r["name"] for r in entry["args"]["scoringStrategy"]["resources"]]
    assert names[0] == "huawei.com/Ascend310P"
    assert "npu.vnpu.io/ascend310p-6144m" in names
    assert "npu.vnpu.io/ascend910b3-16384m" in names
    assert len(names) == len(set(names))  # each model once
    assert entry["args"]["scoringStrategy"]["type"] == "MostAllocated"
    model = catalog.BUILTIN.by_common_word("Ascend910B3")
    assert model is not None
    assert set(draclasses.served_resources(model)) <= set(names)


def test_an_unknown_model_is_refused_naming_it() -> None:
    code, out, err = _run("--model", "H100")
    assert code == 2
    assert out == ""
    assert err.startswith("vnpu dra-scoring: --model 'H100': unknown chip model; use one of ")
