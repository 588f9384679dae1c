"""Collectives belong to the op that needs them (analysis._attributed); no f64 reaches the module."""

from __future__ import annotations

import json
import os

SCRIPT = os.path.join(os.path.dirname(__file__), "fixtures", "scripts", "layernorm_mlp.py")


def test_a_layernorm_statistics_all_reduce_belongs_to_the_norm(run_cli, tmp_path):
    # fc column-parallel: the LayerNorm normalises features split 8 ways, so its mean and
    # variance are partial sums: two small all_reduces, which are the norm's, not fc's
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"fc.weight": ["model", None], "fc.bias": ["model"]}))
    plan_path, out = tmp_path / "plan.json", tmp_path / "out.mlir"
    code, _, err = run_cli(SCRIPT, "--mesh", "1x8", "--dtype", "f32", "--evaluate", "--spec", spec,
                           "--plan-json", plan_path, "-o", out)
    assert code == 0, err
    colls = json.loads(plan_path.read_text())["collectives"]
    stats = [c for c in colls if c["kind"] == "all_reduce" and c["shape"] == [4, 128]]
    assert len(stats) == 2
    assert {c["component"] for c in stats} == {"ln"} and {c.get("cause") for c in stats} == {"norm statistics"}
    (partial,) = [c for c in colls if c["kind"] == "all_reduce" and c["shape"] == [512, 256]]
    assert partial["component"] == "out" and partial["cause"] == "row-parallel partial sums"
    assert "f64" not in out.read_text()


def test_no_f64_in_the_annotated_module(run_cli, tmp_path):
    out = tmp_path / "out.mlir"
    code, _, err = run_cli(SCRIPT, "--mesh", "1x8", "--dtype", "f32", "-o", out)
    assert code == 0, err
    assert "f64" not in out.read_text()
